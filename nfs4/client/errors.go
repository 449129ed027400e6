package client

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// StatusError is a non-OK NFSv4 status returned by one operation of a
// COMPOUND. It unwraps to the closest syscall.Errno, so callers classify it
// with errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTEMPTY),
// and so on.
type StatusError struct {
	Op     nfsv4.NfsOpnum4 // the failing operation
	Index  int             // its position in the COMPOUND (after SEQUENCE)
	Status nfsv4.Nfsstat4
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %s", OpName(e.Op), StatusName(e.Status))
}

// Unwrap returns the syscall.Errno closest to the status.
func (e *StatusError) Unwrap() error { return Errno(e.Status) }

// ErrTxnUnsupported is returned for a transactional COMPOUND sent to a
// server that does not implement the txnfs transactional-compound
// extension. The server rejected the request before executing anything.
var ErrTxnUnsupported = errors.New("nfs4 client: server does not support transactional compounds")

// ErrUncertain is returned when the connection broke while a
// non-idempotent COMPOUND was outstanding and the server could not tell
// (NFS4ERR_RETRY_UNCACHED_REP) whether it was executed.
var ErrUncertain = errors.New("nfs4 client: connection lost; outcome of the request is unknown")

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("nfs4 client: client closed")

// Errno maps an NFSv4 status to the closest errno.
func Errno(st nfsv4.Nfsstat4) syscall.Errno {
	switch st {
	case nfsv4.NFS4_OK:
		return 0
	case nfsv4.NFS4ERR_PERM:
		return syscall.EPERM
	case nfsv4.NFS4ERR_NOENT:
		return syscall.ENOENT
	case nfsv4.NFS4ERR_IO:
		return syscall.EIO
	case nfsv4.NFS4ERR_NXIO:
		return syscall.ENXIO
	case nfsv4.NFS4ERR_ACCESS, nfsv4.NFS4ERR_WRONGSEC:
		return syscall.EACCES
	case nfsv4.NFS4ERR_EXIST:
		return syscall.EEXIST
	case nfsv4.NFS4ERR_XDEV:
		return syscall.EXDEV
	case nfsv4.NFS4ERR_NOTDIR:
		return syscall.ENOTDIR
	case nfsv4.NFS4ERR_ISDIR:
		return syscall.EISDIR
	case nfsv4.NFS4ERR_INVAL, nfsv4.NFS4ERR_BADXDR, nfsv4.NFS4ERR_BAD_RANGE:
		return syscall.EINVAL
	case nfsv4.NFS4ERR_FBIG:
		return syscall.EFBIG
	case nfsv4.NFS4ERR_NOSPC:
		return syscall.ENOSPC
	case nfsv4.NFS4ERR_ROFS:
		return syscall.EROFS
	case nfsv4.NFS4ERR_MLINK:
		return syscall.EMLINK
	case nfsv4.NFS4ERR_NAMETOOLONG:
		return syscall.ENAMETOOLONG
	case nfsv4.NFS4ERR_NOTEMPTY:
		return syscall.ENOTEMPTY
	case nfsv4.NFS4ERR_DQUOT:
		return syscall.EDQUOT
	case nfsv4.NFS4ERR_STALE, nfsv4.NFS4ERR_FHEXPIRED, nfsv4.NFS4ERR_BADHANDLE:
		return syscall.ESTALE
	case nfsv4.NFS4ERR_NOTSUPP, nfsv4.NFS4ERR_OP_ILLEGAL, nfsv4.NFS4ERR_ATTRNOTSUPP,
		nfsv4.NFS4ERR_UNION_NOTSUPP:
		return syscall.EOPNOTSUPP
	case nfsv4.NFS4ERR_SYMLINK:
		return syscall.ELOOP
	case nfsv4.NFS4ERR_BADNAME, nfsv4.NFS4ERR_BADCHAR:
		return syscall.EINVAL
	case nfsv4.NFS4ERR_WRONG_TYPE, nfsv4.NFS4ERR_BADTYPE:
		return syscall.EINVAL
	case nfsv4.NFS4ERR_LOCKED, nfsv4.NFS4ERR_SHARE_DENIED, nfsv4.NFS4ERR_DENIED,
		nfsv4.NFS4ERR_FILE_OPEN:
		return syscall.EBUSY
	case nfsv4.NFS4ERR_DELAY, nfsv4.NFS4ERR_GRACE:
		return syscall.EAGAIN
	case nfsv4.NFS4ERR_TOOSMALL, nfsv4.NFS4ERR_REP_TOO_BIG, nfsv4.NFS4ERR_REQ_TOO_BIG,
		nfsv4.NFS4ERR_TOO_MANY_OPS:
		return syscall.E2BIG
	case nfsv4.NFS4ERR_DEADLOCK:
		return syscall.EDEADLK
	}
	return syscall.EIO
}

