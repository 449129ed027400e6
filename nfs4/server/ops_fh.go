package server

import (
	"errors"
	"strings"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/fh"
)

// checkName validates a component name (RFC 8881 §18.9.3, §1.8.3).
func checkName(name string) nfsv4.Nfsstat4 {
	switch {
	case name == "":
		return nfsv4.NFS4ERR_INVAL
	case len(name) > fs.MaxNameLen:
		return nfsv4.NFS4ERR_NAMETOOLONG
	case name == "." || name == "..":
		return nfsv4.NFS4ERR_BADNAME
	case strings.ContainsAny(name, "/\x00"):
		return nfsv4.NFS4ERR_BADNAME
	}
	return nfsv4.NFS4_OK
}

func (c *compound) setCur(a *fs.Attr) {
	c.setCurHandle(fs.Handle{Ino: a.Ino, Gen: a.Gen, Type: a.Type})
}

func (c *compound) setCurHandle(h fs.Handle) {
	c.cur = fhState{set: true, ino: h.Ino, gen: h.Gen, typ: h.Type}
	c.curSid = nil
}

func (c *compound) needCur() nfsv4.Nfsstat4 {
	if !c.cur.set {
		return nfsv4.NFS4ERR_NOFILEHANDLE
	}
	return nfsv4.NFS4_OK
}

// needDir checks that the current file handle is a directory.
func (c *compound) needDir() nfsv4.Nfsstat4 {
	if !c.cur.set {
		return nfsv4.NFS4ERR_NOFILEHANDLE
	}
	if c.cur.typ != fs.TypeDirectory {
		return nfsv4.NFS4ERR_NOTDIR
	}
	return nfsv4.NFS4_OK
}

func (c *compound) handle(f fhState) []byte {
	if f.fh != nil {
		return f.fh
	}
	return c.s.fh.Encode(fh.Handle{Ino: uint64(f.ino), Gen: f.gen})
}

// handleFor returns the current handle if mask asks for the filehandle
// attribute, nil otherwise.
func (c *compound) handleFor(mask []uint32) []byte {
	if !bmHas(mask, nfsv4.FATTR4_FILEHANDLE) {
		return nil
	}
	return c.handle(c.cur)
}

func (c *compound) putRoot() nfsv4.Nfsstat4 {
	var a fs.Handle
	err := c.view(func(t *fs.Txn) (err error) {
		a, err = t.HandleOf(c.ctx, fs.RootIno)
		return err
	})
	if err != nil {
		return c.s.toStatus(c.ctx, "PUTROOTFH", err, aboutHandle)
	}
	c.setCurHandle(a)
	return nfsv4.NFS4_OK
}

func (c *compound) putFH(b []byte) nfsv4.Nfsstat4 {
	h, err := c.s.fh.Decode(b)
	if err != nil {
		return nfsv4.NFS4ERR_BADHANDLE
	}
	var a fs.Handle
	err = c.view(func(t *fs.Txn) (err error) {
		if c.plainRun() {
			// Not in the run's read set (fs.Txn.CheckHandle): PUTFH
			// of a directory that a concurrent run changes would
			// otherwise make this run conflict and replay whole.
			a, err = t.CheckHandle(c.ctx, fs.Ino(h.Ino))
		} else {
			a, err = t.HandleOf(c.ctx, fs.Ino(h.Ino))
		}
		return err
	})
	if err != nil {
		return c.s.toStatus(c.ctx, "PUTFH", err, aboutHandle)
	}
	if a.Gen != h.Gen {
		return nfsv4.NFS4ERR_STALE
	}
	c.setCurHandle(a)
	c.cur.fh = b
	return nfsv4.NFS4_OK
}

// plainRun reports whether the compound's operations run in a grouped
// run of a plain compound (runGrouped): each operation could have
// committed alone, so a file handle's check may be linearized apart from
// the operations after it (fs.Txn.CheckHandle). Not in transactional
// compounds, whose operations are atomic together, nor after an
// operation of the run that changed something: the check is linearized
// at the run's snapshot, before the run's changes, which take effect at
// its commit, and a PUTFH after a change must not be ordered before it
// (a PUTFH of a directory removed between the two would succeed after a
// CREATE that a reader saw not yet done while the directory was already
// gone; TestPutFHAfterChange).
func (c *compound) plainRun() bool {
	return c.txn != nil && c.plain && !c.userTxn && !c.runChanged
}

func (c *compound) getFH() (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_GETFH, st), st
	}
	return &nfsv4.NfsResop4_OP_GETFH{Opgetfh: &nfsv4.Getfh4res_NFS4_OK{
		Resok4: nfsv4.Getfh4resok{Object: c.handle(c.cur)}}}, nfsv4.NFS4_OK
}

