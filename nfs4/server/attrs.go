package server

import (
	"bytes"
	"math"
	"math/bits"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
)

// bitmap helpers -----------------------------------------------------------

func bmHas(bm []uint32, bit uint32) bool {
	w := bit / 32
	return int(w) < len(bm) && bm[w]&(1<<(bit%32)) != 0
}

func bmSet(bm []uint32, bit uint32) []uint32 {
	for uint32(len(bm)) <= bit/32 {
		bm = append(bm, 0)
	}
	bm[bit/32] |= 1 << (bit % 32)
	return bm
}

func bmTrim(bm []uint32) []uint32 {
	for len(bm) > 0 && bm[len(bm)-1] == 0 {
		bm = bm[:len(bm)-1]
	}
	return bm
}

func bmOf(bitsList ...uint32) []uint32 {
	var bm []uint32
	for _, b := range bitsList {
		bm = bmSet(bm, b)
	}
	return bm
}

// forEachBit calls fn for each set bit in ascending order.
func forEachBit(bm []uint32, fn func(bit uint32) bool) {
	for w, word := range bm {
		for word != 0 {
			b := uint32(bits.TrailingZeros32(word))
			word &^= 1 << b
			if !fn(uint32(w)*32 + b) {
				return
			}
		}
	}
}

// supported attributes ------------------------------------------------------

var supportedAttrs40 = bmOf(
	nfsv4.FATTR4_SUPPORTED_ATTRS, nfsv4.FATTR4_TYPE, nfsv4.FATTR4_FH_EXPIRE_TYPE,
	nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_LINK_SUPPORT,
	nfsv4.FATTR4_SYMLINK_SUPPORT, nfsv4.FATTR4_NAMED_ATTR, nfsv4.FATTR4_FSID,
	nfsv4.FATTR4_UNIQUE_HANDLES, nfsv4.FATTR4_LEASE_TIME, nfsv4.FATTR4_RDATTR_ERROR,
	nfsv4.FATTR4_FILEHANDLE, nfsv4.FATTR4_ACLSUPPORT, nfsv4.FATTR4_CANSETTIME,
	nfsv4.FATTR4_CASE_INSENSITIVE, nfsv4.FATTR4_CASE_PRESERVING,
	nfsv4.FATTR4_CHOWN_RESTRICTED, nfsv4.FATTR4_FILEID, nfsv4.FATTR4_FILES_AVAIL,
	nfsv4.FATTR4_FILES_FREE, nfsv4.FATTR4_FILES_TOTAL, nfsv4.FATTR4_HOMOGENEOUS,
	nfsv4.FATTR4_MAXFILESIZE, nfsv4.FATTR4_MAXLINK, nfsv4.FATTR4_MAXNAME,
	nfsv4.FATTR4_MAXREAD, nfsv4.FATTR4_MAXWRITE, nfsv4.FATTR4_MODE,
	nfsv4.FATTR4_NO_TRUNC, nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER,
	nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_RAWDEV, nfsv4.FATTR4_SPACE_AVAIL,
	nfsv4.FATTR4_SPACE_FREE, nfsv4.FATTR4_SPACE_TOTAL, nfsv4.FATTR4_SPACE_USED,
	nfsv4.FATTR4_TIME_ACCESS, nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_CREATE,
	nfsv4.FATTR4_TIME_DELTA, nfsv4.FATTR4_TIME_METADATA, nfsv4.FATTR4_TIME_MODIFY,
	nfsv4.FATTR4_TIME_MODIFY_SET, nfsv4.FATTR4_MOUNTED_ON_FILEID,
)

var supportedAttrs41 = bmSet(append([]uint32(nil), supportedAttrs40...), nfsv4.FATTR4_SUPPATTR_EXCLCREAT)

var supportedAttrs42 = bmSet(append([]uint32(nil), supportedAttrs41...), nfsv4.FATTR4_CLONE_BLKSIZE)

func supportedAttrs(minor uint32) []uint32 {
	switch minor {
	case 0:
		return supportedAttrs40
	case 1:
		return supportedAttrs41
	}
	return supportedAttrs42
}

