package server

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/state"
)

// ---- locks ----

func lockWrite(t nfsv4.NfsLockType4) bool { return t == nfsv4.WRITE_LT || t == nfsv4.WRITEW_LT }

func lockDenied(d *state.Denied) nfsv4.Lock4denied {
	lt := nfsv4.READ_LT
	if d.Write {
		lt = nfsv4.WRITE_LT
	}
	return nfsv4.Lock4denied{Offset: d.Offset, Length: d.Length, Locktype: lt,
		Owner: nfsv4.StateOwner4{Clientid: d.ClientID, Owner: d.Owner}}
}

func (c *compound) lock(a *nfsv4.Lock4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_LOCK, st), st
	}
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	la := state.LockArgs{Ino: uint64(c.cur.ino), Write: lockWrite(a.Locktype), Offset: a.Offset, Length: a.Length}
	var sid nfsv4.Stateid4
	switch l := a.Locker.(type) {
	case *nfsv4.Locker4_TRUE:
		id, st := c.resolveSid(l.OpenOwner.OpenStateid)
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		la.NewOwner, la.OpenStateid, sid = true, id, id
		la.OwnerName, la.OwnerClient = l.OpenOwner.LockOwner.Owner, l.OpenOwner.LockOwner.Clientid
	case *nfsv4.Locker4_FALSE:
		id, st := c.resolveSid(l.LockOwner.LockStateid)
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		la.LockStateid, sid = id, id
	}
	// Grace period: a reclaim needs a client that may reclaim, anything
	// else waits for the end of the grace period.
	var cl *state.Client
	if c.minor > 0 {
		cl = c.client
	} else if o := c.s.st.StateOwner(sid); o != nil {
		cl = o.Client
	}
	if st := c.s.st.CheckReclaim(cl, a.Reclaim); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	sid, denied, st := c.s.st.Lock(la, c.minor)
	if st == nfsv4.NFS4ERR_DENIED {
		return &nfsv4.NfsResop4_OP_LOCK{Oplock: &nfsv4.Lock4res_NFS4ERR_DENIED{Denied: lockDenied(denied)}}, st
	}
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	c.setSid(sid)
	return &nfsv4.NfsResop4_OP_LOCK{Oplock: &nfsv4.Lock4res_NFS4_OK{Resok4: nfsv4.Lock4resok{LockStateid: sid}}}, nfsv4.NFS4_OK
}

func (c *compound) lockt(a *nfsv4.Lockt4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_LOCKT, st), st
	}
	clientID := a.Owner.Clientid
	if c.minor > 0 && c.client != nil {
		clientID = c.client.ID
	}
	denied, st := c.s.st.TestLock(uint64(c.cur.ino), clientID, a.Owner.Owner, lockWrite(a.Locktype), a.Offset, a.Length)
	switch st {
	case nfsv4.NFS4_OK:
		return &nfsv4.NfsResop4_OP_LOCKT{Oplockt: &nfsv4.Lockt4res_NFS4_OK{}}, st
	case nfsv4.NFS4ERR_DENIED:
		return &nfsv4.NfsResop4_OP_LOCKT{Oplockt: &nfsv4.Lockt4res_NFS4ERR_DENIED{Denied: lockDenied(denied)}}, st
	}
	return errRes(nfsv4.OP_LOCKT, st), st
}

