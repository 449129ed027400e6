package fs

import (
	"time"
)

// Ino is an inode number. Inode numbers are never reused.
type Ino uint64

// RootIno is the root directory's inode number.
const RootIno Ino = 1

// FileType is the type of an inode.
type FileType uint8

// File types.
const (
	TypeRegular FileType = iota + 1
	TypeDirectory
	TypeSymlink
	TypeFIFO
	TypeSocket
	TypeChar
	TypeBlock
)

func (t FileType) String() string {
	switch t {
	case TypeRegular:
		return "file"
	case TypeDirectory:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFIFO:
		return "fifo"
	case TypeSocket:
		return "socket"
	case TypeChar:
		return "char"
	case TypeBlock:
		return "block"
	}
	return "invalid"
}

// Limits.
const (
	MaxNameLen  = 255
	MaxLinks    = 1 << 16
	MaxFileSize = 1 << 60
	MaxSymlink  = 4096
)

// Permission bits accepted in Attr.Mode (including setuid, setgid, sticky).
const (
	ModePerm   = 0o7777
	ModeSetuid = 0o4000
	ModeSetgid = 0o2000
	ModeSticky = 0o1000
)

// Attr holds an inode's attributes.
type Attr struct {
	Ino   Ino
	Gen   uint64 // random per inode, for unforgeable file handles
	Type  FileType
	Mode  uint32 // permission bits (ModePerm)
	Nlink uint32
	Uid   uint32
	Gid   uint32
	Size  uint64
	// Used is the number of bytes of storage the file's data references
	// (holes excluded; each extent rounded up to 4 KiB), as the inode
	// keeps it (updated by every change of the file's extents), in the
	// attributes of every call; for symlinks the size rounded up to
	// 4 KiB, for directories 4096.
	Used uint64
	Rdev uint64 // device number of char/block devices: major<<32 | minor
	// Change increases on every change to the inode's data or attributes;
	// it is usable as the NFSv4 change attribute.
	Change                     uint64
	Atime, Mtime, Ctime, Btime time.Time
}

// AttrMask selects the mutable attributes GetAttrMask returns. Ino, Gen
// and Type never change and are always returned.
type AttrMask uint32

// Attribute bits of AttrMask.
const (
	AttrMode AttrMask = 1 << iota
	AttrNlink
	AttrUid
	AttrGid
	AttrSize
	AttrUsed
	AttrRdev
	AttrChange
	AttrAtime
	AttrMtime
	AttrCtime
	AttrBtime

	AttrAll = AttrMode | AttrNlink | AttrUid | AttrGid | AttrSize | AttrUsed | AttrRdev | AttrChange |
		AttrAtime | AttrMtime | AttrCtime | AttrBtime
)

// Mask returns a copy of a with the attributes not in m zeroed.
func (a Attr) Mask(m AttrMask) Attr {
	out := Attr{Ino: a.Ino, Gen: a.Gen, Type: a.Type}
	if m&AttrMode != 0 {
		out.Mode = a.Mode
	}
	if m&AttrNlink != 0 {
		out.Nlink = a.Nlink
	}
	if m&AttrUid != 0 {
		out.Uid = a.Uid
	}
	if m&AttrGid != 0 {
		out.Gid = a.Gid
	}
	if m&AttrSize != 0 {
		out.Size = a.Size
	}
	if m&AttrUsed != 0 {
		out.Used = a.Used
	}
	if m&AttrRdev != 0 {
		out.Rdev = a.Rdev
	}
	if m&AttrChange != 0 {
		out.Change = a.Change
	}
	if m&AttrAtime != 0 {
		out.Atime = a.Atime
	}
	if m&AttrMtime != 0 {
		out.Mtime = a.Mtime
	}
	if m&AttrCtime != 0 {
		out.Ctime = a.Ctime
	}
	if m&AttrBtime != 0 {
		out.Btime = a.Btime
	}
	return out
}

// Cred is the identity an operation runs as. Uid 0 is the superuser.
type Cred struct {
	Uid, Gid uint32
	Groups   []uint32
}

