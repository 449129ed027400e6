package vnfs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"syscall"
	"time"

	"github.com/txnfs/txnfs/nfs4/client"
)

// FS is the vectorized file-system API of vNFS (FAST'17, Table 1). An FS
// is either an NFSv4.1+ server (Dial) or the local file system (Local);
// programs use the same calls for both.
//
// # Results
//
// Every vector call executes its items in order and returns the number of
// items that succeeded and, on failure, an *Error naming the first failed
// item (Error.Index == n), its path and the reason. Items after it were not
// executed — unless the failed item's outcome is unknown (the error wraps
// client.ErrTransport, client.ErrUncertain or a context error) in an
// ordered call sent as a chain of COMPOUNDs (docs/vnfs.md, "Chains"): the
// COMPOUNDs already sent after it (up to Config.Window) may have run too,
// as the server runs a chain's COMPOUND once the one before it succeeded,
// whether or not its reply reached the client. Per-item outputs (bytes
// read, attributes, descriptors) are written into the items themselves.
//
// # Paths and descriptors
//
// Paths are slash-separated and relative to the FS root (a leading "/" is
// optional; ".." may not climb above the root). Symbolic links are not
// followed in the last component (like lstat and O_NOFOLLOW); a symbolic
// link inside a path fails with ELOOP on NFS. Files opened with VOpen are
// addressed by descriptor.
//
// # Concurrency
//
// All methods are safe for concurrent use. Buffers in items belong to the
// caller; the FS writes outputs into them only during the call.
type FS interface {
	// VOpen opens files and sets each item's FD.
	VOpen(ctx context.Context, items []OpenItem) (int, error)
	// VClose closes descriptors.
	VClose(ctx context.Context, fds []FD) (int, error)
	// VRead reads into each item's Data (as many bytes as len(Data)),
	// opening and closing files given by path. Sets N and EOF.
	VRead(ctx context.Context, ios []IO) (int, error)
	// VWrite writes each item's Data (creating, truncating, appending
	// and syncing as its Flags say). Sets N.
	VWrite(ctx context.Context, ios []IO) (int, error)
	// VGetAttrs fills each item's Attr with the attributes in its Mask.
	VGetAttrs(ctx context.Context, items []AttrItem) (int, error)
	// VSetAttrs sets the attributes in each item's Mask (mode, owner,
	// group, size, atime, mtime).
	VSetAttrs(ctx context.Context, items []AttrItem) (int, error)
	// VCopy copies ranges by reading and writing them.
	VCopy(ctx context.Context, items []CopyItem) (int, error)
	// VSCopy copies ranges with server-side copy (NFSv4.2 COPY) and falls
	// back to VCopy when the server does not support it.
	VSCopy(ctx context.Context, items []CopyItem) (int, error)
	// VClone shares ranges between files (NFSv4.2 CLONE): WTF-style
	// file slicing, metadata-only on txnfs. Fails with ErrNotSupported
	// (unwrapping to EOPNOTSUPP) where CLONE is missing.
	VClone(ctx context.Context, items []CopyItem) (int, error)
	// VMkdir creates directories, in order (parents first).
	VMkdir(ctx context.Context, items []MkdirItem) (int, error)
	// VListDir lists directories, with the attributes in opts.Mask,
	// calling fn for each entry ("." and ".." excluded). With
	// opts.Recursive, subdirectories are listed too, breadth-first.
	VListDir(ctx context.Context, dirs []string, opts ListOptions, fn func(DirEntry) error) error
	// VSymlink creates symbolic links.
	VSymlink(ctx context.Context, items []SymlinkItem) (int, error)
	// VReadlink reads symbolic links into each item's Target.
	VReadlink(ctx context.Context, items []ReadlinkItem) (int, error)
	// VHardlink creates hard links.
	VHardlink(ctx context.Context, items []LinkItem) (int, error)
	// VRemove removes files, symbolic links and empty directories.
	VRemove(ctx context.Context, paths []string) (int, error)
	// VRename renames objects.
	VRename(ctx context.Context, items []RenameItem) (int, error)

	// Txn returns a view of the FS whose vector calls are each one
	// atomic transaction: all items take effect or none does (on failure
	// n is 0 and outputs are undefined). A vector that fits one COMPOUND
	// is one transactional COMPOUND (the server retries it on conflicts);
	// a larger one runs as a multi-compound transaction, which fails
	// with an error wrapping *TxnConflictError if concurrent changes
	// prevent its commit (nothing applied; the caller may retry). A call
	// fails with ErrTxnUnsupported on a server without the txnfs
	// extensions (or on the local file system), having executed nothing.
	// For a transaction over several calls, see Begin.
	Txn() FS
	// Close releases the FS (closing open descriptors).
	Close() error
}