// settable attributes (SETATTR, createattrs).
var settableAttrs = bmOf(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_OWNER,
	nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET)

// Attributes settable with EXCLUSIVE4_1 creation (time_access_set and
// time_modify_set are excluded: the server may use them for the verifier;
// here it does not, but clients follow this attribute anyway).
var suppattrExclcreat = bmOf(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_OWNER,
	nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET)

// write-only attributes may not be requested by GETATTR/VERIFY.
var writeOnlyAttrs = bmOf(nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET)

func nfsType(t fs.FileType) nfsv4.NfsFtype4 {
	switch t {
	case fs.TypeRegular:
		return nfsv4.NF4REG
	case fs.TypeDirectory:
		return nfsv4.NF4DIR
	case fs.TypeSymlink:
		return nfsv4.NF4LNK
	case fs.TypeFIFO:
		return nfsv4.NF4FIFO
	case fs.TypeSocket:
		return nfsv4.NF4SOCK
	case fs.TypeChar:
		return nfsv4.NF4CHR
	case fs.TypeBlock:
		return nfsv4.NF4BLK
	}
	return nfsv4.NF4REG
}

func nfsTime(t time.Time) nfsv4.Nfstime4 {
	if t.IsZero() {
		return nfsv4.Nfstime4{}
	}
	return nfsv4.Nfstime4{Seconds: t.Unix(), Nseconds: uint32(t.Nanosecond())}
}

// attrContext is what attribute encoding needs besides the inode's Attr.
type attrContext struct {
	minor  uint32
	handle []byte     // for FATTR4_FILEHANDLE
	statfs *fs.StatFS // loaded lazily by the caller when needed
	// mountedOn overrides mounted_on_fileid (the root reports itself).
}

// needsStatFS reports whether mask asks for capacity attributes.
func needsStatFS(mask []uint32) bool {
	for _, b := range []uint32{nfsv4.FATTR4_FILES_AVAIL, nfsv4.FATTR4_FILES_FREE, nfsv4.FATTR4_FILES_TOTAL,
		nfsv4.FATTR4_SPACE_AVAIL, nfsv4.FATTR4_SPACE_FREE, nfsv4.FATTR4_SPACE_TOTAL} {
		if bmHas(mask, b) {
			return true
		}
	}
	return false
}

