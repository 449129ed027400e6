package fs

import "errors"

// The closed set of errors the engine reports. Every error returned by the
// engine wraps exactly one of these (check with errors.Is); front ends map
// them to protocol status codes in one switch each (NFS status, errno).
var (
	ErrNotExist     = errors.New("no such file or directory")                                       // ENOENT, NFS4ERR_NOENT
	ErrExist        = errors.New("file exists")                                                     // EEXIST
	ErrNotDir       = errors.New("not a directory")                                                 // ENOTDIR
	ErrIsDir        = errors.New("is a directory")                                                  // EISDIR
	ErrNotEmpty     = errors.New("directory not empty")                                             // ENOTEMPTY
	ErrInvalid      = errors.New("invalid argument")                                                // EINVAL (bad name, rename loop, ...)
	ErrBadName      = errors.New("invalid file name")                                               // EINVAL; NFS4ERR_BADNAME / NFS4ERR_INVAL
	ErrNameTooLong  = errors.New("file name too long")                                              // ENAMETOOLONG
	ErrAccess       = errors.New("permission denied")                                               // EACCES
	ErrPerm         = errors.New("operation not permitted")                                         // EPERM
	ErrTooManyLinks = errors.New("too many links")                                                  // EMLINK
	ErrFileTooBig   = errors.New("file too large")                                                  // EFBIG
	ErrNoSpace      = errors.New("no space left on device")                                         // ENOSPC
	ErrNoAttr       = errors.New("no such attribute")                                               // ENODATA (xattrs)
	ErrRange        = errors.New("result too large for buffer")                                     // ERANGE
	ErrNotSupported = errors.New("operation not supported")                                         // ENOTSUP
	ErrWrongType    = errors.New("wrong file type")                                                 // EINVAL/NFS4ERR_WRONG_TYPE (e.g. readlink of a file)
	ErrBadSlice     = errors.New("foreign or malformed slice")                                      // paste of slices not yanked from this file system
	ErrCorrupt      = errors.New("corrupt metadata or data")                                        // EIO; detail is in the wrapped error
	ErrConflict     = errors.New("transaction aborted: a replayed operation saw different results") // the caller's transaction cannot commit
	ErrTxnDone      = errors.New("transaction already finished")                                    // use after Commit/Abort
	ErrReadOnly     = errors.New("read-only transaction")                                           // EROFS
	ErrIO           = errors.New("input/output error")                                              // EIO from the kv store or slice store
)
