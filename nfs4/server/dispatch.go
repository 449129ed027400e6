package server

import (
	"strings"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// dispatch runs one operation. Operations that only make sense outside a
// transaction (session and client-id management, locks) answer
// NFS4ERR_NOTSUPP inside one.
func (c *compound) dispatch(a nfsv4.NfsArgop4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	code := a.GetArgop()
	if c.txn != nil && !txnAllowed(code) {
		return errRes(code, nfsv4.NFS4ERR_NOTSUPP), nfsv4.NFS4ERR_NOTSUPP
	}
	if c.minor > 0 {
		switch code {
		case nfsv4.OP_OPEN_CONFIRM, nfsv4.OP_RENEW, nfsv4.OP_SETCLIENTID,
			nfsv4.OP_SETCLIENTID_CONFIRM, nfsv4.OP_RELEASE_LOCKOWNER:
			// Obsolete in 4.1 (RFC 8881 §18.xx: "MUST NOT be used").
			return errRes(code, nfsv4.NFS4ERR_NOTSUPP), nfsv4.NFS4ERR_NOTSUPP
		}
	}
	if c.minor == 0 {
		switch code {
		case nfsv4.OP_OPEN, nfsv4.OP_OPEN_CONFIRM, nfsv4.OP_OPEN_DOWNGRADE, nfsv4.OP_CLOSE,
			nfsv4.OP_LOCK, nfsv4.OP_LOCKU:
			return c.sequenced(a, func() (nfsv4.NfsResop4, nfsv4.Nfsstat4) { return c.dispatchOp(a) })
		}
	}
	return c.dispatchOp(a)
}

// dispatchOp runs one operation (after 4.0 sequencing).
func (c *compound) dispatchOp(a nfsv4.NfsArgop4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	code := a.GetArgop()
	switch a := a.(type) {
	// file handles and names
	case *nfsv4.NfsArgop4_OP_PUTROOTFH, *nfsv4.NfsArgop4_OP_PUTPUBFH:
		st := c.putRoot()
		if code == nfsv4.OP_PUTPUBFH {
			return &nfsv4.NfsResop4_OP_PUTPUBFH{Opputpubfh: nfsv4.Putpubfh4res{Status: st}}, st
		}
		return &nfsv4.NfsResop4_OP_PUTROOTFH{Opputrootfh: nfsv4.Putrootfh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_PUTFH:
		st := c.putFH(a.Opputfh.Object)
		return &nfsv4.NfsResop4_OP_PUTFH{Opputfh: nfsv4.Putfh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_GETFH:
		return c.getFH()
	case *nfsv4.NfsArgop4_OP_SAVEFH:
		st := c.saveFH()
		return &nfsv4.NfsResop4_OP_SAVEFH{Opsavefh: nfsv4.Savefh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_RESTOREFH:
		st := c.restoreFH()
		return &nfsv4.NfsResop4_OP_RESTOREFH{Oprestorefh: nfsv4.Restorefh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_LOOKUP:
		st := c.lookup(a.Oplookup.Objname)
		return &nfsv4.NfsResop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_LOOKUPP:
		st := c.lookupp()
		return &nfsv4.NfsResop4_OP_LOOKUPP{Oplookupp: nfsv4.Lookupp4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_SECINFO:
		return c.secinfo(&a.Opsecinfo)
	case *nfsv4.NfsArgop4_OP_SECINFO_NO_NAME:
		return c.secinfoNoName(a.OpsecinfoNoName)

	// attributes
	case *nfsv4.NfsArgop4_OP_GETATTR:
		return c.getattr(a.Opgetattr.AttrRequest)
	case *nfsv4.NfsArgop4_OP_SETATTR:
		return c.setattr(&a.Opsetattr)
	case *nfsv4.NfsArgop4_OP_VERIFY:
		st := c.verify(&a.Opverify.ObjAttributes, true)
		return &nfsv4.NfsResop4_OP_VERIFY{Opverify: nfsv4.Verify4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_NVERIFY:
		st := c.verify(&a.Opnverify.ObjAttributes, false)
		return &nfsv4.NfsResop4_OP_NVERIFY{Opnverify: nfsv4.Nverify4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_ACCESS:
		return c.access(a.Opaccess.Access)

	// namespace
	case *nfsv4.NfsArgop4_OP_CREATE:
		return c.create(&a.Opcreate)
	case *nfsv4.NfsArgop4_OP_LINK:
		return c.link(a.Oplink.Newname)
	case *nfsv4.NfsArgop4_OP_REMOVE:
		return c.remove(a.Opremove.Target)
	case *nfsv4.NfsArgop4_OP_RENAME:
		return c.rename(a.Oprename.Oldname, a.Oprename.Newname)
	case *nfsv4.NfsArgop4_OP_READDIR:
		return c.readdir(&a.Opreaddir)
	case *nfsv4.NfsArgop4_OP_READLINK:
		return c.readlink()

	// open state and I/O
	case *nfsv4.NfsArgop4_OP_OPEN:
		return c.open(&a.Opopen)
	case *nfsv4.NfsArgop4_OP_CLOSE:
		return c.close(&a.Opclose)
	case *nfsv4.NfsArgop4_OP_OPEN_CONFIRM:
		return c.openConfirm(&a.OpopenConfirm)
	case *nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE:
		return c.openDowngrade(&a.OpopenDowngrade)
	case *nfsv4.NfsArgop4_OP_READ:
		return c.read(&a.Opread)
	case *nfsv4.NfsArgop4_OP_WRITE:
		return c.write(&a.Opwrite)
	case *nfsv4.NfsArgop4_OP_COMMIT:
		return c.commit()
	case *nfsv4.NfsArgop4_OP_DELEGRETURN:
		return errRes(code, nfsv4.NFS4ERR_BAD_STATEID), nfsv4.NFS4ERR_BAD_STATEID

	// locks
	case *nfsv4.NfsArgop4_OP_LOCK:
		return c.lock(&a.Oplock)
	case *nfsv4.NfsArgop4_OP_LOCKT:
		return c.lockt(&a.Oplockt)
	case *nfsv4.NfsArgop4_OP_LOCKU:
		return c.locku(&a.Oplocku)
	case *nfsv4.NfsArgop4_OP_RELEASE_LOCKOWNER:
		st := c.s.st.ReleaseLockOwner(a.OpreleaseLockowner.LockOwner.Clientid, a.OpreleaseLockowner.LockOwner.Owner)
		return &nfsv4.NfsResop4_OP_RELEASE_LOCKOWNER{OpreleaseLockowner: nfsv4.ReleaseLockowner4res{Status: st}}, st

	// clients and sessions
	case *nfsv4.NfsArgop4_OP_SETCLIENTID:
		return c.setclientid(&a.Opsetclientid)
	case *nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM:
		st := c.s.st.SetClientIDConfirm(a.OpsetclientidConfirm.Clientid, a.OpsetclientidConfirm.SetclientidConfirm, c.princ)
		return &nfsv4.NfsResop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_RENEW:
		st := c.s.st.Renew(a.Oprenew.Clientid)
		return &nfsv4.NfsResop4_OP_RENEW{Oprenew: nfsv4.Renew4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_EXCHANGE_ID:
		return c.exchangeID(&a.OpexchangeId)
	case *nfsv4.NfsArgop4_OP_CREATE_SESSION:
		return c.createSession(&a.OpcreateSession)
	case *nfsv4.NfsArgop4_OP_DESTROY_SESSION:
		st := c.s.st.DestroySession(a.OpdestroySession.DsaSessionid)
		return &nfsv4.NfsResop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4res{DsrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_DESTROY_CLIENTID:
		st := c.s.st.DestroyClientID(a.OpdestroyClientid.DcaClientid)
		return &nfsv4.NfsResop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4res{DcrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_BIND_CONN_TO_SESSION:
		return c.bindConn(&a.OpbindConnToSession)
	case *nfsv4.NfsArgop4_OP_SEQUENCE:
		// SEQUENCE anywhere but first.
		return errRes(code, nfsv4.NFS4ERR_SEQUENCE_POS), nfsv4.NFS4ERR_SEQUENCE_POS
	case *nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE:
		st := c.s.st.ReclaimComplete(c.client)
		if a.OpreclaimComplete.RcaOneFs {
			st = nfsv4.NFS4_OK // per-fs reclaim: nothing to do
		}
		return &nfsv4.NfsResop4_OP_RECLAIM_COMPLETE{OpreclaimComplete: nfsv4.ReclaimComplete4res{RcrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_FREE_STATEID:
		st := c.s.st.FreeStateid(a.OpfreeStateid.FsaStateid, c.client)
		return &nfsv4.NfsResop4_OP_FREE_STATEID{OpfreeStateid: nfsv4.FreeStateid4res{FsrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_TEST_STATEID:
		codes := make([]nfsv4.Nfsstat4, len(a.OptestStateid.TsStateids))
		for i, id := range a.OptestStateid.TsStateids {
			codes[i] = c.s.st.TestStateid(id, c.client)
		}
		return &nfsv4.NfsResop4_OP_TEST_STATEID{OptestStateid: &nfsv4.TestStateid4res_NFS4_OK{
			TsrResok4: nfsv4.TestStateid4resok{TsrStatusCodes: codes}}}, nfsv4.NFS4_OK

	// NFSv4.2
	case *nfsv4.NfsArgop4_OP_COPY:
		return c.copy(&a.Opcopy)
	case *nfsv4.NfsArgop4_OP_CLONE:
		return c.clone(&a.Opclone)
	case *nfsv4.NfsArgop4_OP_DEALLOCATE:
		st := c.deallocate(&a.Opdeallocate)
		return &nfsv4.NfsResop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4res{DrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_ALLOCATE:
		st := c.allocate(&a.Opallocate)
		return &nfsv4.NfsResop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4res{ArStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_SEEK:
		return c.seek(&a.Opseek)
	case *nfsv4.NfsArgop4_OP_READ_PLUS:
		return c.readPlus(&a.OpreadPlus)
	}
	return errRes(code, nfsv4.NFS4ERR_NOTSUPP), nfsv4.NFS4ERR_NOTSUPP
}

// txnAllowed lists the operations a transactional compound may contain.
func txnAllowed(code nfsv4.NfsOpnum4) bool {
	switch code {
	case nfsv4.OP_PUTROOTFH, nfsv4.OP_PUTPUBFH, nfsv4.OP_PUTFH, nfsv4.OP_GETFH,
		nfsv4.OP_SAVEFH, nfsv4.OP_RESTOREFH, nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP,
		nfsv4.OP_GETATTR, nfsv4.OP_SETATTR, nfsv4.OP_VERIFY, nfsv4.OP_NVERIFY,
		nfsv4.OP_ACCESS, nfsv4.OP_CREATE, nfsv4.OP_LINK, nfsv4.OP_REMOVE,
		nfsv4.OP_RENAME, nfsv4.OP_READDIR, nfsv4.OP_READLINK, nfsv4.OP_OPEN,
		nfsv4.OP_CLOSE, nfsv4.OP_READ, nfsv4.OP_WRITE, nfsv4.OP_COMMIT,
		nfsv4.OP_COPY, nfsv4.OP_CLONE, nfsv4.OP_DEALLOCATE, nfsv4.OP_ALLOCATE,
		nfsv4.OP_SEEK, nfsv4.OP_READ_PLUS, nfsv4.OP_SECINFO, nfsv4.OP_SECINFO_NO_NAME:
		return true
	}
	return false
}

// opNames names operations for metrics and logs.
var opNames = map[nfsv4.NfsOpnum4]string{
	nfsv4.OP_ACCESS: "ACCESS", nfsv4.OP_CLOSE: "CLOSE", nfsv4.OP_COMMIT: "COMMIT",
	nfsv4.OP_CREATE: "CREATE", nfsv4.OP_DELEGPURGE: "DELEGPURGE", nfsv4.OP_DELEGRETURN: "DELEGRETURN",
	nfsv4.OP_GETATTR: "GETATTR", nfsv4.OP_GETFH: "GETFH", nfsv4.OP_LINK: "LINK", nfsv4.OP_LOCK: "LOCK",
	nfsv4.OP_LOCKT: "LOCKT", nfsv4.OP_LOCKU: "LOCKU", nfsv4.OP_LOOKUP: "LOOKUP", nfsv4.OP_LOOKUPP: "LOOKUPP",
	nfsv4.OP_NVERIFY: "NVERIFY", nfsv4.OP_OPEN: "OPEN", nfsv4.OP_OPENATTR: "OPENATTR",
	nfsv4.OP_OPEN_CONFIRM: "OPEN_CONFIRM", nfsv4.OP_OPEN_DOWNGRADE: "OPEN_DOWNGRADE",
	nfsv4.OP_PUTFH: "PUTFH", nfsv4.OP_PUTPUBFH: "PUTPUBFH", nfsv4.OP_PUTROOTFH: "PUTROOTFH",
	nfsv4.OP_READ: "READ", nfsv4.OP_READDIR: "READDIR", nfsv4.OP_READLINK: "READLINK",
	nfsv4.OP_REMOVE: "REMOVE", nfsv4.OP_RENAME: "RENAME", nfsv4.OP_RENEW: "RENEW",
	nfsv4.OP_RESTOREFH: "RESTOREFH", nfsv4.OP_SAVEFH: "SAVEFH", nfsv4.OP_SECINFO: "SECINFO",
	nfsv4.OP_SETATTR: "SETATTR", nfsv4.OP_SETCLIENTID: "SETCLIENTID",
	nfsv4.OP_SETCLIENTID_CONFIRM: "SETCLIENTID_CONFIRM", nfsv4.OP_VERIFY: "VERIFY",
	nfsv4.OP_WRITE: "WRITE", nfsv4.OP_RELEASE_LOCKOWNER: "RELEASE_LOCKOWNER",
	nfsv4.OP_BACKCHANNEL_CTL: "BACKCHANNEL_CTL", nfsv4.OP_BIND_CONN_TO_SESSION: "BIND_CONN_TO_SESSION",
	nfsv4.OP_EXCHANGE_ID: "EXCHANGE_ID", nfsv4.OP_CREATE_SESSION: "CREATE_SESSION",
	nfsv4.OP_DESTROY_SESSION: "DESTROY_SESSION", nfsv4.OP_FREE_STATEID: "FREE_STATEID",
	nfsv4.OP_SECINFO_NO_NAME: "SECINFO_NO_NAME", nfsv4.OP_SEQUENCE: "SEQUENCE",
	nfsv4.OP_TEST_STATEID: "TEST_STATEID", nfsv4.OP_DESTROY_CLIENTID: "DESTROY_CLIENTID",
	nfsv4.OP_RECLAIM_COMPLETE: "RECLAIM_COMPLETE", nfsv4.OP_ALLOCATE: "ALLOCATE",
	nfsv4.OP_COPY: "COPY", nfsv4.OP_DEALLOCATE: "DEALLOCATE", nfsv4.OP_READ_PLUS: "READ_PLUS",
	nfsv4.OP_SEEK: "SEEK", nfsv4.OP_CLONE: "CLONE", nfsv4.OP_ILLEGAL: "ILLEGAL", OpTxn: "TXN", OpAppendOffset: "APPEND_OFFSET",
}

func opName(code nfsv4.NfsOpnum4) string {
	if n, ok := opNames[code]; ok {
		return n
	}
	return "OP_" + strings.TrimPrefix(itoa(int(code)), "-")
}