// RootCred is the superuser.
var RootCred = Cred{}

// SetTime sets a timestamp to a given time or to the server's clock.
type SetTime struct {
	Now  bool
	Time time.Time
}

// SetAttr lists attribute changes; nil fields are left alone.
type SetAttr struct {
	Mode  *uint32
	Uid   *uint32
	Gid   *uint32
	Size  *uint64
	Atime *SetTime
	Mtime *SetTime
	// OpenForWrite says the caller changes Size through a file it has
	// open for writing, so write permission was checked at open.
	OpenForWrite bool
}

// CreateRequest describes a new inode.
type CreateRequest struct {
	Type   FileType
	Mode   uint32 // permission bits; umask already applied by the caller
	Rdev   uint64 // for TypeChar and TypeBlock
	Target string // for TypeSymlink
	// Exclusive fails with ErrExist if the name exists. Otherwise creating
	// an existing regular file opens it (Create returns its attributes and
	// created=false); for other types an existing name is ErrExist.
	Exclusive bool
}

// DirEntry is one directory entry. Cookies are stable for the life of the
// entry and increase in the order entries were created; they start at 3
// (NFSv4 reserves 0, 1 and 2).
type DirEntry struct {
	Name   string
	Ino    Ino
	Type   FileType
	Cookie uint64
	// Gen is the inode's generation (with Ino: its Handle), set when
	// ReadDirRequest.WithGen or WithAttr, and for entries whose cookie
	// value names it (layout 4); else 0.
	Gen  uint64
	Attr *Attr // set when ReadDirRequest.WithAttr
}

// ReadDirRequest pages through a directory.
type ReadDirRequest struct {
	Cookie   uint64 // 0 starts at the beginning; else the last cookie seen
	Limit    int    // at most this many entries (<= 0: no limit)
	WithAttr bool
	// WithGen sets DirEntry.Gen of every entry (an inode read for an entry
	// whose cookie value does not name it, written before layout 4).
	WithGen bool
}

// RenameFlags modify Rename.
type RenameFlags struct {
	NoReplace bool // fail with ErrExist if the destination exists
	Exchange  bool // atomically swap source and destination (both must exist)
}

// Whence for Seek.
type Whence int

// Seek targets.
const (
	SeekData Whence = iota
	SeekHole
)

// Access bits for Access.
const (
	AccessRead    = 4
	AccessWrite   = 2
	AccessExecute = 1
)

// StatFS describes the file system's capacity.
type StatFS struct {
	BlockSize   uint32
	Blocks      uint64
	BlocksFree  uint64
	BlocksAvail uint64
	Files       uint64
	FilesFree   uint64
	NameLen     uint32
}

// XattrFlags modify SetXattr.
type XattrFlags struct {
	Create  bool // fail with ErrExist if the attribute exists
	Replace bool // fail with ErrNoAttr if it does not
}

// TxnOptions configures a transaction.
type TxnOptions struct {
	ReadOnly bool
	// NoSync makes Commit return once the changes are visible to every
	// later transaction, without waiting for the metadata log to be
	// flushed: they become durable at the next FS.Sync, or when a later
	// commit without NoSync returns. Commits become durable in commit
	// order, so a crash keeps every Sync-acknowledged commit and a prefix
	// of the NoSync commits after it; a lost commit is lost whole. The
	// slice data such a commit references is still flushed before it
	// commits (one data flush, no log flush), so durable metadata never
	// names bytes that are not on disk. Readers may see NoSync changes
	// that a crash then loses, and never wait for them to become durable.
	NoSync bool
	// SyncFollows, with NoSync, promises that the caller calls FS.Sync
	// after this commit before it acknowledges anything (an NFS plain
	// COMPOUND with a durable operation syncs once before its reply).
	// Small writes are then stored inline in the metadata, as for a
	// durable commit, so that the Sync costs one log flush and no slice
	// flush; without it a NoSync commit puts them in slices (cheaper to
	// write, flushed with the log at the next Sync).
	SyncFollows bool
}