// encodeAttrs encodes the supported attributes of mask for a with the
// generated per-attribute writers (nfsv4.WriteFattr4*). Unsupported
// attributes are silently omitted (the returned mask says which were
// encoded), as GETATTR and READDIR require.
func (s *Server) encodeAttrs(mask []uint32, a *fs.Attr, ac *attrContext) nfsv4.Fattr4 {
	w := bytes.NewBuffer(make([]byte, 0, 256))
	out := make([]uint32, 0, len(mask))
	sup := supportedAttrs(ac.minor)
	forEachBit(mask, func(bit uint32) bool {
		if !bmHas(sup, bit) || bmHas(writeOnlyAttrs, bit) {
			return true
		}
		switch bit {
		case nfsv4.FATTR4_SUPPORTED_ATTRS:
			nfsv4.WriteFattr4SupportedAttrs(w, sup)
		case nfsv4.FATTR4_TYPE:
			nfsv4.WriteFattr4Type(w, nfsType(a.Type))
		case nfsv4.FATTR4_FH_EXPIRE_TYPE:
			nfsv4.WriteFattr4FhExpireType(w, nfsv4.FH4_PERSISTENT)
		case nfsv4.FATTR4_CHANGE:
			nfsv4.WriteFattr4Change(w, a.Change)
		case nfsv4.FATTR4_SIZE:
			nfsv4.WriteFattr4Size(w, a.Size)
		case nfsv4.FATTR4_LINK_SUPPORT:
			nfsv4.WriteFattr4LinkSupport(w, true)
		case nfsv4.FATTR4_SYMLINK_SUPPORT:
			nfsv4.WriteFattr4SymlinkSupport(w, true)
		case nfsv4.FATTR4_NAMED_ATTR:
			nfsv4.WriteFattr4NamedAttr(w, false)
		case nfsv4.FATTR4_FSID:
			nfsv4.WriteFattr4Fsid(w, &nfsv4.Fsid4{Major: s.fsid})
		case nfsv4.FATTR4_UNIQUE_HANDLES:
			nfsv4.WriteFattr4UniqueHandles(w, true)
		case nfsv4.FATTR4_LEASE_TIME:
			nfsv4.WriteFattr4LeaseTime(w, uint32(s.st.Lease()/time.Second))
		case nfsv4.FATTR4_RDATTR_ERROR:
			nfsv4.WriteFattr4RdattrError(w, nfsv4.NFS4_OK)
		case nfsv4.FATTR4_FILEHANDLE:
			nfsv4.WriteFattr4Filehandle(w, ac.handle)
		case nfsv4.FATTR4_ACLSUPPORT:
			nfsv4.WriteFattr4Aclsupport(w, 0)
		case nfsv4.FATTR4_CANSETTIME:
			nfsv4.WriteFattr4Cansettime(w, true)
		case nfsv4.FATTR4_CASE_INSENSITIVE:
			nfsv4.WriteFattr4CaseInsensitive(w, false)
		case nfsv4.FATTR4_CASE_PRESERVING:
			nfsv4.WriteFattr4CasePreserving(w, true)
		case nfsv4.FATTR4_CHOWN_RESTRICTED:
			nfsv4.WriteFattr4ChownRestricted(w, true)
		case nfsv4.FATTR4_FILEID:
			nfsv4.WriteFattr4Fileid(w, uint64(a.Ino))
		case nfsv4.FATTR4_FILES_AVAIL:
			nfsv4.WriteFattr4FilesAvail(w, ac.statfsOr().FilesFree)
		case nfsv4.FATTR4_FILES_FREE:
			nfsv4.WriteFattr4FilesFree(w, ac.statfsOr().FilesFree)
		case nfsv4.FATTR4_FILES_TOTAL:
			nfsv4.WriteFattr4FilesTotal(w, ac.statfsOr().Files)
		case nfsv4.FATTR4_HOMOGENEOUS:
			nfsv4.WriteFattr4Homogeneous(w, true)
		case nfsv4.FATTR4_MAXFILESIZE:
			nfsv4.WriteFattr4Maxfilesize(w, fs.MaxFileSize)
		case nfsv4.FATTR4_MAXLINK:
			nfsv4.WriteFattr4Maxlink(w, fs.MaxLinks)
		case nfsv4.FATTR4_MAXNAME:
			nfsv4.WriteFattr4Maxname(w, fs.MaxNameLen)
		case nfsv4.FATTR4_MAXREAD:
			nfsv4.WriteFattr4Maxread(w, uint64(s.cfg.MaxIO))
		case nfsv4.FATTR4_MAXWRITE:
			nfsv4.WriteFattr4Maxwrite(w, uint64(s.cfg.MaxIO))
		case nfsv4.FATTR4_MODE:
			nfsv4.WriteFattr4Mode(w, a.Mode&fs.ModePerm)
		case nfsv4.FATTR4_NO_TRUNC:
			nfsv4.WriteFattr4NoTrunc(w, true)
		case nfsv4.FATTR4_NUMLINKS:
			nfsv4.WriteFattr4Numlinks(w, a.Nlink)
		case nfsv4.FATTR4_OWNER:
			nfsv4.WriteFattr4Owner(w, strconv.FormatUint(uint64(a.Uid), 10))
		case nfsv4.FATTR4_OWNER_GROUP:
			nfsv4.WriteFattr4OwnerGroup(w, strconv.FormatUint(uint64(a.Gid), 10))
		case nfsv4.FATTR4_RAWDEV:
			nfsv4.WriteFattr4Rawdev(w, &nfsv4.Specdata4{Specdata1: uint32(a.Rdev >> 32), Specdata2: uint32(a.Rdev)})
		case nfsv4.FATTR4_SPACE_AVAIL:
			st := ac.statfsOr()
			nfsv4.WriteFattr4SpaceAvail(w, st.BlocksAvail*uint64(st.BlockSize))
		case nfsv4.FATTR4_SPACE_FREE:
			st := ac.statfsOr()
			nfsv4.WriteFattr4SpaceFree(w, st.BlocksFree*uint64(st.BlockSize))
		case nfsv4.FATTR4_SPACE_TOTAL:
			st := ac.statfsOr()
			nfsv4.WriteFattr4SpaceTotal(w, st.Blocks*uint64(st.BlockSize))
		case nfsv4.FATTR4_SPACE_USED:
			nfsv4.WriteFattr4SpaceUsed(w, a.Used)
		case nfsv4.FATTR4_TIME_ACCESS:
			t := nfsTime(a.Atime)
			nfsv4.WriteFattr4TimeAccess(w, &t)
		case nfsv4.FATTR4_TIME_CREATE:
			t := nfsTime(a.Btime)
			nfsv4.WriteFattr4TimeCreate(w, &t)
		case nfsv4.FATTR4_TIME_DELTA:
			nfsv4.WriteFattr4TimeDelta(w, &nfsv4.Nfstime4{Nseconds: 1})
		case nfsv4.FATTR4_TIME_METADATA:
			t := nfsTime(a.Ctime)
			nfsv4.WriteFattr4TimeMetadata(w, &t)
		case nfsv4.FATTR4_TIME_MODIFY:
			t := nfsTime(a.Mtime)
			nfsv4.WriteFattr4TimeModify(w, &t)
		case nfsv4.FATTR4_MOUNTED_ON_FILEID:
			nfsv4.WriteFattr4MountedOnFileid(w, uint64(a.Ino))
		case nfsv4.FATTR4_SUPPATTR_EXCLCREAT:
			nfsv4.WriteFattr4SuppattrExclcreat(w, suppattrExclcreat)
		case nfsv4.FATTR4_CLONE_BLKSIZE:
			nfsv4.WriteFattr4CloneBlksize(w, 1)
		default:
			return true
		}
		out = bmSet(out, bit)
		return true
	})
	return nfsv4.Fattr4{Attrmask: bmTrim(out), AttrVals: w.Bytes()}
}

