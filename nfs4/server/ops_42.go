package server

import (
	"errors"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/state"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// twoFiles checks the saved (source) and current (destination) handles of
// COPY and CLONE and their stateids, and returns the source's and the
// destination's states (nil for an anonymous stateid, whose access
// copyRange checks against the credential).
func (c *compound) twoFiles(srcSid, dstSid nfsv4.Stateid4) (src, dst *state.State, st nfsv4.Nfsstat4) {
	if !c.saved.set || !c.cur.set {
		return nil, nil, nfsv4.NFS4ERR_NOFILEHANDLE
	}
	if c.saved.typ == fs.TypeDirectory || c.cur.typ == fs.TypeDirectory {
		return nil, nil, nfsv4.NFS4ERR_ISDIR
	}
	if c.saved.typ != fs.TypeRegular || c.cur.typ != fs.TypeRegular {
		return nil, nil, nfsv4.NFS4ERR_WRONG_TYPE
	}
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return nil, nil, st
	}
	srcSid, st = c.resolveSid(srcSid)
	if st != nfsv4.NFS4_OK {
		return nil, nil, st
	}
	if src, st = c.s.st.CheckIO(srcSid, c.minor, uint64(c.saved.ino), false); st != nfsv4.NFS4_OK {
		return nil, nil, st
	}
	if dst, st = c.checkStateid(dstSid, true); st != nfsv4.NFS4_OK {
		return nil, nil, st
	}
	return src, dst, nfsv4.NFS4_OK
}

// copyRange copies (COPY) or clones (CLONE) a range of the saved file into
// the current one. Under an anonymous stateid the credential must be
// allowed to read the source and write the destination, as for READ and
// WRITE.
func (c *compound) copyRange(op string, srcState, dstState *state.State, srcOff, dstOff, n uint64) (uint64, nfsv4.Nfsstat4) {
	var copied uint64
	err := c.update(func(t *fs.Txn) (err error) {
		if err := c.checkAnonAccessTo(t, srcState, c.saved.ino, fs.AccessRead); err != nil {
			return err
		}
		if err := c.checkAnonAccessTo(t, dstState, c.cur.ino, fs.AccessWrite); err != nil {
			return err
		}
		src, err := t.GetAttr(c.ctx, c.saved.ino)
		if err != nil {
			return err
		}
		if srcOff > src.Size || n != 0 && n > src.Size-srcOff && op == "CLONE" { // (no wrap: srcOff <= Size)
			return fs.ErrInvalid
		}
		copied, err = t.CopyRange(c.ctx, c.saved.ino, srcOff, c.cur.ino, dstOff, n)
		return err
	})
	if err != nil {
		return 0, c.s.toStatus(c.ctx, op, err, aboutHandle)
	}
	return copied, nfsv4.NFS4_OK
}

// copy implements a synchronous, intra-server COPY (RFC 7862 §15.2) as a
// metadata-only slice copy.
func (c *compound) copy(a *nfsv4.Copy4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_COPY, st), st
	}
	if len(a.CaSourceServer) > 0 {
		return fail(nfsv4.NFS4ERR_OFFLOAD_DENIED)
	}
	srcState, dstState, st := c.twoFiles(a.CaSrcStateid, a.CaDstStateid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if c.saved.ino == c.cur.ino {
		// Overlapping ranges in one file are not supported by COPY.
		if a.CaSrcOffset < a.CaDstOffset+max(a.CaCount, 1) && a.CaDstOffset < a.CaSrcOffset+max(a.CaCount, 1) {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
	}
	n, st := c.copyRange("COPY", srcState, dstState, a.CaSrcOffset, a.CaDstOffset, a.CaCount)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	return &nfsv4.NfsResop4_OP_COPY{Opcopy: &nfsv4.Copy4res_NFS4_OK{CrResok4: nfsv4.Copy4resok{
		CrResponse:     nfsv4.WriteResponse4{WrCount: n, WrCommitted: nfsv4.FILE_SYNC4, WrWriteverf: c.s.verf},
		CrRequirements: nfsv4.CopyRequirements4{CrConsecutive: true, CrSynchronous: true},
	}}}, nfsv4.NFS4_OK
}

func (c *compound) clone(a *nfsv4.Clone4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	res := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return &nfsv4.NfsResop4_OP_CLONE{Opclone: nfsv4.Clone4res{ClStatus: st}}, st
	}
	srcState, dstState, st := c.twoFiles(a.ClSrcStateid, a.ClDstStateid)
	if st != nfsv4.NFS4_OK {
		return res(st)
	}
	_, st = c.copyRange("CLONE", srcState, dstState, a.ClSrcOffset, a.ClDstOffset, a.ClCount)
	return res(st)
}

