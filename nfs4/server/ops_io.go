package server

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/state"
	"github.com/txnfs/txnfs/slice"
)

// resolveSid substitutes the 4.1 "current stateid". A stateid CLOSEd
// earlier in the compound whose CLOSE takes effect only at the commit (in
// a transaction or a grouped run) is already bad.
func (c *compound) resolveSid(id nfsv4.Stateid4) (nfsv4.Stateid4, nfsv4.Nfsstat4) {
	if c.minor > 0 && state.IsCurrent(id) {
		if c.curSid == nil {
			return id, nfsv4.NFS4ERR_BAD_STATEID
		}
		id = *c.curSid
	}
	if c.closing[id.Other] && !state.IsAnonymous(id) {
		return id, nfsv4.NFS4ERR_BAD_STATEID
	}
	return id, nfsv4.NFS4_OK
}

// isClosing reports a state CLOSEd earlier in the compound (see
// resolveSid); an OPEN by the same owner gets a new state instead of
// upgrading it.
func (c *compound) isClosing(other [12]byte) bool { return c.closing[other] }

func (c *compound) setSid(id nfsv4.Stateid4) { c.curSid = &id }

// checkStateid validates id for I/O on the current file. Anonymous
// stateids are checked against the mode bits instead of open state.
func (c *compound) checkStateid(id nfsv4.Stateid4, write bool) (*state.State, nfsv4.Nfsstat4) {
	id, st := c.resolveSid(id)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	s, st := c.s.st.CheckIO(id, c.minor, uint64(c.cur.ino), write)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	return s, nfsv4.NFS4_OK
}

// needFile checks that the current file handle is a regular file.
func (c *compound) needFile() nfsv4.Nfsstat4 {
	if !c.cur.set {
		return nfsv4.NFS4ERR_NOFILEHANDLE
	}
	switch c.cur.typ {
	case fs.TypeRegular:
		return nfsv4.NFS4_OK
	case fs.TypeDirectory:
		return nfsv4.NFS4ERR_ISDIR
	case fs.TypeSymlink:
		if c.minor == 0 {
			return nfsv4.NFS4ERR_INVAL
		}
		return nfsv4.NFS4ERR_SYMLINK
	}
	if c.minor == 0 {
		return nfsv4.NFS4ERR_INVAL
	}
	return nfsv4.NFS4ERR_WRONG_TYPE
}

// openClient returns the client an OPEN/LOCK acts for.
func (c *compound) openClient(clientID uint64) (*state.Client, nfsv4.Nfsstat4) {
	if c.minor > 0 {
		if c.client == nil {
			return nil, nfsv4.NFS4ERR_OP_NOT_IN_SESSION
		}
		return c.client, nfsv4.NFS4_OK
	}
	cl, st := c.s.st.Client(clientID)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	return cl, nfsv4.NFS4_OK
}

// exclTime encodes an exclusive-create verifier as an atime (RFC 8881
// §18.16.3 lets the server keep it in a time attribute).
func exclTime(v [8]byte) time.Time {
	return time.Unix(int64(binary.BigEndian.Uint32(v[:4])), int64(binary.BigEndian.Uint32(v[4:])%1e9))
}

