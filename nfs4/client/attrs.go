package client

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Bitmap is an NFSv4 attribute bitmap (bitmap4).
type Bitmap []uint32

// MakeBitmap returns the bitmap with the given attribute numbers set.
func MakeBitmap(attrs ...uint32) Bitmap {
	var b Bitmap
	for _, a := range attrs {
		b = b.With(a)
	}
	return b
}

// With returns b with attribute a set (b may be modified).
func (b Bitmap) With(a uint32) Bitmap {
	for uint32(len(b)) <= a/32 {
		b = append(b, 0)
	}
	b[a/32] |= 1 << (a % 32)
	return b
}

// Has reports whether attribute a is set.
func (b Bitmap) Has(a uint32) bool {
	return a/32 < uint32(len(b)) && b[a/32]&(1<<(a%32)) != 0
}

// Attrs holds the decoded values of the attributes this client uses. Mask
// says which fields are valid (a set bit per FATTR4_* number).
type Attrs struct {
	Mask Bitmap

	Type      nfsv4.NfsFtype4 // FATTR4_TYPE
	Change    uint64          // FATTR4_CHANGE
	Size      uint64          // FATTR4_SIZE
	LeaseTime uint32          // FATTR4_LEASE_TIME
	FileID    uint64          // FATTR4_FILEID
	MaxRead   uint64          // FATTR4_MAXREAD
	MaxWrite  uint64          // FATTR4_MAXWRITE
	Mode      uint32          // FATTR4_MODE (permission bits 07777)
	Nlink     uint32          // FATTR4_NUMLINKS
	Owner     string          // FATTR4_OWNER
	Group     string          // FATTR4_OWNER_GROUP
	Rdev      nfsv4.Specdata4 // FATTR4_RAWDEV
	SpaceUsed uint64          // FATTR4_SPACE_USED
	Atime     time.Time       // FATTR4_TIME_ACCESS; as input, FATTR4_TIME_ACCESS_SET
	Ctime     time.Time       // FATTR4_TIME_METADATA
	Mtime     time.Time       // FATTR4_TIME_MODIFY; as input, FATTR4_TIME_MODIFY_SET
	Supported Bitmap          // FATTR4_SUPPORTED_ATTRS
	CloneBlk  uint32          // FATTR4_CLONE_BLKSIZE
	Error     nfsv4.Nfsstat4  // FATTR4_RDATTR_ERROR (READDIR entries)
	Handle    []byte          // FATTR4_FILEHANDLE

	// Capacity (statfs).
	FilesAvail uint64 // FATTR4_FILES_AVAIL
	FilesFree  uint64 // FATTR4_FILES_FREE
	FilesTotal uint64 // FATTR4_FILES_TOTAL
	MaxName    uint32 // FATTR4_MAXNAME
	SpaceAvail uint64 // FATTR4_SPACE_AVAIL
	SpaceFree  uint64 // FATTR4_SPACE_FREE
	SpaceTotal uint64 // FATTR4_SPACE_TOTAL
}

// Common attribute masks.
var (
	// StatMask is what a stat(2) needs.
	StatMask = MakeBitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_SIZE,
		nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MODE, nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER,
		nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_RAWDEV, nfsv4.FATTR4_SPACE_USED,
		nfsv4.FATTR4_TIME_ACCESS, nfsv4.FATTR4_TIME_METADATA, nfsv4.FATTR4_TIME_MODIFY)
	// TypeMask is just the file type.
	TypeMask = MakeBitmap(nfsv4.FATTR4_TYPE)
)

// Uid parses the owner as a numeric uid ("1000" or "1000@domain").
func (a *Attrs) Uid() (uint32, bool) { return parseID(a.Owner) }

// Gid parses the owner group as a numeric gid.
func (a *Attrs) Gid() (uint32, bool) { return parseID(a.Group) }

func parseID(s string) (uint32, bool) {
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 65534, false
	}
	return uint32(v), true
}

