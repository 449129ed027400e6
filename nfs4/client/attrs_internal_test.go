package client

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/runtime"
)

// TestDecodeAttrs encodes random values of every attribute DecodeAttrs
// knows, in random subsets, with go-xdr's runtime primitives (not the
// per-attribute readers DecodeAttrs uses), and checks the decoded values,
// and that every truncation, a bad boolean, an over-long file handle and
// invalid UTF-8 are errors.
func TestDecodeAttrs(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	type attr struct {
		n   uint32
		enc func(*bytes.Buffer, *Attrs)
	}
	u32 := func(set func(*Attrs, uint32)) func(*bytes.Buffer, *Attrs) {
		return func(b *bytes.Buffer, a *Attrs) {
			v := rng.Uint32()
			runtime.WriteUnsignedInt(b, v)
			if set != nil {
				set(a, v)
			}
		}
	}
	u64 := func(set func(*Attrs, uint64)) func(*bytes.Buffer, *Attrs) {
		return func(b *bytes.Buffer, a *Attrs) {
			v := rng.Uint64()
			runtime.WriteUnsignedHyper(b, v)
			if set != nil {
				set(a, v)
			}
		}
	}
	boolean := func(b *bytes.Buffer, _ *Attrs) { runtime.WriteBool(b, rng.IntN(2) == 1) }
	str := func(set func(*Attrs, string)) func(*bytes.Buffer, *Attrs) {
		return func(b *bytes.Buffer, a *Attrs) {
			v := []string{"", "0", "1000", "root@example.com", "ünïcødé", "12345"}[rng.IntN(6)]
			runtime.WriteUTF8String(b, 1<<20, v)
			set(a, v)
		}
	}
	tm := func(set func(*Attrs, time.Time)) func(*bytes.Buffer, *Attrs) {
		return func(b *bytes.Buffer, a *Attrs) {
			sec, nsec := rng.Int64N(1<<40)-1<<39, rng.Uint32N(1e9)
			runtime.WriteHyper(b, sec)
			runtime.WriteUnsignedInt(b, nsec)
			if set != nil {
				set(a, time.Unix(sec, int64(nsec)))
			}
		}
	}
	attrs := []attr{
		{nfsv4.FATTR4_SUPPORTED_ATTRS, func(b *bytes.Buffer, a *Attrs) {
			n := rng.IntN(4)
			runtime.WriteUnsignedInt(b, uint32(n))
			a.Supported = nil
			for range n {
				v := rng.Uint32()
				runtime.WriteUnsignedInt(b, v)
				a.Supported = append(a.Supported, v)
			}
		}},
		{nfsv4.FATTR4_TYPE, func(b *bytes.Buffer, a *Attrs) {
			v := rng.Uint32N(10)
			runtime.WriteUnsignedInt(b, v)
			a.Type = nfsv4.NfsFtype4(v)
		}},
		{nfsv4.FATTR4_FH_EXPIRE_TYPE, u32(nil)}, {nfsv4.FATTR4_CHANGE, u64(func(a *Attrs, v uint64) { a.Change = v })},
		{nfsv4.FATTR4_SIZE, u64(func(a *Attrs, v uint64) { a.Size = v })},
		{nfsv4.FATTR4_LINK_SUPPORT, boolean}, {nfsv4.FATTR4_SYMLINK_SUPPORT, boolean},
		{nfsv4.FATTR4_NAMED_ATTR, boolean}, {nfsv4.FATTR4_FSID, func(b *bytes.Buffer, a *Attrs) { u64(nil)(b, a); u64(nil)(b, a) }},
		{nfsv4.FATTR4_UNIQUE_HANDLES, boolean}, {nfsv4.FATTR4_LEASE_TIME, u32(func(a *Attrs, v uint32) { a.LeaseTime = v })},
		{nfsv4.FATTR4_RDATTR_ERROR, u32(func(a *Attrs, v uint32) { a.Error = nfsv4.Nfsstat4(v) })},
		{nfsv4.FATTR4_ACLSUPPORT, u32(nil)},
		{nfsv4.FATTR4_CANSETTIME, boolean}, {nfsv4.FATTR4_CASE_INSENSITIVE, boolean},
		{nfsv4.FATTR4_CASE_PRESERVING, boolean}, {nfsv4.FATTR4_CHOWN_RESTRICTED, boolean},
		{nfsv4.FATTR4_FILEHANDLE, func(b *bytes.Buffer, a *Attrs) {
			v := make([]byte, rng.IntN(nfsv4.NFS4_FHSIZE+1))
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			runtime.WriteVariableLengthOpaque(b, nfsv4.NFS4_FHSIZE, v)
			a.Handle = v
		}},
		{nfsv4.FATTR4_FILEID, u64(func(a *Attrs, v uint64) { a.FileID = v })},
		{nfsv4.FATTR4_FILES_AVAIL, u64(func(a *Attrs, v uint64) { a.FilesAvail = v })}, {nfsv4.FATTR4_FILES_FREE, u64(func(a *Attrs, v uint64) { a.FilesFree = v })}, {nfsv4.FATTR4_FILES_TOTAL, u64(func(a *Attrs, v uint64) { a.FilesTotal = v })},
		{nfsv4.FATTR4_HOMOGENEOUS, boolean}, {nfsv4.FATTR4_MAXFILESIZE, u64(nil)}, {nfsv4.FATTR4_MAXLINK, u32(nil)},
		{nfsv4.FATTR4_MAXNAME, u32(func(a *Attrs, v uint32) { a.MaxName = v })}, {nfsv4.FATTR4_MAXREAD, u64(func(a *Attrs, v uint64) { a.MaxRead = v })},
		{nfsv4.FATTR4_MAXWRITE, u64(func(a *Attrs, v uint64) { a.MaxWrite = v })},
		{nfsv4.FATTR4_MODE, u32(func(a *Attrs, v uint32) { a.Mode = v })}, {nfsv4.FATTR4_NO_TRUNC, boolean},
		{nfsv4.FATTR4_NUMLINKS, u32(func(a *Attrs, v uint32) { a.Nlink = v })},
		{nfsv4.FATTR4_OWNER, str(func(a *Attrs, v string) { a.Owner = v })},
		{nfsv4.FATTR4_OWNER_GROUP, str(func(a *Attrs, v string) { a.Group = v })},
		{nfsv4.FATTR4_RAWDEV, func(b *bytes.Buffer, a *Attrs) {
			u32(func(a *Attrs, v uint32) { a.Rdev.Specdata1 = v })(b, a)
			u32(func(a *Attrs, v uint32) { a.Rdev.Specdata2 = v })(b, a)
		}},
		{nfsv4.FATTR4_SPACE_AVAIL, u64(func(a *Attrs, v uint64) { a.SpaceAvail = v })}, {nfsv4.FATTR4_SPACE_FREE, u64(func(a *Attrs, v uint64) { a.SpaceFree = v })}, {nfsv4.FATTR4_SPACE_TOTAL, u64(func(a *Attrs, v uint64) { a.SpaceTotal = v })},
		{nfsv4.FATTR4_SPACE_USED, u64(func(a *Attrs, v uint64) { a.SpaceUsed = v })},
		{nfsv4.FATTR4_TIME_ACCESS, tm(func(a *Attrs, v time.Time) { a.Atime = v })}, {nfsv4.FATTR4_TIME_CREATE, tm(nil)},
		{nfsv4.FATTR4_TIME_DELTA, tm(nil)}, {nfsv4.FATTR4_TIME_METADATA, tm(func(a *Attrs, v time.Time) { a.Ctime = v })},
		{nfsv4.FATTR4_TIME_MODIFY, tm(func(a *Attrs, v time.Time) { a.Mtime = v })},
		{nfsv4.FATTR4_MOUNTED_ON_FILEID, u64(nil)}, {nfsv4.FATTR4_CLONE_BLKSIZE, u32(func(a *Attrs, v uint32) { a.CloneBlk = v })},
	}
	for iter := range 300 {
		var mask Bitmap
		var vals bytes.Buffer
		var want Attrs
		var boolAt []int          // offsets of booleans
		for _, a := range attrs { // ascending attribute numbers
			if iter > 0 && rng.IntN(2) == 0 {
				continue
			}
			mask = mask.With(a.n)
			if reflect.ValueOf(a.enc).Pointer() == reflect.ValueOf(boolean).Pointer() {
				boolAt = append(boolAt, vals.Len())
			}
			a.enc(&vals, &want)
		}
		want.Mask = mask
		f := nfsv4.Fattr4{Attrmask: mask, AttrVals: vals.Bytes()}
		got, err := DecodeAttrs(f)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if len(got.Handle) == 0 && len(want.Handle) == 0 {
			got.Handle, want.Handle = nil, nil
		}
		if len(got.Supported) == 0 && len(want.Supported) == 0 {
			got.Supported, want.Supported = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("iter %d: decoded\n%+v\nwant\n%+v", iter, got, want)
		}
		for cut := 0; cut < vals.Len(); cut += 1 + rng.IntN(9) {
			f := nfsv4.Fattr4{Attrmask: mask, AttrVals: vals.Bytes()[:cut]}
			if _, err := DecodeAttrs(f); err == nil {
				t.Fatalf("iter %d: cut at %d of %d decoded", iter, cut, vals.Len())
			}
		}
		if len(boolAt) > 0 {
			b := bytes.Clone(vals.Bytes())
			binary.BigEndian.PutUint32(b[boolAt[rng.IntN(len(boolAt))]:], 7)
			f := nfsv4.Fattr4{Attrmask: mask, AttrVals: b}
			if _, err := DecodeAttrs(f); err == nil {
				t.Fatalf("iter %d: bad boolean decoded", iter)
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