// OpName names an operation ("LOOKUP").
func OpName(op nfsv4.NfsOpnum4) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	if op == OpTxn {
		return "TXN"
	}
	if op == OpChain {
		return "CHAIN"
	}
	return fmt.Sprintf("OP_%d", op)
}

// StatusName names a status ("NFS4ERR_NOENT").
func StatusName(st nfsv4.Nfsstat4) string {
	if n, ok := statusNames[st]; ok {
		return n
	}
	return fmt.Sprintf("NFS4ERR_%d", st)
}

var opNames = map[nfsv4.NfsOpnum4]string{
	nfsv4.OP_ACCESS: "ACCESS", nfsv4.OP_CLOSE: "CLOSE", nfsv4.OP_COMMIT: "COMMIT",
	nfsv4.OP_CREATE: "CREATE", nfsv4.OP_GETATTR: "GETATTR", nfsv4.OP_GETFH: "GETFH",
	nfsv4.OP_LINK: "LINK", nfsv4.OP_LOOKUP: "LOOKUP", nfsv4.OP_LOOKUPP: "LOOKUPP",
	nfsv4.OP_OPEN: "OPEN", nfsv4.OP_PUTFH: "PUTFH", nfsv4.OP_PUTROOTFH: "PUTROOTFH",
	nfsv4.OP_READ: "READ", nfsv4.OP_READDIR: "READDIR", nfsv4.OP_READLINK: "READLINK",
	nfsv4.OP_REMOVE: "REMOVE", nfsv4.OP_RENAME: "RENAME", nfsv4.OP_RESTOREFH: "RESTOREFH",
	nfsv4.OP_SAVEFH: "SAVEFH", nfsv4.OP_SETATTR: "SETATTR", nfsv4.OP_WRITE: "WRITE",
	nfsv4.OP_EXCHANGE_ID: "EXCHANGE_ID", nfsv4.OP_CREATE_SESSION: "CREATE_SESSION",
	nfsv4.OP_DESTROY_SESSION: "DESTROY_SESSION", nfsv4.OP_SEQUENCE: "SEQUENCE",
	nfsv4.OP_DESTROY_CLIENTID: "DESTROY_CLIENTID", nfsv4.OP_RECLAIM_COMPLETE: "RECLAIM_COMPLETE",
	nfsv4.OP_COPY: "COPY", nfsv4.OP_CLONE: "CLONE", nfsv4.OP_DEALLOCATE: "DEALLOCATE",
	nfsv4.OP_ALLOCATE: "ALLOCATE", nfsv4.OP_SEEK: "SEEK", nfsv4.OP_ILLEGAL: "ILLEGAL",
	nfsv4.OP_VERIFY: "VERIFY", nfsv4.OP_NVERIFY: "NVERIFY", nfsv4.OP_SECINFO_NO_NAME: "SECINFO_NO_NAME",
	nfsv4.OP_FREE_STATEID: "FREE_STATEID", nfsv4.OP_TEST_STATEID: "TEST_STATEID",
	nfsv4.OP_OPEN_DOWNGRADE: "OPEN_DOWNGRADE", nfsv4.OP_DELEGRETURN: "DELEGRETURN",
}

