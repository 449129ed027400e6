package vnfs

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// bitmap returns the NFSv4 attributes for m.
func bitmap(m AttrMask) client.Bitmap {
	var b client.Bitmap
	add := func(bit AttrMask, attrs ...uint32) {
		if m&bit != 0 {
			for _, a := range attrs {
				b = b.With(a)
			}
		}
	}
	add(AttrType, nfsv4.FATTR4_TYPE)
	add(AttrMode, nfsv4.FATTR4_MODE)
	add(AttrNlink, nfsv4.FATTR4_NUMLINKS)
	add(AttrUid, nfsv4.FATTR4_OWNER)
	add(AttrGid, nfsv4.FATTR4_OWNER_GROUP)
	add(AttrSize, nfsv4.FATTR4_SIZE)
	add(AttrIno, nfsv4.FATTR4_FILEID)
	add(AttrSpace, nfsv4.FATTR4_SPACE_USED)
	add(AttrAtime, nfsv4.FATTR4_TIME_ACCESS)
	add(AttrMtime, nfsv4.FATTR4_TIME_MODIFY)
	add(AttrCtime, nfsv4.FATTR4_TIME_METADATA)
	add(AttrRdev, nfsv4.FATTR4_RAWDEV)
	if b == nil {
		b = client.Bitmap{}
	}
	return b
}

func fileType(t nfsv4.NfsFtype4) FileType {
	switch t {
	case nfsv4.NF4REG:
		return TypeRegular
	case nfsv4.NF4DIR:
		return TypeDir
	case nfsv4.NF4LNK:
		return TypeSymlink
	case nfsv4.NF4BLK:
		return TypeBlock
	case nfsv4.NF4CHR:
		return TypeChar
	case nfsv4.NF4FIFO:
		return TypeFIFO
	case nfsv4.NF4SOCK:
		return TypeSocket
	}
	return TypeUnknown
}

// fromNFS converts decoded attributes.
func fromNFS(a *client.Attrs) Attr {
	var r Attr
	r.Type = fileType(a.Type)
	r.Mode = a.Mode & 07777
	r.Nlink = a.Nlink
	r.Uid, _ = a.Uid()
	r.Gid, _ = a.Gid()
	r.Size = a.Size
	r.Ino = a.FileID
	r.Space = a.SpaceUsed
	r.Rdev = [2]uint32{a.Rdev.Specdata1, a.Rdev.Specdata2}
	r.Atime, r.Mtime, r.Ctime = a.Atime, a.Mtime, a.Ctime
	return r
}

// setAttrs converts the settable attributes of a selected by m.
func setAttrs(m AttrMask, a *Attr) client.SetAttrs {
	return client.SetAttrs{
		SetSize: m&AttrSize != 0, Size: a.Size,
		SetMode: m&AttrMode != 0, Mode: a.Mode,
		SetUid: m&AttrUid != 0, Uid: a.Uid,
		SetGid: m&AttrGid != 0, Gid: a.Gid,
		SetAtime: m&AttrAtime != 0, Atime: a.Atime,
		SetMtime: m&AttrMtime != 0, Mtime: a.Mtime,
	}
}

func modeAttrs(mode, def uint32) nfsv4.Fattr4 {
	if mode == 0 {
		mode = def
	}
	s := client.SetAttrs{SetMode: true, Mode: mode}
	return s.Encode()
}

func getattrRes(res nfsv4.NfsResop4) (client.Attrs, error) {
	ok, isOK := res.(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK)
	if !isOK {
		return client.Attrs{}, errBadReply
	}
	return client.DecodeAttrs(ok.Resok4.ObjAttributes)
}