func (c *compound) deallocate(a *nfsv4.Deallocate4args) nfsv4.Nfsstat4 {
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return st
	}
	s, st := c.checkStateid(a.DaStateid, true)
	if st != nfsv4.NFS4_OK {
		return st
	}
	err := c.update(func(t *fs.Txn) error {
		if err := c.checkAnonAccess(t, s, fs.AccessWrite); err != nil {
			return err
		}
		return t.Punch(c.ctx, c.cur.ino, a.DaOffset, a.DaLength)
	})
	return c.s.toStatus(c.ctx, "DEALLOCATE", err, aboutHandle)
}

func (c *compound) allocate(a *nfsv4.Allocate4args) nfsv4.Nfsstat4 {
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return st
	}
	s, st := c.checkStateid(a.AaStateid, true)
	if st != nfsv4.NFS4_OK {
		return st
	}
	err := c.update(func(t *fs.Txn) error {
		if err := c.checkAnonAccess(t, s, fs.AccessWrite); err != nil {
			return err
		}
		return t.Allocate(c.ctx, c.cur.ino, a.AaOffset, a.AaLength)
	})
	return c.s.toStatus(c.ctx, "ALLOCATE", err, aboutHandle)
}

func (c *compound) seek(a *nfsv4.Seek4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_SEEK, st), st
	}
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	s, st := c.checkStateid(a.SaStateid, false)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	whence := fs.SeekData
	switch a.SaWhat {
	case nfsv4.NFS4_CONTENT_DATA:
	case nfsv4.NFS4_CONTENT_HOLE:
		whence = fs.SeekHole
	default:
		return fail(nfsv4.NFS4ERR_UNION_NOTSUPP)
	}
	var off uint64
	var eof bool
	var size uint64
	err := c.view(func(t *fs.Txn) (err error) {
		// The data layout is the file's content too: an anonymous
		// stateid needs read access, as for READ.
		if err := c.checkAnonAccess(t, s, fs.AccessRead); err != nil {
			return err
		}
		attr, err := t.GetAttr(c.ctx, c.cur.ino)
		if err != nil {
			return err
		}
		size = attr.Size
		off, eof, err = t.Seek(c.ctx, c.cur.ino, a.SaOffset, whence)
		return err
	})
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "SEEK", err, aboutHandle))
	}
	if a.SaOffset >= size || whence == fs.SeekData && eof {
		return fail(nfsv4.NFS4ERR_NXIO)
	}
	return &nfsv4.NfsResop4_OP_SEEK{Opseek: &nfsv4.Seek4res_NFS4_OK{Resok4: nfsv4.SeekRes4{SrEof: eof, SrOffset: off}}}, nfsv4.NFS4_OK
}

// readPlus implements READ_PLUS returning the data as one DATA segment
// (holes read as zeros, which RFC 7862 §15.10 permits).
func (c *compound) readPlus(a *nfsv4.ReadPlus4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	data, eof, st := c.readData("READ_PLUS", a.RpaStateid, a.RpaOffset, a.RpaCount)
	if st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_READ_PLUS, st), st
	}
	var contents []nfsv4.ReadPlusContent
	if len(data) > 0 {
		contents = []nfsv4.ReadPlusContent{&nfsv4.ReadPlusContent_NFS4_CONTENT_DATA{
			RpcData: nfsv4.Data4{DOffset: a.RpaOffset, DData: data}}}
	}
	return &nfsv4.NfsResop4_OP_READ_PLUS{OpreadPlus: &nfsv4.ReadPlus4res_NFS4_OK{
		RpResok4: nfsv4.ReadPlusRes4{RprEof: eof, RprContents: contents}}}, nfsv4.NFS4_OK
}