// DecodeAttrs decodes f with the generated per-attribute readers
// (nfsv4.ReadFattr4*). Every attribute present in f.Attrmask must be one
// this package knows; values are laid out in bitmap order.
func DecodeAttrs(f nfsv4.Fattr4) (Attrs, error) {
	a := Attrs{Mask: Bitmap(f.Attrmask)}
	r := bytes.NewReader(f.AttrVals)
	for w, word := range f.Attrmask {
		for bit := uint32(0); bit < 32; bit++ {
			if word&(1<<bit) == 0 {
				continue
			}
			n := uint32(w)*32 + bit
			var err error
			switch n {
			case nfsv4.FATTR4_SUPPORTED_ATTRS:
				a.Supported, _, err = nfsv4.ReadFattr4SupportedAttrs(r)
			case nfsv4.FATTR4_TYPE:
				a.Type, _, err = nfsv4.ReadFattr4Type(r)
			case nfsv4.FATTR4_FH_EXPIRE_TYPE:
				_, _, err = nfsv4.ReadFattr4FhExpireType(r)
			case nfsv4.FATTR4_CHANGE:
				a.Change, _, err = nfsv4.ReadFattr4Change(r)
			case nfsv4.FATTR4_SIZE:
				a.Size, _, err = nfsv4.ReadFattr4Size(r)
			case nfsv4.FATTR4_LINK_SUPPORT:
				_, _, err = nfsv4.ReadFattr4LinkSupport(r)
			case nfsv4.FATTR4_SYMLINK_SUPPORT:
				_, _, err = nfsv4.ReadFattr4SymlinkSupport(r)
			case nfsv4.FATTR4_NAMED_ATTR:
				_, _, err = nfsv4.ReadFattr4NamedAttr(r)
			case nfsv4.FATTR4_FSID:
				var v nfsv4.Fsid4
				_, err = nfsv4.ReadFattr4Fsid(r, &v)
			case nfsv4.FATTR4_UNIQUE_HANDLES:
				_, _, err = nfsv4.ReadFattr4UniqueHandles(r)
			case nfsv4.FATTR4_LEASE_TIME:
				a.LeaseTime, _, err = nfsv4.ReadFattr4LeaseTime(r)
			case nfsv4.FATTR4_RDATTR_ERROR:
				a.Error, _, err = nfsv4.ReadFattr4RdattrError(r)
			case nfsv4.FATTR4_FILEHANDLE:
				a.Handle, _, err = nfsv4.ReadFattr4Filehandle(r)
			case nfsv4.FATTR4_ACLSUPPORT:
				_, _, err = nfsv4.ReadFattr4Aclsupport(r)
			case nfsv4.FATTR4_CANSETTIME:
				_, _, err = nfsv4.ReadFattr4Cansettime(r)
			case nfsv4.FATTR4_CASE_INSENSITIVE:
				_, _, err = nfsv4.ReadFattr4CaseInsensitive(r)
			case nfsv4.FATTR4_CASE_PRESERVING:
				_, _, err = nfsv4.ReadFattr4CasePreserving(r)
			case nfsv4.FATTR4_CHOWN_RESTRICTED:
				_, _, err = nfsv4.ReadFattr4ChownRestricted(r)
			case nfsv4.FATTR4_FILEID:
				a.FileID, _, err = nfsv4.ReadFattr4Fileid(r)
			case nfsv4.FATTR4_FILES_AVAIL:
				a.FilesAvail, _, err = nfsv4.ReadFattr4FilesAvail(r)
			case nfsv4.FATTR4_FILES_FREE:
				a.FilesFree, _, err = nfsv4.ReadFattr4FilesFree(r)
			case nfsv4.FATTR4_FILES_TOTAL:
				a.FilesTotal, _, err = nfsv4.ReadFattr4FilesTotal(r)
			case nfsv4.FATTR4_HOMOGENEOUS:
				_, _, err = nfsv4.ReadFattr4Homogeneous(r)
			case nfsv4.FATTR4_MAXFILESIZE:
				_, _, err = nfsv4.ReadFattr4Maxfilesize(r)
			case nfsv4.FATTR4_MAXLINK:
				_, _, err = nfsv4.ReadFattr4Maxlink(r)
			case nfsv4.FATTR4_MAXNAME:
				a.MaxName, _, err = nfsv4.ReadFattr4Maxname(r)
			case nfsv4.FATTR4_MAXREAD:
				a.MaxRead, _, err = nfsv4.ReadFattr4Maxread(r)
			case nfsv4.FATTR4_MAXWRITE:
				a.MaxWrite, _, err = nfsv4.ReadFattr4Maxwrite(r)
			case nfsv4.FATTR4_MODE:
				a.Mode, _, err = nfsv4.ReadFattr4Mode(r)
			case nfsv4.FATTR4_NO_TRUNC:
				_, _, err = nfsv4.ReadFattr4NoTrunc(r)
			case nfsv4.FATTR4_NUMLINKS:
				a.Nlink, _, err = nfsv4.ReadFattr4Numlinks(r)
			case nfsv4.FATTR4_OWNER:
				a.Owner, _, err = nfsv4.ReadFattr4Owner(r)
			case nfsv4.FATTR4_OWNER_GROUP:
				a.Group, _, err = nfsv4.ReadFattr4OwnerGroup(r)
			case nfsv4.FATTR4_RAWDEV:
				_, err = nfsv4.ReadFattr4Rawdev(r, &a.Rdev)
			case nfsv4.FATTR4_SPACE_AVAIL:
				a.SpaceAvail, _, err = nfsv4.ReadFattr4SpaceAvail(r)
			case nfsv4.FATTR4_SPACE_FREE:
				a.SpaceFree, _, err = nfsv4.ReadFattr4SpaceFree(r)
			case nfsv4.FATTR4_SPACE_TOTAL:
				a.SpaceTotal, _, err = nfsv4.ReadFattr4SpaceTotal(r)
			case nfsv4.FATTR4_SPACE_USED:
				a.SpaceUsed, _, err = nfsv4.ReadFattr4SpaceUsed(r)
			case nfsv4.FATTR4_TIME_ACCESS:
				a.Atime, err = readTime(r, nfsv4.ReadFattr4TimeAccess)
			case nfsv4.FATTR4_TIME_CREATE:
				_, err = readTime(r, nfsv4.ReadFattr4TimeCreate)
			case nfsv4.FATTR4_TIME_DELTA:
				_, err = readTime(r, nfsv4.ReadFattr4TimeDelta)
			case nfsv4.FATTR4_TIME_METADATA:
				a.Ctime, err = readTime(r, nfsv4.ReadFattr4TimeMetadata)
			case nfsv4.FATTR4_TIME_MODIFY:
				a.Mtime, err = readTime(r, nfsv4.ReadFattr4TimeModify)
			case nfsv4.FATTR4_MOUNTED_ON_FILEID:
				_, _, err = nfsv4.ReadFattr4MountedOnFileid(r)
			case nfsv4.FATTR4_SUPPATTR_EXCLCREAT:
				_, _, err = nfsv4.ReadFattr4SuppattrExclcreat(r)
			case nfsv4.FATTR4_CLONE_BLKSIZE:
				a.CloneBlk, _, err = nfsv4.ReadFattr4CloneBlksize(r)
			default:
				return a, fmt.Errorf("nfs4 client: cannot decode attribute %d", n)
			}
			if err != nil {
				return a, fmt.Errorf("nfs4 client: decoding attribute %d: %w", n, err)
			}
		}
	}
	return a, nil
}