func (c *compound) locku(a *nfsv4.Locku4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_LOCKU, st), st
	}
	if st := c.needFile(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	id, st := c.resolveSid(a.LockStateid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	sid, st := c.s.st.Unlock(id, c.minor, uint64(c.cur.ino), a.Offset, a.Length)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	c.setSid(sid)
	return &nfsv4.NfsResop4_OP_LOCKU{Oplocku: &nfsv4.Locku4res_NFS4_OK{LockStateid: sid}}, nfsv4.NFS4_OK
}

// ---- 4.0 client id ----

func (c *compound) setclientid(a *nfsv4.Setclientid4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	id, verf := c.s.st.SetClientID(a.Client.Id, a.Client.Verifier, c.princ)
	return &nfsv4.NfsResop4_OP_SETCLIENTID{Opsetclientid: &nfsv4.Setclientid4res_NFS4_OK{
		Resok4: nfsv4.Setclientid4resok{Clientid: id, SetclientidConfirm: verf}}}, nfsv4.NFS4_OK
}

// ---- 4.1 sessions ----

func (c *compound) exchangeID(a *nfsv4.ExchangeId4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_EXCHANGE_ID, st), st
	}
	const known = nfsv4.EXCHGID4_FLAG_SUPP_MOVED_REFER | nfsv4.EXCHGID4_FLAG_SUPP_MOVED_MIGR |
		nfsv4.EXCHGID4_FLAG_SUPP_FENCE_OPS | nfsv4.EXCHGID4_FLAG_BIND_PRINC_STATEID |
		nfsv4.EXCHGID4_FLAG_USE_NON_PNFS | nfsv4.EXCHGID4_FLAG_USE_PNFS_MDS |
		nfsv4.EXCHGID4_FLAG_USE_PNFS_DS | nfsv4.EXCHGID4_FLAG_UPD_CONFIRMED_REC_A
	if a.EiaFlags&^known != 0 {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	var sp nfsv4.StateProtect4R
	switch a.EiaStateProtect.(type) {
	case *nfsv4.StateProtect4A_SP4_NONE:
		sp = &nfsv4.StateProtect4R_SP4_NONE{}
	case *nfsv4.StateProtect4A_SP4_MACH_CRED:
		// Accepted with no operations enforced.
		sp = &nfsv4.StateProtect4R_SP4_MACH_CRED{}
	default:
		return fail(nfsv4.NFS4ERR_ENCR_ALG_UNSUPP)
	}
	res, st := c.s.st.ExchangeID(a.EiaClientowner.CoOwnerid, a.EiaClientowner.CoVerifier, c.princ,
		a.EiaFlags&nfsv4.EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0, c.minor)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	flags := uint32(nfsv4.EXCHGID4_FLAG_USE_NON_PNFS)
	if res.Confirmed {
		flags |= nfsv4.EXCHGID4_FLAG_CONFIRMED_R
	}
	return &nfsv4.NfsResop4_OP_EXCHANGE_ID{OpexchangeId: &nfsv4.ExchangeId4res_NFS4_OK{EirResok4: nfsv4.ExchangeId4resok{
		EirClientid:     res.ClientID,
		EirSequenceid:   res.Seq,
		EirFlags:        flags,
		EirStateProtect: sp,
		EirServerOwner:  nfsv4.ServerOwner4{SoMinorId: 0, SoMajorId: c.s.major},
		EirServerScope:  c.s.major,
		EirServerImplId: []nfsv4.NfsImplId4{{NiiDomain: "txnfs.dev", NiiName: "txnfs"}},
	}}}, nfsv4.NFS4_OK
}