func (c *compound) saveFH() nfsv4.Nfsstat4 {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return st
	}
	c.saved, c.savedSid = c.cur, c.curSid
	return nfsv4.NFS4_OK
}

func (c *compound) restoreFH() nfsv4.Nfsstat4 {
	if !c.saved.set {
		return nfsv4.NFS4ERR_RESTOREFH
	}
	c.cur, c.curSid = c.saved, c.savedSid
	return nfsv4.NFS4_OK
}

func (c *compound) lookup(name string) nfsv4.Nfsstat4 {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return st
	}
	if c.cur.typ == fs.TypeSymlink {
		return nfsv4.NFS4ERR_SYMLINK
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return st
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return st
	}
	var a fs.Handle
	err := c.view(func(t *fs.Txn) (err error) {
		a, err = t.Resolve(c.ctx, c.cur.ino, name)
		return err
	})
	if err != nil {
		return c.s.toStatus(c.ctx, "LOOKUP", err, aboutName)
	}
	c.setCurHandle(a)
	return nfsv4.NFS4_OK
}

func (c *compound) lookupp() nfsv4.Nfsstat4 {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return st
	}
	if c.cur.typ == fs.TypeSymlink {
		return nfsv4.NFS4ERR_SYMLINK
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return st
	}
	if c.cur.ino == fs.RootIno {
		return nfsv4.NFS4_OK // ".." of the root is the root
	}
	var a fs.Handle
	err := c.view(func(t *fs.Txn) (err error) {
		a, err = t.ParentHandle(c.ctx, c.cur.ino)
		return err
	})
	if err != nil {
		return c.s.toStatus(c.ctx, "LOOKUPP", err, aboutHandle)
	}
	c.setCurHandle(a)
	return nfsv4.NFS4_OK
}

var secFlavors = []nfsv4.Secinfo4{
	&nfsv4.Secinfo4_default{Flavor: rpcv2.AUTH_SYS},
	&nfsv4.Secinfo4_default{Flavor: rpcv2.AUTH_NONE},
}

func (c *compound) secinfo(a *nfsv4.Secinfo4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	st := c.lookupKeep(a.Name)
	if st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_SECINFO, st), st
	}
	if c.minor > 0 {
		c.cur = fhState{} // SECINFO consumes the current file handle (RFC 8881 §2.6.3.1.1.8)
	}
	return &nfsv4.NfsResop4_OP_SECINFO{Opsecinfo: &nfsv4.Secinfo4res_NFS4_OK{Resok4: secFlavors}}, nfsv4.NFS4_OK
}

// lookupKeep checks that name exists in the current directory without
// changing the current file handle.
func (c *compound) lookupKeep(name string) nfsv4.Nfsstat4 {
	saved, sid := c.cur, c.curSid
	st := c.lookup(name)
	c.cur, c.curSid = saved, sid
	return st
}

func (c *compound) secinfoNoName(style nfsv4.SecinfoStyle4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	st := c.needCur()
	if st == nfsv4.NFS4_OK && style == nfsv4.SECINFO_STYLE4_PARENT {
		st = c.lookupp()
	}
	if st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_SECINFO_NO_NAME, st), st
	}
	c.cur = fhState{}
	return &nfsv4.NfsResop4_OP_SECINFO_NO_NAME{OpsecinfoNoName: &nfsv4.Secinfo4res_NFS4_OK{Resok4: secFlavors}}, nfsv4.NFS4_OK
}

// curAttr returns the current object's attributes (and, if mask needs
// them, file-system capacity).
func (c *compound) curAttr(op string, mask []uint32) (fs.Attr, *fs.StatFS, nfsv4.Nfsstat4) {
	var a fs.Attr
	m := attrMask(mask)
	err := c.view(func(t *fs.Txn) (err error) {
		// Only the requested attributes are logged for replay: in a
		// transaction, a concurrent change of others is no conflict.
		a, err = t.GetAttrMask(c.ctx, c.cur.ino, m)
		return err
	})
	if err != nil {
		return a, nil, c.s.toStatus(c.ctx, op, err, aboutHandle)
	}
	var sfs *fs.StatFS
	if needsStatFS(mask) {
		st, err := c.s.fs.StatFS(c.ctx)
		if err != nil {
			return a, nil, c.s.toStatus(c.ctx, op, err, aboutHandle)
		}
		sfs = &st
	}
	return a, sfs, nfsv4.NFS4_OK
}