func (c *compound) open(a *nfsv4.Open4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_OPEN, st), st
	}
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	access := a.ShareAccess &^ nfsv4.OPEN4_SHARE_ACCESS_WANT_DELEG_MASK
	if c.minor == 0 {
		access = a.ShareAccess
	}
	if access == 0 || access > nfsv4.OPEN4_SHARE_ACCESS_BOTH || a.ShareDeny > nfsv4.OPEN4_SHARE_DENY_BOTH {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	cl, st := c.openClient(a.Owner.Clientid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}

	var name string
	byName, reclaim := false, false
	switch cl := a.Claim.(type) {
	case *nfsv4.OpenClaim4_CLAIM_NULL:
		name, byName = cl.File, true
	case *nfsv4.OpenClaim4_CLAIM_FH:
		if c.minor == 0 {
			return fail(nfsv4.NFS4ERR_NOTSUPP)
		}
	case *nfsv4.OpenClaim4_CLAIM_PREVIOUS:
		// Reclaim of an open of the current file held before the
		// server restarted (grace period: nfs4/internal/state/grace.go).
		reclaim = true
		if cl.DelegateType != nfsv4.OPEN_DELEGATE_NONE {
			return fail(nfsv4.NFS4ERR_RECLAIM_BAD) // no delegation was ever granted
		}
	case *nfsv4.OpenClaim4_CLAIM_DELEGATE_CUR, *nfsv4.OpenClaim4_CLAIM_DELEG_CUR_FH:
		return fail(nfsv4.NFS4ERR_BAD_STATEID) // no delegations are ever granted
	default:
		return fail(nfsv4.NFS4ERR_NOTSUPP)
	}
	if st := c.s.st.CheckReclaim(cl, reclaim); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if byName {
		if c.cur.typ == fs.TypeSymlink {
			return fail(nfsv4.NFS4ERR_SYMLINK)
		}
		if st := c.needDir(); st != nfsv4.NFS4_OK {
			return fail(st)
		}
		if st := checkName(name); st != nfsv4.NFS4_OK {
			return fail(st)
		}
	}

	var (
		create   bool
		req      = fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644}
		na       newAttrs
		verf     *[8]byte
		truncate bool
	)
	if how, ok := a.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); ok {
		if !byName {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
		create = true
		switch h := how.How.(type) {
		case *nfsv4.Createhow4_UNCHECKED4:
			na, st = decodeSetAttrs(&h.Createattrs, c.minor)
		case *nfsv4.Createhow4_GUARDED4:
			na, st = decodeSetAttrs(&h.Createattrs, c.minor)
			req.Exclusive = true
		case *nfsv4.Createhow4_EXCLUSIVE4:
			v := h.Createverf
			verf, req.Exclusive = &v, true
		case *nfsv4.Createhow4_EXCLUSIVE4_1:
			if c.minor == 0 {
				return fail(nfsv4.NFS4ERR_INVAL)
			}
			v := h.ChCreateboth.CvaVerf
			verf, req.Exclusive = &v, true
			na, st = decodeSetAttrs(&h.ChCreateboth.CvaAttrs, c.minor)
			if st == nfsv4.NFS4_OK && na.set.Atime != nil {
				st = nfsv4.NFS4ERR_INVAL // atime holds the verifier
			}
		}
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		if na.set.Mode != nil {
			req.Mode = *na.set.Mode
			na.set.Mode = nil
		}
		if na.set.Size != nil {
			if *na.set.Size != 0 || verf != nil {
				// Only truncation to zero is meaningful at open, and
				// only UNCHECKED4 opens an existing file with it: an
				// exclusive create that finds its own file (a
				// retransmission) does not apply the attributes again.
				na.set.Size = nil
			} else {
				truncate = true
			}
		}
	}

	// Only what the client sees is read from the engine, so that in a
	// transactional compound a concurrent change to something it does
	// not see cannot force a re-execution: the opened file is resolved
	// to a handle (no size, times or change), and the directory's change
	// attribute is read for change_info only when the OPEN may create.
	before, after := new(uint64), new(uint64)
	var obj fs.Handle
	var created bool
	// An OPEN that neither creates nor truncates changes nothing: it runs
	// in the compound's read snapshot, not in a read-write transaction.
	run := c.update
	if !create && !truncate {
		run = c.view
	}
	if create && !c.lockDir(c.cur.ino) {
		return fail(nfsv4.NFS4ERR_DELAY)
	}
	// mark is the snapshot obj was resolved in (pinOpened skips its
	// check when no commit was applied since).
	var mark fs.SnapshotMark
	body := func(t *fs.Txn) (err error) {
		created = false
		defer func() { mark = t.Mark() }()
		if !byName {
			obj, err = t.HandleOf(c.ctx, c.cur.ino)
			return err
		}
		if create {
			if err = c.mark(t, c.cur.ino, before); err != nil {
				return err
			}
			var a fs.Attr
			a, created, err = t.Create(c.ctx, c.cur.ino, name, req)
			if err != nil && verf != nil && isExist(err) {
				// A retransmitted exclusive create succeeds if the
				// verifier matches (RFC 8881 §18.16.3).
				var cur fs.Attr
				cur, err2 := t.Lookup(c.ctx, c.cur.ino, name)
				if err2 == nil && cur.Type == fs.TypeRegular && cur.Atime.Equal(exclTime(*verf)) {
					a, err = cur, nil
				}
			}
			if err != nil {
				return err
			}
			obj = fs.Handle{Ino: a.Ino, Gen: a.Gen, Type: a.Type}
		} else if obj, err = t.Resolve(c.ctx, c.cur.ino, name); err != nil {
			return err
		}
		if obj.Type != fs.TypeRegular {
			return nil // reported below
		}
		if !created {
			var mask uint32
			if access&nfsv4.OPEN4_SHARE_ACCESS_READ != 0 {
				mask |= fs.AccessRead
			}
			if access&nfsv4.OPEN4_SHARE_ACCESS_WRITE != 0 || truncate {
				mask |= fs.AccessWrite
			}
			allowed, err := t.Access(c.ctx, obj.Ino, mask)
			if err != nil {
				return err
			}
			if allowed&mask != mask {
				return fs.ErrAccess
			}
		}
		set := fs.SetAttr{}
		if created {
			set = na.set
			set.Size = nil
			if verf != nil {
				set.Atime = &fs.SetTime{Time: exclTime(*verf)}
			}
		} else if truncate {
			// The open is recorded only after this commit: what
			// would refuse it (a share reservation of another
			// owner, e.g. OPEN4_SHARE_DENY_WRITE) is checked before
			// the file is truncated, not just after.
			if st := c.s.st.CheckOpen(cl, a.Owner.Owner, uint64(obj.Ino), access, a.ShareDeny, c.isClosing); st != nfsv4.NFS4_OK {
				return openRefused{st}
			}
			// O_TRUNC: POSIX updates mtime and ctime even when the
			// file is already empty.
			zero := uint64(0)
			set.Size = &zero
		}
		if set != (fs.SetAttr{}) {
			if err = t.SetAttrOnly(c.ctx, obj.Ino, set); err != nil {
				return err
			}
		}
		if create {
			err = c.mark(t, c.cur.ino, after)
		}
		return err
	}
	// The opened inode is pinned (kept alive as an orphan if its last
	// name goes) before the open state is recorded, and found still
	// existing in a snapshot taken after the pin: a rename or remove
	// that committed between the lookup and the pin deleted it, and the
	// OPEN runs again (see pinOpened).
	pinned := false
	for attempt := 0; ; attempt++ {
		err := run(body)
		var refused openRefused
		if errors.As(err, &refused) {
			return fail(refused.st)
		}
		if err != nil {
			// CLAIM_FH and CLAIM_PREVIOUS of a deleted file: STALE
			// (a Linux client then looks the name up again).
			about := aboutName
			if !byName {
				about = aboutHandle
			}
			return fail(c.s.toStatus(c.ctx, "OPEN", err, about))
		}
		if obj.Type != fs.TypeRegular {
			break
		}
		if c.txn != nil && (created || c.txnCreated[obj.Ino]) {
			// Created by this transaction: others cannot see it, let
			// alone delete it, before it commits; the open state's pin
			// keeps it from then on.
			if created {
				c.noteTxnCreated(obj.Ino)
			}
			break
		}
		live, err := c.pinOpened(obj, mark)
		if err != nil {
			return fail(c.s.toStatus(c.ctx, "OPEN", err, aboutHandle))
		}
		if live {
			pinned = true
			break
		}
		if c.joined != nil {
			// A multi-compound transaction reads its snapshot, which
			// is older than the removal: like any read that changed,
			// this makes its END fail with NOT_SAME (nothing of it,
			// this open state included, survives).
			c.joined.openedGone = true
			break
		}
		if c.txn != nil {
			// Only a re-execution on a fresh snapshot can open the file
			// that has the name now: runTxn re-runs the compound.
			c.reopen = true
			return fail(nfsv4.NFS4ERR_DELAY)
		}
		c.endView()
		if attempt >= maxOpenRetries || !c.backoff(attempt) {
			return fail(nfsv4.NFS4ERR_DELAY)
		}
	}
	if pinned {
		defer c.s.unpin(obj.Ino)
	}
	switch obj.Type {
	case fs.TypeRegular:
	case fs.TypeDirectory:
		return fail(nfsv4.NFS4ERR_ISDIR)
	case fs.TypeSymlink:
		return fail(nfsv4.NFS4ERR_SYMLINK)
	default:
		if c.minor == 0 {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
		return fail(nfsv4.NFS4ERR_WRONG_TYPE)
	}
	sid, undo, st := c.s.st.OpenSkipping(cl, a.Owner.Owner, uint64(obj.Ino), access, a.ShareDeny, c.isClosing)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if c.txn != nil {
		c.undo = append(c.undo, func() { c.s.st.UndoOpen(undo) })
	}
	c.setCurHandle(obj)
	c.setSid(sid)
	var attrset []uint32
	if created {
		attrset = na.mask
		if verf != nil {
			attrset = bmSet(attrset, nfsv4.FATTR4_TIME_ACCESS)
		}
	}
	// Without create the directory did not change: change_info is
	// reported as not atomic, with before = after = 0 (clients use it
	// only for creating opens).
	var deleg nfsv4.OpenDelegation4 = &nfsv4.OpenDelegation4_OPEN_DELEGATE_NONE{}
	if c.minor > 0 && a.ShareAccess&nfsv4.OPEN4_SHARE_ACCESS_WANT_DELEG_MASK != 0 &&
		a.ShareAccess&nfsv4.OPEN4_SHARE_ACCESS_WANT_DELEG_MASK != nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_DELEG {
		deleg = &nfsv4.OpenDelegation4_OPEN_DELEGATE_NONE_EXT{OdWhynone: &nfsv4.OpenNoneDelegation4_default{OndWhy: nfsv4.WND4_NOT_SUPP_FTYPE}}
	}
	ok := &nfsv4.Open4res_NFS4_OK{Resok4: nfsv4.Open4resok{
		Stateid:    sid,
		Rflags:     nfsv4.OPEN4_RESULT_LOCKTYPE_POSIX,
		Attrset:    attrset,
		Delegation: deleg,
	}}
	if create {
		c.setCinfo(&ok.Resok4.Cinfo, before, after)
	}
	return &nfsv4.NfsResop4_OP_OPEN{Opopen: ok}, nfsv4.NFS4_OK
}

// openRefused ends an OPEN's transaction before the truncation it was
// about to make when the open could not be recorded (a share reservation
// denies it, the client expired): st is the OPEN's status.
type openRefused struct{ st nfsv4.Nfsstat4 }

func (e openRefused) Error() string { return "open refused: " + statusName(e.st) }

func isExist(err error) bool { return errorsIs(err, fs.ErrExist) }

// noteTxnCreated records that the transaction created regular file ino
// (forgotten if it does not commit).
func (c *compound) noteTxnCreated(ino fs.Ino) {
	if c.txnCreated == nil {
		c.txnCreated = map[fs.Ino]bool{}
	}
	m := c.txnCreated
	m[ino] = true
	c.undo = append(c.undo, func() { delete(m, ino) })
}

// maxOpenRetries bounds how often a plain OPEN runs again (with backoff)
// because the file it resolved was deleted before it could be pinned:
// only a name renamed over or removed continuously for ~0.4 s
// gets NFS4ERR_DELAY.
const maxOpenRetries = 16

// pinOpened pins inode h for an OPEN that resolved it (in the snapshot of
// mark, not creating it) and reports whether it still exists (same
// generation) in a snapshot begun after the pin. When no commit was
// applied since mark's snapshot (fs.UnchangedSince, read after the pin),
// such a snapshot would read what the OPEN read, so no snapshot is taken
// (ENGINE-REQUESTS 16).
// fs.Pin guarantees that no deletion that did not see the pin commits
// after it returns, so a live answer means the inode stays (at worst as an
// orphan) until the pin is released; the caller then records the open
// state, whose own pin takes over, and releases this one. If the inode is
// gone the pin is released and false returned: a concurrent rename-over
// or remove committed between the OPEN's lookup and the pin.
func (c *compound) pinOpened(h fs.Handle, mark fs.SnapshotMark) (bool, error) {
	c.s.fs.Pin(h.Ino)
	if c.s.fs.UnchangedSince(mark) {
		return true, nil
	}
	t, err := c.s.fs.Begin(c.ctx, fs.RootCred, fs.TxnOptions{ReadOnly: true})
	if err == nil {
		var cur fs.Handle
		cur, err = t.HandleOf(c.ctx, h.Ino)
		t.Abort()
		if err == nil && cur.Gen == h.Gen {
			return true, nil
		}
	}
	c.s.unpin(h.Ino)
	if err == nil || errorsIs(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

func (c *compound) close(a *nfsv4.Close4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_CLOSE, st), st
	}
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	id, st := c.resolveSid(a.OpenStateid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if c.txn != nil {
		// Validate now (all of CLOSE's checks), close after the commit;
		// the stateid is bad for the rest of the compound at once.
		s, st := c.s.st.CheckClose(id, c.minor, uint64(c.cur.ino))
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		ino := uint64(c.cur.ino)
		c.onCommit = append(c.onCommit, func() { c.s.st.Close(id, c.minor, ino) })
		if c.closing == nil {
			c.closing = map[[12]byte]bool{}
		}
		other := id.Other
		closing := c.closing
		closing[other] = true
		c.undo = append(c.undo, func() { delete(closing, other) })
		c.curSid = nil
		out := nfsv4.Stateid4{Seqid: 0xffffffff}
		if c.minor == 0 {
			out = nfsv4.Stateid4{Seqid: s.Seqid + 1, Other: s.Other}
		}
		return &nfsv4.NfsResop4_OP_CLOSE{Opclose: &nfsv4.Close4res_NFS4_OK{OpenStateid: out}}, nfsv4.NFS4_OK
	}
	out, st := c.s.st.Close(id, c.minor, uint64(c.cur.ino))
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	c.curSid = nil
	return &nfsv4.NfsResop4_OP_CLOSE{Opclose: &nfsv4.Close4res_NFS4_OK{OpenStateid: out}}, nfsv4.NFS4_OK
}

func (c *compound) openConfirm(a *nfsv4.OpenConfirm4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_OPEN_CONFIRM, st), st
	}
	out, st := c.s.st.Confirm(a.OpenStateid, uint64(c.cur.ino))
	if st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_OPEN_CONFIRM, st), st
	}
	return &nfsv4.NfsResop4_OP_OPEN_CONFIRM{OpopenConfirm: &nfsv4.OpenConfirm4res_NFS4_OK{
		Resok4: nfsv4.OpenConfirm4resok{OpenStateid: out}}}, nfsv4.NFS4_OK
}