func (c *compound) createSession(a *nfsv4.CreateSession4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_CREATE_SESSION, st), st
	}
	f := a.CsaForeChanAttrs
	maxMsg := c.s.cfg.MaxRequest
	if f.CaMaxrequestsize < 1024 || f.CaMaxresponsesize < 1024 {
		return fail(nfsv4.NFS4ERR_TOOSMALL)
	}
	fore := state.ChannelAttrs{
		MaxRequest:        min(f.CaMaxrequestsize, maxMsg),
		MaxResponse:       min(f.CaMaxresponsesize, maxMsg),
		MaxResponseCached: f.CaMaxresponsesizeCached,
		MaxOps:            min(f.CaMaxoperations, uint32(c.s.cfg.MaxOps)),
		MaxRequests:       f.CaMaxrequests,
	}
	if fore.MaxOps == 0 {
		fore.MaxOps = uint32(c.s.cfg.MaxOps)
	}
	rep, st := c.s.st.CreateSession(a.CsaClientid, a.CsaSequence, c.princ, fore)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	back := a.CsaBackChanAttrs
	back.CaRdmaIrd = nil
	return &nfsv4.NfsResop4_OP_CREATE_SESSION{OpcreateSession: &nfsv4.CreateSession4res_NFS4_OK{CsrResok4: nfsv4.CreateSession4resok{
		CsrSessionid: rep.SessionID,
		CsrSequence:  rep.Seq,
		CsrFlags:     0, // no persistent reply cache, no back channel
		CsrForeChanAttrs: nfsv4.ChannelAttrs4{
			CaMaxrequestsize:        rep.Fore.MaxRequest,
			CaMaxresponsesize:       rep.Fore.MaxResponse,
			CaMaxresponsesizeCached: rep.Fore.MaxResponseCached,
			CaMaxoperations:         rep.Fore.MaxOps,
			CaMaxrequests:           rep.Fore.MaxRequests,
		},
		CsrBackChanAttrs: back,
	}}}, nfsv4.NFS4_OK
}

func (c *compound) bindConn(a *nfsv4.BindConnToSession4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if c.s.st.Session(a.BctsaSessid) == nil {
		return errRes(nfsv4.OP_BIND_CONN_TO_SESSION, nfsv4.NFS4ERR_BADSESSION), nfsv4.NFS4ERR_BADSESSION
	}
	dir := nfsv4.CDFS4_FORE
	if a.BctsaDir == nfsv4.CDFC4_BACK {
		return errRes(nfsv4.OP_BIND_CONN_TO_SESSION, nfsv4.NFS4ERR_INVAL), nfsv4.NFS4ERR_INVAL
	}
	return &nfsv4.NfsResop4_OP_BIND_CONN_TO_SESSION{OpbindConnToSession: &nfsv4.BindConnToSession4res_NFS4_OK{
		BctsrResok4: nfsv4.BindConnToSession4resok{BctsrSessid: a.BctsaSessid, BctsrDir: dir}}}, nfsv4.NFS4_OK
}

// sequence handles a leading SEQUENCE. On a replay it returns the cached
// reply bytes, to be sent as they are.
func (c *compound) sequence(a *nfsv4.NfsArgop4_OP_SEQUENCE, nops int) (nfsv4.NfsResop4, nfsv4.Nfsstat4, []byte) {
	args := &a.Opsequence
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4, []byte) {
		return errRes(nfsv4.OP_SEQUENCE, st), st, nil
	}
	// Limits are checked before the slot, which a refused request does
	// not consume (RFC 8881 §2.10.6.4, §18.46.3).
	if sess := c.s.st.Session(args.SaSessionid); sess != nil {
		if uint32(nops) > sess.Fore.MaxOps {
			return fail(nfsv4.NFS4ERR_TOO_MANY_OPS)
		}
		if c.reqSize > int(sess.Fore.MaxRequest) {
			return fail(nfsv4.NFS4ERR_REQ_TOO_BIG)
		}
	}
	res, st := c.s.st.Sequence(args.SaSessionid, args.SaSlotid, args.SaSequenceid, args.SaCachethis)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if res.Replay != nil {
		return nil, nfsv4.NFS4_OK, res.Replay
	}
	c.client, c.session, c.slot = res.Client, res.Session, res.Ref
	c.maxReply = int(res.Session.Fore.MaxResponse)
	if args.SaCachethis {
		c.maxCached = int(res.Session.Fore.MaxResponseCached)
	}
	return &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_NFS4_OK{SrResok4: nfsv4.Sequence4resok{
		SrSessionid:           args.SaSessionid,
		SrSequenceid:          args.SaSequenceid,
		SrSlotid:              args.SaSlotid,
		SrHighestSlotid:       res.HighestSlot,
		SrTargetHighestSlotid: res.HighestSlot,
	}}}, nfsv4.NFS4_OK, nil
}
