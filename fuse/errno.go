package fuse

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
)

// errnoOf maps an engine error to the errno returned to the kernel. It is
// the only place where fs errors become errnos. Errors that indicate a bug
// or a broken store (and any error outside the engine's closed set) are
// logged with their detail right before being reduced to EIO.
func errnoOf(log *slog.Logger, op string, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, fs.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, fs.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, fs.ErrInvalid), errors.Is(err, fs.ErrBadName), errors.Is(err, fs.ErrWrongType),
		errors.Is(err, fs.ErrBadSlice):
		return syscall.EINVAL
	case errors.Is(err, fs.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, fs.ErrAccess):
		return syscall.EACCES
	case errors.Is(err, fs.ErrPerm):
		return syscall.EPERM
	case errors.Is(err, fs.ErrTooManyLinks):
		return syscall.EMLINK
	case errors.Is(err, fs.ErrFileTooBig):
		return syscall.EFBIG
	case errors.Is(err, fs.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, fs.ErrNoAttr):
		return errNoAttr
	case errors.Is(err, fs.ErrRange):
		return syscall.ERANGE
	case errors.Is(err, fs.ErrNotSupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, fs.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, fs.ErrConflict):
		// Only a sandbox commit can report it (FS.Do retries).
		return syscall.EBUSY
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return syscall.EINTR
	case errors.Is(err, errNoSandbox):
		return syscall.ENOENT
	case errors.Is(err, errSandboxActive):
		return syscall.EBUSY
	case errors.Is(err, errWritebackSandbox):
		return syscall.EOPNOTSUPP
	case errors.Is(err, errMirrorsInUse):
		return syscall.EBUSY
	case errors.Is(err, fs.ErrIO), errors.Is(err, fs.ErrCorrupt), errors.Is(err, fs.ErrTxnDone):
		log.Error("engine error", "op", op, "err", err)
		return syscall.EIO
	default:
		log.Error("unexpected error", "op", op, "err", err)
		return syscall.EIO
	}
}

// status converts an engine error to a go-fuse status.
func (m *Server) status(op string, err error) raw.Status {
	return raw.Status(errnoOf(m.log, op, err))
}

// nodeStatus is status for operations on the inode a request names by
// node id. If that inode is gone (it was removed or replaced by another
// mount, or by a rename, after the kernel looked it up) the answer is
// ESTALE: the kernel then retries the path walk once with a fresh lookup,
// as it does for NFS, instead of failing with ENOENT on a name that exists.
func (m *Server) nodeStatus(op string, err error) raw.Status {
	if errors.Is(err, fs.ErrNotExist) {
		return raw.Status(syscall.ESTALE)
	}
	return m.status(op, err)
}
