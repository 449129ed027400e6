package client

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/runtime"
)

// TestDecodeAttrsMatchesGenerated checks DecodeAttrs (in-place reads)
// against the decoder it replaced (the generated readers, kept below as
// decodeAttrsGenerated) on random values of every attribute it knows,
// and that every truncation and a bad boolean are errors in both.
func TestDecodeAttrsMatchesGenerated(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	type attr struct {
		n   uint32
		enc func(*bytes.Buffer)
	}
	u32 := func(b *bytes.Buffer) { runtime.WriteUnsignedInt(b, rng.Uint32()) }
	u64 := func(b *bytes.Buffer) { runtime.WriteUnsignedHyper(b, rng.Uint64()) }
	boolean := func(b *bytes.Buffer) { runtime.WriteBool(b, rng.IntN(2) == 1) }
	opaque := func(max int) func(*bytes.Buffer) {
		return func(b *bytes.Buffer) {
			v := make([]byte, rng.IntN(max+1))
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			runtime.WriteVariableLengthOpaque(b, uint32(max), v)
		}
	}
	str := func(b *bytes.Buffer) {
		runtime.WriteUTF8String(b, 1<<20, []string{"", "0", "1000", "root@example.com", "ünïcødé", "12345"}[rng.IntN(6)])
	}
	tm := func(b *bytes.Buffer) {
		runtime.WriteHyper(b, rng.Int64N(1<<40)-1<<39)
		runtime.WriteUnsignedInt(b, rng.Uint32N(1e9))
	}
	attrs := []attr{
		{nfsv4.FATTR4_SUPPORTED_ATTRS, func(b *bytes.Buffer) {
			n := rng.IntN(4)
			runtime.WriteUnsignedInt(b, uint32(n))
			for range n {
				u32(b)
			}
		}},
		{nfsv4.FATTR4_TYPE, func(b *bytes.Buffer) { runtime.WriteUnsignedInt(b, rng.Uint32N(10)) }},
		{nfsv4.FATTR4_FH_EXPIRE_TYPE, u32}, {nfsv4.FATTR4_CHANGE, u64}, {nfsv4.FATTR4_SIZE, u64},
		{nfsv4.FATTR4_LINK_SUPPORT, boolean}, {nfsv4.FATTR4_SYMLINK_SUPPORT, boolean},
		{nfsv4.FATTR4_NAMED_ATTR, boolean}, {nfsv4.FATTR4_FSID, func(b *bytes.Buffer) { u64(b); u64(b) }},
		{nfsv4.FATTR4_UNIQUE_HANDLES, boolean}, {nfsv4.FATTR4_LEASE_TIME, u32},
		{nfsv4.FATTR4_RDATTR_ERROR, u32}, {nfsv4.FATTR4_ACLSUPPORT, u32},
		{nfsv4.FATTR4_CANSETTIME, boolean}, {nfsv4.FATTR4_CASE_INSENSITIVE, boolean},
		{nfsv4.FATTR4_CASE_PRESERVING, boolean}, {nfsv4.FATTR4_CHOWN_RESTRICTED, boolean},
		{nfsv4.FATTR4_FILEHANDLE, opaque(nfsv4.NFS4_FHSIZE)}, {nfsv4.FATTR4_FILEID, u64},
		{nfsv4.FATTR4_FILES_AVAIL, u64}, {nfsv4.FATTR4_FILES_FREE, u64}, {nfsv4.FATTR4_FILES_TOTAL, u64},
		{nfsv4.FATTR4_HOMOGENEOUS, boolean}, {nfsv4.FATTR4_MAXFILESIZE, u64}, {nfsv4.FATTR4_MAXLINK, u32},
		{nfsv4.FATTR4_MAXNAME, u32}, {nfsv4.FATTR4_MAXREAD, u64}, {nfsv4.FATTR4_MAXWRITE, u64},
		{nfsv4.FATTR4_MODE, u32}, {nfsv4.FATTR4_NO_TRUNC, boolean}, {nfsv4.FATTR4_NUMLINKS, u32},
		{nfsv4.FATTR4_OWNER, str}, {nfsv4.FATTR4_OWNER_GROUP, str},
		{nfsv4.FATTR4_RAWDEV, func(b *bytes.Buffer) { u32(b); u32(b) }},
		{nfsv4.FATTR4_SPACE_AVAIL, u64}, {nfsv4.FATTR4_SPACE_FREE, u64}, {nfsv4.FATTR4_SPACE_TOTAL, u64},
		{nfsv4.FATTR4_SPACE_USED, u64}, {nfsv4.FATTR4_TIME_ACCESS, tm}, {nfsv4.FATTR4_TIME_CREATE, tm},
		{nfsv4.FATTR4_TIME_DELTA, tm}, {nfsv4.FATTR4_TIME_METADATA, tm}, {nfsv4.FATTR4_TIME_MODIFY, tm},
		{nfsv4.FATTR4_MOUNTED_ON_FILEID, u64}, {nfsv4.FATTR4_CLONE_BLKSIZE, u32},
	}
	for iter := range 300 {
		var mask Bitmap
		var vals bytes.Buffer
		var boolAt []int          // offsets of booleans
		for _, a := range attrs { // ascending attribute numbers
			if iter > 0 && rng.IntN(2) == 0 {
				continue
			}
			mask = mask.With(a.n)
			if reflect.ValueOf(a.enc).Pointer() == reflect.ValueOf(boolean).Pointer() {
				boolAt = append(boolAt, vals.Len())
			}
			a.enc(&vals)
		}
		f := nfsv4.Fattr4{Attrmask: mask, AttrVals: vals.Bytes()}
		got, err := DecodeAttrs(f)
		want, werr := decodeAttrsGenerated(f)
		if err != nil || werr != nil {
			t.Fatalf("iter %d: errors %v, generated %v", iter, err, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("iter %d: decoded\n%+v\ngenerated\n%+v", iter, got, want)
		}
		for cut := 0; cut < vals.Len(); cut += 1 + rng.IntN(9) {
			f := nfsv4.Fattr4{Attrmask: mask, AttrVals: vals.Bytes()[:cut]}
			_, err := DecodeAttrs(f)
			_, werr := decodeAttrsGenerated(f)
			if err == nil || werr == nil {
				t.Fatalf("iter %d: cut at %d of %d: error %v, generated %v", iter, cut, vals.Len(), err, werr)
			}
		}
		if len(boolAt) > 0 {
			b := bytes.Clone(vals.Bytes())
			binary.BigEndian.PutUint32(b[boolAt[rng.IntN(len(boolAt))]:], 7)
			f := nfsv4.Fattr4{Attrmask: mask, AttrVals: b}
			_, err := DecodeAttrs(f)
			_, werr := decodeAttrsGenerated(f)
			if err == nil || werr == nil {
				t.Fatalf("iter %d: bad boolean: error %v, generated %v", iter, err, werr)
			}
		}
	}
	// An over-long file handle and invalid UTF-8 are errors.
	var b bytes.Buffer
	runtime.WriteVariableLengthOpaque(&b, 1000, make([]byte, nfsv4.NFS4_FHSIZE+1))
	if _, err := DecodeAttrs(nfsv4.Fattr4{Attrmask: MakeBitmap(nfsv4.FATTR4_FILEHANDLE), AttrVals: b.Bytes()}); err == nil {
		t.Fatal("over-long handle decoded")
	}
	b.Reset()
	runtime.WriteVariableLengthOpaque(&b, 1000, []byte{0xff, 0xfe})
	if _, err := DecodeAttrs(nfsv4.Fattr4{Attrmask: MakeBitmap(nfsv4.FATTR4_OWNER), AttrVals: b.Bytes()}); err == nil {
		t.Fatal("invalid UTF-8 owner decoded")
	}
}

// decodeAttrsGenerated is DecodeAttrs as it was, on the generated
// readers: the reference for TestDecodeAttrsMatchesGenerated.
func decodeAttrsGenerated(f nfsv4.Fattr4) (Attrs, error) {
	a := Attrs{Mask: Bitmap(f.Attrmask)}
	r := bytes.NewReader(f.AttrVals)
	var err error
	for w, word := range f.Attrmask {
		for bit := uint32(0); bit < 32; bit++ {
			if word&(1<<bit) == 0 {
				continue
			}
			n := uint32(w)*32 + bit
			switch n {
			case nfsv4.FATTR4_SUPPORTED_ATTRS:
				var m []uint32
				m, _, err = nfsv4.ReadFattr4SupportedAttrs(r)
				a.Supported = m
			case nfsv4.FATTR4_TYPE:
				a.Type, _, err = nfsv4.ReadFattr4Type(r)
			case nfsv4.FATTR4_FH_EXPIRE_TYPE, nfsv4.FATTR4_ACLSUPPORT, nfsv4.FATTR4_MAXLINK,
				nfsv4.FATTR4_MAXNAME:
				_, _, err = runtime.ReadUnsignedInt(r)
			case nfsv4.FATTR4_CHANGE:
				a.Change, _, err = nfsv4.ReadFattr4Change(r)
			case nfsv4.FATTR4_SIZE:
				a.Size, _, err = nfsv4.ReadFattr4Size(r)
			case nfsv4.FATTR4_LINK_SUPPORT, nfsv4.FATTR4_SYMLINK_SUPPORT, nfsv4.FATTR4_NAMED_ATTR,
				nfsv4.FATTR4_UNIQUE_HANDLES, nfsv4.FATTR4_CANSETTIME, nfsv4.FATTR4_CASE_INSENSITIVE,
				nfsv4.FATTR4_CASE_PRESERVING, nfsv4.FATTR4_CHOWN_RESTRICTED, nfsv4.FATTR4_HOMOGENEOUS,
				nfsv4.FATTR4_NO_TRUNC:
				_, _, err = runtime.ReadBool(r)
			case nfsv4.FATTR4_FSID:
				var fsid nfsv4.Fsid4
				_, err = nfsv4.ReadFattr4Fsid(r, &fsid)
			case nfsv4.FATTR4_LEASE_TIME:
				a.LeaseTime, _, err = nfsv4.ReadFattr4LeaseTime(r)
			case nfsv4.FATTR4_RDATTR_ERROR:
				a.Error, _, err = nfsv4.ReadFattr4RdattrError(r)
			case nfsv4.FATTR4_FILEHANDLE:
				a.Handle, _, err = nfsv4.ReadFattr4Filehandle(r)
			case nfsv4.FATTR4_FILEID:
				a.FileID, _, err = nfsv4.ReadFattr4Fileid(r)
			case nfsv4.FATTR4_FILES_AVAIL, nfsv4.FATTR4_FILES_FREE, nfsv4.FATTR4_FILES_TOTAL,
				nfsv4.FATTR4_MAXFILESIZE, nfsv4.FATTR4_SPACE_AVAIL, nfsv4.FATTR4_SPACE_FREE,
				nfsv4.FATTR4_SPACE_TOTAL, nfsv4.FATTR4_MOUNTED_ON_FILEID:
				_, _, err = runtime.ReadUnsignedHyper(r)
			case nfsv4.FATTR4_MAXREAD:
				a.MaxRead, _, err = nfsv4.ReadFattr4Maxread(r)
			case nfsv4.FATTR4_MAXWRITE:
				a.MaxWrite, _, err = nfsv4.ReadFattr4Maxwrite(r)
			case nfsv4.FATTR4_MODE:
				a.Mode, _, err = nfsv4.ReadFattr4Mode(r)
			case nfsv4.FATTR4_NUMLINKS:
				a.Nlink, _, err = nfsv4.ReadFattr4Numlinks(r)
			case nfsv4.FATTR4_OWNER:
				a.Owner, _, err = nfsv4.ReadFattr4Owner(r)
			case nfsv4.FATTR4_OWNER_GROUP:
				a.Group, _, err = nfsv4.ReadFattr4OwnerGroup(r)
			case nfsv4.FATTR4_RAWDEV:
				_, err = a.Rdev.ReadFrom(r)
			case nfsv4.FATTR4_SPACE_USED:
				a.SpaceUsed, _, err = runtime.ReadUnsignedHyper(r)
			case nfsv4.FATTR4_TIME_ACCESS:
				a.Atime, err = readTime(r)
			case nfsv4.FATTR4_TIME_METADATA:
				a.Ctime, err = readTime(r)
			case nfsv4.FATTR4_TIME_MODIFY:
				a.Mtime, err = readTime(r)
			case nfsv4.FATTR4_TIME_CREATE, nfsv4.FATTR4_TIME_DELTA:
				_, err = readTime(r)
			case nfsv4.FATTR4_CLONE_BLKSIZE:
				a.CloneBlk, _, err = runtime.ReadUnsignedInt(r)
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

func readTime(r *bytes.Reader) (time.Time, error) {
	var t nfsv4.Nfstime4
	if _, err := t.ReadFrom(r); err != nil {
		return time.Time{}, err
	}
	return time.Unix(t.Seconds, int64(t.Nseconds)), nil
}