// Unordered returns a view of f whose vector calls may execute their items
// in any order and concurrently (several COMPOUNDs in flight), trading the
// in-order failure semantics for throughput: a call still returns the
// index of the first failed item, but items after it may have been
// executed. Use it for independent items whose failure aborts the whole
// job anyway (copying or extracting many files); items that depend on
// earlier ones (a directory and its contents) need ordered calls. File
// systems without pipelining return f.
func Unordered(f FS) FS {
	if u, ok := f.(interface{ Unordered() FS }); ok {
		return u.Unordered()
	}
	return f
}

// FD is a file descriptor returned by VOpen. The zero FD is invalid.
type FD int

// File names a file by path or by descriptor (FD != 0).
type File struct {
	Path string
	FD   FD
}

// P returns the File for a path.
func P(p string) File { return File{Path: p} }

// D returns the File for a descriptor.
func D(fd FD) File { return File{FD: fd} }

func (f File) String() string {
	if f.FD != 0 {
		return fmt.Sprintf("fd %d", f.FD)
	}
	return f.Path
}

// AppendOffset as an IO's Offset appends the data at the end of the file:
// atomically on servers with the append extension, otherwise by reading
// the size first (not atomic with respect to other appenders).
const AppendOffset = math.MaxUint64

// IOFlags modify an IO.
type IOFlags uint32

const (
	// Create creates the file if it does not exist (OPEN4_CREATE).
	Create IOFlags = 1 << iota
	// Exclusive with Create fails if the file exists.
	Exclusive
	// Truncate empties the file before writing.
	Truncate
	// Stable makes the write durable before the call returns
	// (FILE_SYNC4): a write and an fsync in one round trip.
	Stable
)

// IO is one read or write of a vector call.
type IO struct {
	File   File
	Offset uint64 // AppendOffset to append (writes)
	// Data is the buffer to read into (its length is the count) or the
	// bytes to write.
	Data  []byte
	Flags IOFlags
	// Mode is the permission of a created file (default 0644).
	Mode uint32

	// N is set to the number of bytes read or written.
	N int
	// EOF is set when a read reached the end of the file.
	EOF bool
}

// OpenFlags say how VOpen opens a file.
type OpenFlags uint32

const (
	// OpenRead opens for reading.
	OpenRead OpenFlags = 1 << iota
	// OpenWrite opens for writing.
	OpenWrite
	// OpenCreate creates the file if missing.
	OpenCreate
	// OpenExclusive with OpenCreate fails if the file exists.
	OpenExclusive
	// OpenTruncate empties the file.
	OpenTruncate
)

// OpenItem is one file to open.
type OpenItem struct {
	Path  string
	Flags OpenFlags
	Mode  uint32 // for OpenCreate (default 0644)
	// FD is set on success.
	FD FD
}

// FileType is the type of a file-system object.
type FileType uint8

const (
	TypeUnknown FileType = iota
	TypeRegular
	TypeDir
	TypeSymlink
	TypeBlock
	TypeChar
	TypeFIFO
	TypeSocket
)

func (t FileType) String() string {
	return [...]string{"unknown", "regular", "directory", "symlink", "block", "char", "fifo", "socket"}[t]
}

// AttrMask selects attributes.
type AttrMask uint32