func (c *compound) openDowngrade(a *nfsv4.OpenDowngrade4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_OPEN_DOWNGRADE, st), st
	}
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	id, st := c.resolveSid(a.OpenStateid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	out, st := c.s.st.Downgrade(id, c.minor, uint64(c.cur.ino),
		a.ShareAccess&^nfsv4.OPEN4_SHARE_ACCESS_WANT_DELEG_MASK, a.ShareDeny)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	c.setSid(out)
	return &nfsv4.NfsResop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: &nfsv4.OpenDowngrade4res_NFS4_OK{
		Resok4: nfsv4.OpenDowngrade4resok{OpenStateid: out}}}, nfsv4.NFS4_OK
}

// checkAnonAccess enforces mode bits for I/O with an anonymous stateid.
func (c *compound) checkAnonAccess(t *fs.Txn, s *state.State, mask uint32) error {
	return c.checkAnonAccessTo(t, s, c.cur.ino, mask)
}

// checkAnonAccessTo is checkAnonAccess for the file ino.
func (c *compound) checkAnonAccessTo(t *fs.Txn, s *state.State, ino fs.Ino, mask uint32) error {
	if s != nil {
		return nil
	}
	allowed, err := t.Access(c.ctx, ino, mask)
	if err != nil {
		return err
	}
	if allowed&mask != mask {
		return fs.ErrAccess
	}
	return nil
}

