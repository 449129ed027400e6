package server

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/state"
)

// NFSv4.0 open-owner and lock-owner sequencing (RFC 7530 §9.1.7). Each of
// OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE, CLOSE, LOCK and LOCKU carries its
// owner's seqid: the next one runs the operation, the last one replays the
// reply the owner got for it (the server keeps one per owner), anything
// else is NFS4ERR_BAD_SEQID. The seqid advances after every outcome but
// the errors of state.SeqidExempt. 4.1+ ignores these seqids: sessions
// give exactly-once semantics.

// seqReply is what an owner's replay returns: the operation's result and,
// for OPEN, the current file handle and stateid it set.
type seqReply struct {
	res    nfsv4.NfsResop4
	st     nfsv4.Nfsstat4
	cur    fhState
	curSid *nfsv4.Stateid4
	setCur bool
}

// seqOwner returns the owner whose seqid sequences operation a, the seqid,
// and for LOCK with a new lock-owner the seqid that lock-owner starts
// with. ok is false when a is not sequenced or its owner is unknown (the
// operation then runs and fails on its stateid or client id).
func (c *compound) seqOwner(a nfsv4.NfsArgop4) (o *state.Owner, seqid uint32, lockSeqid *uint32, ok bool) {
	byStateid := func(id nfsv4.Stateid4, seqid uint32) (*state.Owner, uint32, *uint32, bool) {
		o := c.s.st.StateOwner(id)
		return o, seqid, nil, o != nil
	}
	switch a := a.(type) {
	case *nfsv4.NfsArgop4_OP_OPEN:
		cl, st := c.s.st.Client(a.Opopen.Owner.Clientid)
		if st != nfsv4.NFS4_OK {
			return nil, 0, nil, false
		}
		return c.s.st.OpenOwner(cl, a.Opopen.Owner.Owner), a.Opopen.Seqid, nil, true
	case *nfsv4.NfsArgop4_OP_OPEN_CONFIRM:
		return byStateid(a.OpopenConfirm.OpenStateid, a.OpopenConfirm.Seqid)
	case *nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE:
		return byStateid(a.OpopenDowngrade.OpenStateid, a.OpopenDowngrade.Seqid)
	case *nfsv4.NfsArgop4_OP_CLOSE:
		return byStateid(a.Opclose.OpenStateid, a.Opclose.Seqid)
	case *nfsv4.NfsArgop4_OP_LOCKU:
		return byStateid(a.Oplocku.LockStateid, a.Oplocku.Seqid)
	case *nfsv4.NfsArgop4_OP_LOCK:
		switch l := a.Oplock.Locker.(type) {
		case *nfsv4.Locker4_TRUE:
			o, seqid, _, ok := byStateid(l.OpenOwner.OpenStateid, l.OpenOwner.OpenSeqid)
			ls := l.OpenOwner.LockSeqid
			return o, seqid, &ls, ok
		case *nfsv4.Locker4_FALSE:
			return byStateid(l.LockOwner.LockStateid, l.LockOwner.LockSeqid)
		}
	}
	return nil, 0, nil, false
}

// sequenced runs a 4.0 seqid-bearing operation under its owner's
// sequencing; run executes it.
func (c *compound) sequenced(a nfsv4.NfsArgop4, run func() (nfsv4.NfsResop4, nfsv4.Nfsstat4)) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	o, seqid, lockSeqid, ok := c.seqOwner(a)
	if !ok {
		return run()
	}
	code := a.GetArgop()
	switch chk, prev := c.s.st.CheckSeqid(o, seqid); chk {
	case state.SeqidBad:
		return errRes(code, nfsv4.NFS4ERR_BAD_SEQID), nfsv4.NFS4ERR_BAD_SEQID
	case state.SeqidReplay:
		r, _ := prev.(*seqReply)
		if r == nil || r.res.GetResop() != code {
			// Same seqid, different operation: not a retransmission.
			return errRes(code, nfsv4.NFS4ERR_BAD_SEQID), nfsv4.NFS4ERR_BAD_SEQID
		}
		if r.setCur {
			c.cur, c.curSid = r.cur, r.curSid
		}
		return r.res, r.st
	}
	res, st := run()
	if state.SeqidExempt(st) {
		return res, st
	}
	r := &seqReply{res: res, st: st}
	if code == nfsv4.OP_OPEN && st == nfsv4.NFS4_OK {
		r.cur, r.curSid, r.setCur = c.cur, c.curSid, true
	}
	undo := c.s.st.AdvanceSeqid(o, seqid, r)
	// In a joined compound the reply is delivered whatever becomes of
	// the transaction: the seqid advance stands.
	if c.txn != nil && c.joined == nil {
		c.undo = append(c.undo, undo)
	}
	if lockSeqid != nil && st == nfsv4.NFS4_OK {
		// A new lock-owner starts its sequence with lock_seqid.
		sid := res.(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid
		if lo := c.s.st.StateOwner(sid); lo != nil {
			undo := c.s.st.AdvanceSeqid(lo, *lockSeqid, &seqReply{res: res, st: st})
			if c.txn != nil && c.joined == nil {
				c.undo = append(c.undo, undo)
			}
		}
	}
	return res, st
}