const (
	AttrType AttrMask = 1 << iota
	AttrMode
	AttrNlink
	AttrUid
	AttrGid
	AttrSize
	AttrIno
	AttrSpace // bytes allocated
	AttrAtime
	AttrMtime
	AttrCtime
	AttrRdev

	// AttrStat is everything stat(2) reports.
	AttrStat = AttrType | AttrMode | AttrNlink | AttrUid | AttrGid | AttrSize | AttrIno |
		AttrSpace | AttrAtime | AttrMtime | AttrCtime | AttrRdev
	// attrSettable are the attributes VSetAttrs can set.
	attrSettable = AttrMode | AttrUid | AttrGid | AttrSize | AttrAtime | AttrMtime
)

// Attr holds file attributes. Only the fields selected by the mask of the
// call are meaningful.
type Attr struct {
	Type  FileType
	Mode  uint32 // permission bits (07777)
	Nlink uint32
	Uid   uint32
	Gid   uint32
	Size  uint64
	Ino   uint64
	Space uint64 // bytes allocated
	Rdev  [2]uint32
	// Times; as input to VSetAttrs a zero time means "now".
	Atime, Mtime, Ctime time.Time
}

// AttrItem is one object of VGetAttrs or VSetAttrs.
type AttrItem struct {
	File File
	Mask AttrMask
	Attr Attr
}

// CopyItem is one range copy (VCopy, VSCopy, VClone).
type CopyItem struct {
	Src, Dst             File
	SrcOffset, DstOffset uint64
	// Length is the number of bytes; CopyToEnd copies to the end of the
	// source.
	Length uint64
	// Flags: Create creates Dst (with Mode), Truncate empties it first.
	Flags IOFlags
	Mode  uint32
	// N is set to the number of bytes copied.
	N uint64
}

// CopyToEnd as CopyItem.Length copies to the end of the source.
const CopyToEnd = math.MaxUint64

// MkdirItem is one directory to create.
type MkdirItem struct {
	Path string
	Mode uint32 // default 0755
}

// SymlinkItem is one symbolic link to create at Path pointing to Target.
type SymlinkItem struct {
	Path, Target string
}

// ReadlinkItem is one symbolic link to read; Target is set.
type ReadlinkItem struct {
	Path   string
	Target string
}

// LinkItem makes New a hard link to Old.
type LinkItem struct {
	Old, New string
}

// RenameItem renames Old to New.
type RenameItem struct {
	Old, New string
}

// ListOptions configure VListDir.
type ListOptions struct {
	// Mask selects the attributes reported with each entry (AttrType is
	// always included).
	Mask AttrMask
	// Recursive lists subdirectories too (breadth-first).
	Recursive bool
}

// DirEntry is one entry reported by VListDir.
type DirEntry struct {
	// Dir is the listed directory, as given (or as reached by recursion).
	Dir  string
	Name string
	Attr Attr
	// Depth is 0 for entries of the directories given, 1 for their
	// subdirectories' entries, and so on.
	Depth int
}

// Path returns Dir/Name.
func (e DirEntry) Path() string { return path.Join(e.Dir, e.Name) }

// Error reports the first failed item of a vector call.
type Error struct {
	Op    string // "read", "mkdir", ...
	Index int    // index of the failed item
	Path  string // its path (or "fd N")
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Op, e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrTxnUnsupported means the server cannot run transactional
	// compounds; nothing was executed.
	ErrTxnUnsupported = client.ErrTxnUnsupported
	// ErrTxnTooLarge meant a transactional vector did not fit one
	// COMPOUND. Such vectors now run as multi-compound transactions;
	// it is no longer returned (kept for compatibility).
	ErrTxnTooLarge = errors.New("vnfs: vector too large for one transactional compound")
	// ErrNotSupported means the server lacks an operation (COPY, CLONE);
	// it unwraps to EOPNOTSUPP.
	ErrNotSupported = fmt.Errorf("vnfs: operation not supported by the server: %w", syscall.EOPNOTSUPP)
	errIsDir        = fmt.Errorf("vnfs: is the root directory: %w", syscall.EISDIR)
	// ErrBadFD means a descriptor is not open.
	ErrBadFD = fmt.Errorf("vnfs: bad file descriptor: %w", syscall.EBADF)
)