func (c *compound) read(a *nfsv4.Read4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_READ, st), st
	}
	data, eof, st := c.readData("READ", a.Stateid, a.Offset, a.Count)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	return &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: eof, Data: data}}}, nfsv4.NFS4_OK
}

func (c *compound) readData(op string, sid nfsv4.Stateid4, off uint64, count uint32) ([]byte, bool, nfsv4.Nfsstat4) {
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return nil, false, st
	}
	s, st := c.checkStateid(sid, false)
	if st != nfsv4.NFS4_OK {
		return nil, false, st
	}
	// The buffer is pooled: the reply references it (no copy into the
	// encoding) and it is returned to the pool once the reply is written.
	pb := c.s.getBuf(min(count, c.s.cfg.MaxIO))
	buf := *pb
	var n int
	var eof bool
	err := c.view(func(t *fs.Txn) (err error) {
		if err := c.checkAnonAccess(t, s, fs.AccessRead); err != nil {
			return err
		}
		n, eof, err = t.Read(c.ctx, c.cur.ino, off, buf)
		return err
	})
	if err != nil {
		c.s.putBuf(pb)
		return nil, false, c.s.toStatus(c.ctx, op, err, aboutHandle)
	}
	c.bufs = append(c.bufs, pb)
	return buf[:n], eof, nfsv4.NFS4_OK
}

