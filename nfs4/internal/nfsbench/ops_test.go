package nfsbench

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

func bitmap(bits ...uint32) []uint32 {
	var bm []uint32
	for _, b := range bits {
		for uint32(len(bm)) <= b/32 {
			bm = append(bm, 0)
		}
		bm[b/32] |= 1 << (b % 32)
	}
	return bm
}

// linuxAttrs is the attribute mask of a Linux client's GETATTR.
var linuxAttrs = bitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_FSID,
	nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MODE, nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER,
	nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_RAWDEV, nfsv4.FATTR4_SPACE_USED, nfsv4.FATTR4_TIME_ACCESS,
	nfsv4.FATTR4_TIME_METADATA, nfsv4.FATTR4_TIME_MODIFY, nfsv4.FATTR4_MOUNTED_ON_FILEID)

// current is the 4.1 current stateid.
var current = nfsv4.Stateid4{Seqid: 1}

func putfh(h []byte) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: h}}
}

func lookup(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: name}}
}

func getfh() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_GETFH{} }

func getattr(mask []uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: mask}}
}

// open opens name in the current directory; create makes it (UNCHECKED4,
// mode 0644) if needed.
func open(clientID uint64, owner, name string, access uint32, create bool) nfsv4.NfsArgop4 {
	var how nfsv4.Openflag4 = &nfsv4.Openflag4_default{}
	if create {
		how = &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{Createattrs: nfsv4.Fattr4{
			Attrmask: bitmap(nfsv4.FATTR4_MODE), AttrVals: []byte{0, 0, 1, 0xa4}}}}
	}
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		ShareAccess: access, ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE,
		Owner:   nfsv4.StateOwner4{Clientid: clientID, Owner: []byte(owner)},
		Openhow: how,
		Claim:   &nfsv4.OpenClaim4_CLAIM_NULL{File: name},
	}}
}

func write(sid nfsv4.Stateid4, off uint64, data []byte, stable nfsv4.StableHow4) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: sid, Offset: off, Stable: stable, Data: data}}
}

func read(sid nfsv4.Stateid4, off uint64, n uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Stateid: sid, Offset: off, Count: n}}
}

func closeOp(sid nfsv4.Stateid4) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{OpenStateid: sid}}
}

func commit() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_COMMIT{} }

func fhOf(r nfsv4.NfsResop4) []byte {
	return r.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
}

func sidOf(r nfsv4.NfsResop4) nfsv4.Stateid4 {
	return r.(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid
}