// attrMaskBits maps NFS attributes to the engine attributes they are
// encoded from (the others need only Ino, Gen and Type, or nothing).
var attrMaskBits = [...]fs.AttrMask{
	nfsv4.FATTR4_CHANGE: fs.AttrChange, nfsv4.FATTR4_SIZE: fs.AttrSize,
	nfsv4.FATTR4_MODE: fs.AttrMode, nfsv4.FATTR4_NUMLINKS: fs.AttrNlink,
	nfsv4.FATTR4_OWNER: fs.AttrUid, nfsv4.FATTR4_OWNER_GROUP: fs.AttrGid,
	nfsv4.FATTR4_RAWDEV: fs.AttrRdev, nfsv4.FATTR4_SPACE_USED: fs.AttrUsed,
	nfsv4.FATTR4_TIME_ACCESS: fs.AttrAtime, nfsv4.FATTR4_TIME_MODIFY: fs.AttrMtime,
	nfsv4.FATTR4_TIME_METADATA: fs.AttrCtime, nfsv4.FATTR4_TIME_CREATE: fs.AttrBtime,
}

// attrMask returns the engine attributes needed to encode the NFS
// attributes of bm.
func attrMask(bm []uint32) fs.AttrMask {
	var m fs.AttrMask
	forEachBit(bm, func(bit uint32) bool {
		if int(bit) < len(attrMaskBits) {
			m |= attrMaskBits[bit]
		}
		return true
	})
	return m
}

func (ac *attrContext) statfsOr() fs.StatFS {
	if ac.statfs == nil {
		return fs.StatFS{BlockSize: 4096, NameLen: fs.MaxNameLen}
	}
	return *ac.statfs
}

// decoded settable attributes ----------------------------------------------