var statusNames = map[nfsv4.Nfsstat4]string{
	nfsv4.NFS4_OK: "NFS4_OK", nfsv4.NFS4ERR_PERM: "NFS4ERR_PERM", nfsv4.NFS4ERR_NOENT: "NFS4ERR_NOENT",
	nfsv4.NFS4ERR_IO: "NFS4ERR_IO", nfsv4.NFS4ERR_ACCESS: "NFS4ERR_ACCESS", nfsv4.NFS4ERR_EXIST: "NFS4ERR_EXIST",
	nfsv4.NFS4ERR_XDEV: "NFS4ERR_XDEV", nfsv4.NFS4ERR_NOTDIR: "NFS4ERR_NOTDIR", nfsv4.NFS4ERR_ISDIR: "NFS4ERR_ISDIR",
	nfsv4.NFS4ERR_INVAL: "NFS4ERR_INVAL", nfsv4.NFS4ERR_FBIG: "NFS4ERR_FBIG", nfsv4.NFS4ERR_NOSPC: "NFS4ERR_NOSPC",
	nfsv4.NFS4ERR_ROFS: "NFS4ERR_ROFS", nfsv4.NFS4ERR_NAMETOOLONG: "NFS4ERR_NAMETOOLONG",
	nfsv4.NFS4ERR_NOTEMPTY: "NFS4ERR_NOTEMPTY", nfsv4.NFS4ERR_STALE: "NFS4ERR_STALE",
	nfsv4.NFS4ERR_BADHANDLE: "NFS4ERR_BADHANDLE", nfsv4.NFS4ERR_NOTSUPP: "NFS4ERR_NOTSUPP",
	nfsv4.NFS4ERR_SERVERFAULT: "NFS4ERR_SERVERFAULT", nfsv4.NFS4ERR_BADTYPE: "NFS4ERR_BADTYPE",
	nfsv4.NFS4ERR_DELAY: "NFS4ERR_DELAY", nfsv4.NFS4ERR_BAD_STATEID: "NFS4ERR_BAD_STATEID",
	nfsv4.NFS4ERR_OLD_STATEID: "NFS4ERR_OLD_STATEID", nfsv4.NFS4ERR_BAD_SEQID: "NFS4ERR_BAD_SEQID",
	nfsv4.NFS4ERR_SYMLINK: "NFS4ERR_SYMLINK", nfsv4.NFS4ERR_OP_ILLEGAL: "NFS4ERR_OP_ILLEGAL",
	nfsv4.NFS4ERR_BADXDR: "NFS4ERR_BADXDR", nfsv4.NFS4ERR_BADNAME: "NFS4ERR_BADNAME",
	nfsv4.NFS4ERR_RESOURCE: "NFS4ERR_RESOURCE", nfsv4.NFS4ERR_TOO_MANY_OPS: "NFS4ERR_TOO_MANY_OPS",
	nfsv4.NFS4ERR_REQ_TOO_BIG: "NFS4ERR_REQ_TOO_BIG", nfsv4.NFS4ERR_REP_TOO_BIG: "NFS4ERR_REP_TOO_BIG",
	nfsv4.NFS4ERR_BADSESSION: "NFS4ERR_BADSESSION", nfsv4.NFS4ERR_DEADSESSION: "NFS4ERR_DEADSESSION",
	nfsv4.NFS4ERR_SEQ_MISORDERED: "NFS4ERR_SEQ_MISORDERED", nfsv4.NFS4ERR_BADSLOT: "NFS4ERR_BADSLOT",
	nfsv4.NFS4ERR_STALE_CLIENTID: "NFS4ERR_STALE_CLIENTID", nfsv4.NFS4ERR_EXPIRED: "NFS4ERR_EXPIRED",
	nfsv4.NFS4ERR_NOFILEHANDLE: "NFS4ERR_NOFILEHANDLE", nfsv4.NFS4ERR_RESTOREFH: "NFS4ERR_RESTOREFH",
	nfsv4.NFS4ERR_ATTRNOTSUPP: "NFS4ERR_ATTRNOTSUPP", nfsv4.NFS4ERR_WRONG_TYPE: "NFS4ERR_WRONG_TYPE",
	nfsv4.NFS4ERR_OPENMODE: "NFS4ERR_OPENMODE", nfsv4.NFS4ERR_MLINK: "NFS4ERR_MLINK",
	nfsv4.NFS4ERR_SHARE_DENIED: "NFS4ERR_SHARE_DENIED", nfsv4.NFS4ERR_GRACE: "NFS4ERR_GRACE",
	nfsv4.NFS4ERR_RETRY_UNCACHED_REP: "NFS4ERR_RETRY_UNCACHED_REP", nfsv4.NFS4ERR_DQUOT: "NFS4ERR_DQUOT",
	nfsv4.NFS4ERR_NOT_SAME: "NFS4ERR_NOT_SAME", nfsv4.NFS4ERR_SAME: "NFS4ERR_SAME",
	nfsv4.NFS4ERR_UNION_NOTSUPP: "NFS4ERR_UNION_NOTSUPP", nfsv4.NFS4ERR_BAD_COOKIE: "NFS4ERR_BAD_COOKIE",
	nfsv4.NFS4ERR_TOOSMALL: "NFS4ERR_TOOSMALL", nfsv4.NFS4ERR_LOCKED: "NFS4ERR_LOCKED",
	nfsv4.NFS4ERR_NOT_ONLY_OP: "NFS4ERR_NOT_ONLY_OP", nfsv4.NFS4ERR_OP_NOT_IN_SESSION: "NFS4ERR_OP_NOT_IN_SESSION",
	nfsv4.NFS4ERR_MINOR_VERS_MISMATCH: "NFS4ERR_MINOR_VERS_MISMATCH",
	nfsv4.NFS4ERR_OFFLOAD_NO_REQS:     "NFS4ERR_OFFLOAD_NO_REQS", nfsv4.NFS4ERR_OFFLOAD_DENIED: "NFS4ERR_OFFLOAD_DENIED",
}