// readTime reads an nfstime4 attribute with its generated reader.
func readTime(r io.Reader, read func(io.Reader, *nfsv4.Nfstime4) (int64, error)) (time.Time, error) {
	var t nfsv4.Nfstime4
	if _, err := read(r, &t); err != nil {
		return time.Time{}, err
	}
	return time.Unix(t.Seconds, int64(t.Nseconds)), nil
}

func nfsTime(t time.Time) nfsv4.Nfstime4 {
	return nfsv4.Nfstime4{Seconds: t.Unix(), Nseconds: uint32(t.Nanosecond())}
}

// SetAttrs describes attributes to set (SETATTR, or creation attributes).
// Only the fields whose Set* flag is true are sent.
type SetAttrs struct {
	SetSize  bool
	Size     uint64
	SetMode  bool
	Mode     uint32
	SetUid   bool
	Uid      uint32
	SetGid   bool
	Gid      uint32
	SetAtime bool
	Atime    time.Time // zero with SetAtime: the server's current time
	SetMtime bool
	Mtime    time.Time // zero with SetMtime: the server's current time
}

// Empty reports whether no attribute is set.
func (s *SetAttrs) Empty() bool {
	return !s.SetSize && !s.SetMode && !s.SetUid && !s.SetGid && !s.SetAtime && !s.SetMtime
}

// Encode returns the fattr4 for s. Owners are sent as numeric strings.
func (s *SetAttrs) Encode() nfsv4.Fattr4 {
	var mask Bitmap
	var b bytes.Buffer
	// Values in increasing attribute-number order.
	if s.SetSize {
		mask = mask.With(nfsv4.FATTR4_SIZE)
		nfsv4.WriteFattr4Size(&b, s.Size)
	}
	if s.SetMode {
		mask = mask.With(nfsv4.FATTR4_MODE)
		nfsv4.WriteFattr4Mode(&b, s.Mode&07777)
	}
	if s.SetUid {
		mask = mask.With(nfsv4.FATTR4_OWNER)
		nfsv4.WriteFattr4Owner(&b, strconv.FormatUint(uint64(s.Uid), 10))
	}
	if s.SetGid {
		mask = mask.With(nfsv4.FATTR4_OWNER_GROUP)
		nfsv4.WriteFattr4OwnerGroup(&b, strconv.FormatUint(uint64(s.Gid), 10))
	}
	if s.SetAtime {
		mask = mask.With(nfsv4.FATTR4_TIME_ACCESS_SET)
		nfsv4.WriteFattr4TimeAccessSet(&b, settime(s.Atime))
	}
	if s.SetMtime {
		mask = mask.With(nfsv4.FATTR4_TIME_MODIFY_SET)
		nfsv4.WriteFattr4TimeModifySet(&b, settime(s.Mtime))
	}
	if mask == nil {
		mask = Bitmap{}
	}
	return nfsv4.Fattr4{Attrmask: mask, AttrVals: b.Bytes()}
}

func settime(t time.Time) nfsv4.Settime4 {
	if t.IsZero() {
		return &nfsv4.Settime4_default{SetIt: nfsv4.SET_TO_SERVER_TIME4}
	}
	return &nfsv4.Settime4_SET_TO_CLIENT_TIME4{Time: nfsTime(t)}
}