// newAttrs are attributes from SETATTR, CREATE, or OPEN createattrs.
type newAttrs struct {
	set fs.SetAttr
	// mask is the set of attributes that were given (for attrsset).
	mask []uint32
}

// decodeSetAttrs parses f. It returns NFS4ERR_ATTRNOTSUPP for supported
// but non-settable or unknown attributes... per RFC 8881 §18.30: read-only
// attributes give NFS4ERR_INVAL, unsupported ones NFS4ERR_ATTRNOTSUPP, and
// bad values NFS4ERR_BADXDR / NFS4ERR_BADOWNER.
func decodeSetAttrs(f *nfsv4.Fattr4, minor uint32) (newAttrs, nfsv4.Nfsstat4) {
	var na newAttrs
	r := bytes.NewReader(f.AttrVals)
	st := nfsv4.NFS4_OK
	sup := supportedAttrs(minor)
	forEachBit(f.Attrmask, func(bit uint32) bool {
		if !bmHas(settableAttrs, bit) {
			if bmHas(sup, bit) {
				st = nfsv4.NFS4ERR_INVAL
			} else {
				st = nfsv4.NFS4ERR_ATTRNOTSUPP
			}
			return false
		}
		var err error
		switch bit {
		case nfsv4.FATTR4_SIZE:
			var v uint64
			v, _, err = nfsv4.ReadFattr4Size(r)
			na.set.Size = &v
		case nfsv4.FATTR4_MODE:
			var v uint32
			v, _, err = nfsv4.ReadFattr4Mode(r)
			if v&^fs.ModePerm != 0 {
				st = nfsv4.NFS4ERR_INVAL
				return false
			}
			na.set.Mode = &v
		case nfsv4.FATTR4_OWNER:
			var v string
			v, _, err = nfsv4.ReadFattr4Owner(r)
			if err == nil {
				id, ok := parseID(v, false)
				if !ok {
					st = nfsv4.NFS4ERR_BADOWNER
					return false
				}
				na.set.Uid = &id
			}
		case nfsv4.FATTR4_OWNER_GROUP:
			var v string
			v, _, err = nfsv4.ReadFattr4OwnerGroup(r)
			if err == nil {
				id, ok := parseID(v, true)
				if !ok {
					st = nfsv4.NFS4ERR_BADOWNER
					return false
				}
				na.set.Gid = &id
			}
		case nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET:
			var v nfsv4.Settime4
			v, _, err = nfsv4.ReadFattr4TimeAccessSet(r)
			if err == nil {
				t := &fs.SetTime{Now: true}
				if c, ok := v.(*nfsv4.Settime4_SET_TO_CLIENT_TIME4); ok {
					if c.Time.Nseconds >= 1e9 {
						st = nfsv4.NFS4ERR_INVAL
						return false
					}
					t = &fs.SetTime{Time: time.Unix(c.Time.Seconds, int64(c.Time.Nseconds))}
				}
				if bit == nfsv4.FATTR4_TIME_ACCESS_SET {
					na.set.Atime = t
				} else {
					na.set.Mtime = t
				}
			}
		}
		if err != nil {
			st = nfsv4.NFS4ERR_BADXDR
			return false
		}
		na.mask = bmSet(na.mask, bit)
		return true
	})
	if st == nfsv4.NFS4_OK && r.Len() != 0 {
		st = nfsv4.NFS4ERR_BADXDR
	}
	return na, st
}

// parseID accepts a numeric id, "name" or "name@domain" known to the
// local user database, and "nobody".
func parseID(s string, group bool) (uint32, bool) {
	if v, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(v), true
	}
	name := s
	if i := strings.IndexByte(s, '@'); i >= 0 {
		name = s[:i]
	}
	if name == "" {
		return 0, false
	}
	if group {
		if g, err := user.LookupGroup(name); err == nil {
			if v, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
				return uint32(v), true
			}
		}
	} else if u, err := user.Lookup(name); err == nil {
		if v, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
			return uint32(v), true
		}
	}
	if name == "nobody" || name == "nogroup" {
		return math.MaxUint16 - 1, true
	}
	return 0, false
}