// appendOffset is the vNFS append extension's WRITE offset.
const appendOffset = math.MaxUint64

func (c *compound) write(a *nfsv4.Write4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_WRITE, st), st
	}
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	s, st := c.checkStateid(a.Stateid, true)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if uint32(len(a.Data)) > c.s.cfg.MaxIO {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	var err error
	off := a.Offset
	// In a plain compound an UNSTABLE WRITE commits NoSync: durable at
	// the next COMMIT (FS.Sync); any other WRITE is durable at the reply
	// (see needsDurable), as is everything in a transaction.
	committed := nfsv4.FILE_SYNC4
	if c.plain && a.Stable == nfsv4.UNSTABLE4 {
		committed = nfsv4.UNSTABLE4
	}
	switch {
	case a.Offset == appendOffset && c.txn == nil && s != nil:
		// Group-committed atomic append outside transactions (durable).
		c.endView()
		c.keepArgs = true // Append may return before its batch wrote the data
		off, err = c.s.fs.Append(c.ctx, c.cred, c.cur.ino, a.Data)
		committed = nfsv4.FILE_SYNC4
	case a.Offset == appendOffset:
		err = c.update(func(t *fs.Txn) (err error) {
			if err := c.checkAnonAccess(t, s, fs.AccessWrite); err != nil {
				return err
			}
			if !c.wantOffset {
				// Nobody asks where the data went: an append whose
				// replay re-places it at the new end of file, so
				// concurrent appenders do not conflict.
				return t.AppendAtEnd(c.ctx, c.cur.ino, a.Data)
			}
			off, err = t.Append(c.ctx, c.cur.ino, a.Data)
			return err
		})
	default:
		if a.Offset+uint64(len(a.Data)) < a.Offset {
			return fail(nfsv4.NFS4ERR_FBIG)
		}
		err = c.update(func(t *fs.Txn) error {
			if err := c.checkAnonAccess(t, s, fs.AccessWrite); err != nil {
				return err
			}
			if len(a.Data) < alignPayloadMin {
				return t.Write(c.ctx, c.cur.ino, a.Offset, a.Data)
			}
			if !c.payloadWrite {
				c.payloadWrite = true
				c.s.payloadWrites.Add(1)
			}
			lend := c.syncFollows || c.userTxn
			if c.call != nil {
				// A lent payload's write overlaps the commit: when
				// it is the only large WRITE running, the slice
				// store hashes it then, off the critical path, and
				// the connection stops hashing records while they
				// arrive, which delayed the write's start. With
				// others running the CPU is what limits: the
				// hashing right after each read, from the cache, is
				// cheaper (docs/nfs-server.md "Session 13"). A
				// payload written in place is hashed while it
				// arrives.
				c.call.HashPayloads(!lend || c.s.payloadWrites.Load() > 1)
			}
			pl := slice.PayloadOf(a.Data)
			crc, hashed := c.payloadCRC(a.Data)
			if hashed {
				pl = slice.NewPayload(a.Data, crc)
			}
			ctx := c.ctx
			switch {
			case lend:
				// The compound waits for a log flush before its
				// reply: the write overlaps the commit and the log
				// write, and that flush follows it.
				ctx = c.lendPayload(ctx)
			case !hashed:
				// Not hashed while it arrived (not the
				// compound's first payload, or the connection's
				// previous one was lent): staged and hashed by
				// the store.
				return t.Write(c.ctx, c.cur.ino, a.Offset, a.Data)
			case !c.moreWrites:
				// The last WRITE of its transaction, which
				// commits, and waits for the data, as soon as
				// the operations after it (metadata only) ran:
				// the write runs here, not in a goroutine of
				// its own, whose start and end cost two thread
				// wake-ups and overlapped nothing
				// (docs/nfs-server.md "Session 11"). Earlier
				// WRITEs lend their payload to a background
				// write that overlaps the later ones.
				ctx = slice.WithUnstaged(ctx)
			}
			return t.WritePayload(ctx, c.cur.ino, a.Offset, pl)
		})
	}
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "WRITE", err, aboutHandle))
	}
	c.wrote, c.wroteOff = true, off
	return &nfsv4.NfsResop4_OP_WRITE{Opwrite: &nfsv4.Write4res_NFS4_OK{Resok4: nfsv4.Write4resok{
		Count: uint32(len(a.Data)), Committed: committed, Writeverf: c.s.verf}}}, nfsv4.NFS4_OK
}

// payloadCRC returns the CRC32C of a large WRITE's data if the rpc layer
// computed it while the request arrived (rpc.Call.PayloadCRC): the slice
// store then does not hash the data again (slice.Payload).
func (c *compound) payloadCRC(data []byte) (uint32, bool) {
	if c.call == nil || len(data) < alignPayloadMin {
		return 0, false
	}
	crc, ok := c.call.PayloadCRC(data)
	if ok {
		c.s.met.payloadCRC.Inc()
	}
	return crc, ok
}

// appendOffset implements OpAppendOffset: the offset the immediately
// preceding WRITE wrote at.
func (c *compound) appendOffset(flags uint32, wrote bool) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	st := nfsv4.NFS4_OK
	switch {
	case flags != 0, !wrote:
		st = nfsv4.NFS4ERR_INVAL
	}
	return appendOffsetResult(st, c.wroteOff), st
}

func (c *compound) commit() (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_COMMIT, st), st
	}
	return &nfsv4.NfsResop4_OP_COMMIT{Opcommit: &nfsv4.Commit4res_NFS4_OK{
		Resok4: nfsv4.Commit4resok{Writeverf: c.s.verf}}}, nfsv4.NFS4_OK
}
