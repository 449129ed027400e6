package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
)

// errCtx says which object an engine error is about, so that "does not
// exist" can become NFS4ERR_NOENT for a name and NFS4ERR_STALE for a file
// handle.
type errCtx int

const (
	aboutName   errCtx = iota // a name lookup inside a directory
	aboutHandle               // the object a file handle refers to
)

// toStatus is the one place where engine errors become NFSv4 status codes.
// The detailed error is logged just before it is reduced to a status.
func (s *Server) toStatus(ctx context.Context, op string, err error, about errCtx) nfsv4.Nfsstat4 {
	if err == nil {
		return nfsv4.NFS4_OK
	}
	var st nfsv4.Nfsstat4
	level := slog.LevelDebug
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st = nfsv4.NFS4ERR_NOENT
		if about == aboutHandle {
			st = nfsv4.NFS4ERR_STALE
		}
	case errors.Is(err, fs.ErrExist):
		st = nfsv4.NFS4ERR_EXIST
	case errors.Is(err, fs.ErrNotDir):
		st = nfsv4.NFS4ERR_NOTDIR
	case errors.Is(err, fs.ErrIsDir):
		st = nfsv4.NFS4ERR_ISDIR
	case errors.Is(err, fs.ErrNotEmpty):
		st = nfsv4.NFS4ERR_NOTEMPTY
	case errors.Is(err, fs.ErrBadName):
		st = nfsv4.NFS4ERR_BADNAME
	case errors.Is(err, fs.ErrInvalid):
		st = nfsv4.NFS4ERR_INVAL
	case errors.Is(err, fs.ErrNameTooLong):
		st = nfsv4.NFS4ERR_NAMETOOLONG
	case errors.Is(err, fs.ErrAccess):
		st = nfsv4.NFS4ERR_ACCESS
	case errors.Is(err, fs.ErrPerm):
		st = nfsv4.NFS4ERR_PERM
	case errors.Is(err, fs.ErrTooManyLinks):
		st = nfsv4.NFS4ERR_MLINK
	case errors.Is(err, fs.ErrFileTooBig):
		st = nfsv4.NFS4ERR_FBIG
	case errors.Is(err, fs.ErrNoSpace):
		st = nfsv4.NFS4ERR_NOSPC
	case errors.Is(err, fs.ErrNoAttr):
		st = nfsv4.NFS4ERR_NOENT
	case errors.Is(err, fs.ErrRange):
		st = nfsv4.NFS4ERR_INVAL
	case errors.Is(err, fs.ErrNotSupported):
		st = nfsv4.NFS4ERR_NOTSUPP
	case errors.Is(err, fs.ErrWrongType):
		st = nfsv4.NFS4ERR_WRONG_TYPE
	case errors.Is(err, fs.ErrBadSlice):
		st = nfsv4.NFS4ERR_INVAL
	case errors.Is(err, fs.ErrReadOnly):
		st = nfsv4.NFS4ERR_ROFS
	case errors.Is(err, fs.ErrConflict):
		// A transaction could not be serialized: the client may retry.
		st = nfsv4.NFS4ERR_DELAY
	case errors.Is(err, fs.ErrTxnDone):
		st, level = nfsv4.NFS4ERR_SERVERFAULT, slog.LevelError
	case errors.Is(err, fs.ErrCorrupt), errors.Is(err, fs.ErrIO):
		st, level = nfsv4.NFS4ERR_IO, slog.LevelError
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		st = nfsv4.NFS4ERR_DELAY
	default:
		st, level = nfsv4.NFS4ERR_SERVERFAULT, slog.LevelError
	}
	s.log.Log(ctx, level, "nfs4: operation failed", "op", op, "status", statusName(st), "err", err)
	return st
}

// statusName returns a short name for logs and metrics.
func statusName(st nfsv4.Nfsstat4) string {
	if n, ok := statusNames[st]; ok {
		return n
	}
	return "NFS4ERR_" + itoa(int(st))
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

var statusNames = map[nfsv4.Nfsstat4]string{
	nfsv4.NFS4_OK: "OK", nfsv4.NFS4ERR_NOENT: "NOENT", nfsv4.NFS4ERR_STALE: "STALE",
	nfsv4.NFS4ERR_EXIST: "EXIST", nfsv4.NFS4ERR_NOTDIR: "NOTDIR", nfsv4.NFS4ERR_ISDIR: "ISDIR",
	nfsv4.NFS4ERR_NOTEMPTY: "NOTEMPTY", nfsv4.NFS4ERR_BADNAME: "BADNAME", nfsv4.NFS4ERR_INVAL: "INVAL",
	nfsv4.NFS4ERR_NAMETOOLONG: "NAMETOOLONG", nfsv4.NFS4ERR_ACCESS: "ACCESS", nfsv4.NFS4ERR_PERM: "PERM",
	nfsv4.NFS4ERR_MLINK: "MLINK", nfsv4.NFS4ERR_FBIG: "FBIG", nfsv4.NFS4ERR_NOSPC: "NOSPC",
	nfsv4.NFS4ERR_NOTSUPP: "NOTSUPP", nfsv4.NFS4ERR_WRONG_TYPE: "WRONG_TYPE", nfsv4.NFS4ERR_ROFS: "ROFS",
	nfsv4.NFS4ERR_DELAY: "DELAY", nfsv4.NFS4ERR_SERVERFAULT: "SERVERFAULT", nfsv4.NFS4ERR_IO: "IO",
	nfsv4.NFS4ERR_BADHANDLE: "BADHANDLE", nfsv4.NFS4ERR_NOFILEHANDLE: "NOFILEHANDLE",
	nfsv4.NFS4ERR_BAD_STATEID: "BAD_STATEID", nfsv4.NFS4ERR_OLD_STATEID: "OLD_STATEID",
	nfsv4.NFS4ERR_BADSESSION: "BADSESSION", nfsv4.NFS4ERR_SEQ_MISORDERED: "SEQ_MISORDERED",
	nfsv4.NFS4ERR_OP_ILLEGAL: "OP_ILLEGAL", nfsv4.NFS4ERR_BADXDR: "BADXDR", nfsv4.NFS4ERR_DENIED: "DENIED",
	nfsv4.NFS4ERR_SAME: "SAME", nfsv4.NFS4ERR_NOT_SAME: "NOT_SAME", nfsv4.NFS4ERR_OPENMODE: "OPENMODE",
	nfsv4.NFS4ERR_STALE_CLIENTID: "STALE_CLIENTID", nfsv4.NFS4ERR_EXPIRED: "EXPIRED",
	nfsv4.NFS4ERR_OP_NOT_IN_SESSION: "OP_NOT_IN_SESSION", nfsv4.NFS4ERR_SYMLINK: "SYMLINK",
	nfsv4.NFS4ERR_ATTRNOTSUPP: "ATTRNOTSUPP", nfsv4.NFS4ERR_BAD_COOKIE: "BAD_COOKIE",
	nfsv4.NFS4ERR_TOOSMALL: "TOOSMALL", nfsv4.NFS4ERR_SHARE_DENIED: "SHARE_DENIED",
	nfsv4.NFS4ERR_RESOURCE: "RESOURCE", nfsv4.NFS4ERR_TOO_MANY_OPS: "TOO_MANY_OPS",
	nfsv4.NFS4ERR_MINOR_VERS_MISMATCH: "MINOR_VERS_MISMATCH", nfsv4.NFS4ERR_RESTOREFH: "RESTOREFH",
}