func (c *compound) getattr(mask []uint32) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_GETATTR, st), st
	}
	a, sfs, st := c.curAttr("GETATTR", mask)
	if st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_GETATTR, st), st
	}
	f := c.s.encodeAttrs(mask, &a, &attrContext{minor: c.minor, handle: c.handleFor(mask), statfs: sfs})
	return &nfsv4.NfsResop4_OP_GETATTR{Opgetattr: &nfsv4.Getattr4res_NFS4_OK{
		Resok4: nfsv4.Getattr4resok{ObjAttributes: f}}}, nfsv4.NFS4_OK
}

func (c *compound) setattr(a *nfsv4.Setattr4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return &nfsv4.NfsResop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4res{Status: st}}, st
	}
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	na, st := decodeSetAttrs(&a.ObjAttributes, c.minor)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if na.set.Size != nil {
		if c.cur.typ == fs.TypeDirectory {
			return fail(nfsv4.NFS4ERR_ISDIR)
		}
		if c.cur.typ != fs.TypeRegular {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
		s, st := c.checkStateid(a.Stateid, true)
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		// Like ftruncate on a descriptor opened for writing: write
		// permission was checked at OPEN, the mode bits may deny it
		// now (CheckIO verified that the state has write access).
		na.set.OpenForWrite = s != nil
	}
	err := c.update(func(t *fs.Txn) error {
		err := t.SetAttrOnly(c.ctx, c.cur.ino, na.set)
		return err
	})
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "SETATTR", err, aboutHandle))
	}
	return &nfsv4.NfsResop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4res{Status: nfsv4.NFS4_OK, Attrsset: na.mask}}, nfsv4.NFS4_OK
}

// verify implements VERIFY (same=true) and NVERIFY by comparing encoded
// attribute values (RFC 8881 §18.31.3).
func (c *compound) verify(f *nfsv4.Fattr4, same bool) nfsv4.Nfsstat4 {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return st
	}
	if bmHas(f.Attrmask, nfsv4.FATTR4_RDATTR_ERROR) {
		return nfsv4.NFS4ERR_INVAL
	}
	sup := supportedAttrs(c.minor)
	bad := false
	forEachBit(f.Attrmask, func(bit uint32) bool {
		if !bmHas(sup, bit) {
			bad = true
		}
		if bmHas(writeOnlyAttrs, bit) {
			bad = true
		}
		return !bad
	})
	if bad {
		return nfsv4.NFS4ERR_ATTRNOTSUPP
	}
	a, sfs, st := c.curAttr("VERIFY", f.Attrmask)
	if st != nfsv4.NFS4_OK {
		return st
	}
	mine := c.s.encodeAttrs(f.Attrmask, &a, &attrContext{minor: c.minor, handle: c.handleFor(f.Attrmask), statfs: sfs})
	equal := string(mine.AttrVals) == string(f.AttrVals)
	switch {
	case same && !equal:
		return nfsv4.NFS4ERR_NOT_SAME
	case !same && equal:
		return nfsv4.NFS4ERR_SAME
	}
	return nfsv4.NFS4_OK
}

func (c *compound) access(req uint32) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_ACCESS, st), st
	}
	const all = nfsv4.ACCESS4_READ | nfsv4.ACCESS4_LOOKUP | nfsv4.ACCESS4_MODIFY |
		nfsv4.ACCESS4_EXTEND | nfsv4.ACCESS4_DELETE | nfsv4.ACCESS4_EXECUTE
	supported := req & all
	var allowed uint32
	err := c.view(func(t *fs.Txn) (err error) {
		allowed, err = t.Access(c.ctx, c.cur.ino, fs.AccessRead|fs.AccessWrite|fs.AccessExecute)
		return err
	})
	if err != nil {
		st := c.s.toStatus(c.ctx, "ACCESS", err, aboutHandle)
		return errRes(nfsv4.OP_ACCESS, st), st
	}
	var granted uint32
	isDir := c.cur.typ == fs.TypeDirectory
	if allowed&fs.AccessRead != 0 {
		granted |= nfsv4.ACCESS4_READ
	}
	if allowed&fs.AccessWrite != 0 {
		granted |= nfsv4.ACCESS4_MODIFY | nfsv4.ACCESS4_EXTEND
		if isDir {
			granted |= nfsv4.ACCESS4_DELETE
		}
	}
	if allowed&fs.AccessExecute != 0 {
		if isDir {
			granted |= nfsv4.ACCESS4_LOOKUP
		} else {
			granted |= nfsv4.ACCESS4_EXECUTE
		}
	}
	return &nfsv4.NfsResop4_OP_ACCESS{Opaccess: &nfsv4.Access4res_NFS4_OK{
		Resok4: nfsv4.Access4resok{Supported: supported, Access: granted & supported}}}, nfsv4.NFS4_OK
}

var errStop = errors.New("stop")
