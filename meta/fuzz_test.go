package meta_test

// Decoding untrusted bytes: any input gives a record or an error wrapping
// ErrCorrupt, never a panic; whatever decodes re-encodes to something that
// decodes to the same record.
//
//	go test ./meta -fuzz FuzzUnmarshalRegion -fuzztime 1m
//	go test ./meta -fuzz FuzzUnmarshalSpan -fuzztime 1m

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

func seedInodes() []*meta.Inode {
	return []*meta.Inode{
		{Type: 1, Mode: 0o644, Nlink: 1, Size: 12345, Atime: 1, Mtime: 2, Ctime: 3, Btime: 4, Change: 5, Gen: 6},
		{Type: 2, Mode: 0o2755, Nlink: 3, Parent: 1, NextCookie: 17, Uid: 1000, Gid: 1000},
		{Type: 3, Mode: 0o777, Nlink: 1, Size: 5, Target: "../a/b"},
		{Type: 6, Mode: 0o600, Nlink: 1, Rdev: 1<<32 | 7},
		{Type: 1, Mode: 0o4755, Nlink: 65535, Size: 1 << 60, Atime: -1, Mtime: 1 << 62},
		{Type: 1, Mode: 0o644, Nlink: 1, Size: 1 << 30, Used: 1<<30 + 4096},
		{Type: 1, Mode: 0o644, Nlink: 1, Size: 1 << 40, Used: 1 << 20, Spans: 9, OpenStart: 1 << 39},
	}
}

// inodeV1Encoding turns the encoding of an inode with Used, Spans and
// OpenStart 0 into the encoding before layout 3 (an array of 16, without
// Used, Spans and OpenStart).
func inodeV1Encoding(t testing.TB, b []byte) []byte {
	if len(b) < 5 || b[1] != 0x80|19 || !bytes.Equal(b[len(b)-3:], []byte{0, 0, 0}) {
		t.Fatalf("unexpected inode encoding %x", b)
	}
	return append([]byte{b[0], 0x80 | 16}, b[2:len(b)-3]...)
}

// TestInodeV1Decodes: inodes encoded before layout 3 (without Used)
// decode, with Used 0.
func TestInodeV1Decodes(t *testing.T) {
	for _, n := range seedInodes() {
		n.Used, n.Spans, n.OpenStart = 0, 0, 0
		b, err := meta.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		var got meta.Inode
		if err := meta.Unmarshal(inodeV1Encoding(t, b), &got); err != nil || !reflect.DeepEqual(&got, n) {
			t.Fatalf("old encoding of %+v decodes as %+v, %v", n, got, err)
		}
	}
}

// TestInodeV3Decodes: inodes encoded by layout 3 (without Spans and
// OpenStart) decode, with Spans 0 (unknown), and differ from the current
// encoding only by those two trailing elements.
func TestInodeV3Decodes(t *testing.T) {
	for _, n := range seedInodes() {
		b, err := meta.MarshalInodeV3(n)
		if err != nil {
			t.Fatal(err)
		}
		if b[1] != 0x80|17 {
			t.Fatalf("layout-3 encoding %x is not an array of 17", b)
		}
		want := *n
		want.Spans, want.OpenStart = 0, 0
		var got meta.Inode
		if err := meta.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("layout-3 encoding of %+v decodes as %+v, %v", n, got, err)
		}
		cur, err := meta.Marshal(&want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append([]byte{cur[0], 0x80 | 17}, cur[2:len(cur)-2]...), b) {
			t.Fatalf("layout-3 encoding %x is not the current one %x without its last two elements", b, cur)
		}
	}
}

func seedSpans() []*meta.Span {
	var out []*meta.Span
	for _, r := range seedRegions() {
		out = append(out, &meta.Span{Extents: r.Extents, Compacted: r.Compacted})
	}
	big := meta.Extent{Off: 1 << 40, Len: 10, Kind: meta.KindInline, Data: bytes.Repeat([]byte{1}, 10)}
	return append(out, &meta.Span{Extents: []meta.Extent{big}, Compacted: 1})
}

func seedDirents() []*meta.Dirent {
	return []*meta.Dirent{{Ino: 2, Type: 2, Cookie: 3}, {Ino: 1 << 40, Type: 1, Cookie: 1 << 33}, {Ino: 9, Type: 7, Cookie: 4}}
}

func seedRegions() []*meta.Region {
	var slc meta.Extent
	slc.Off, slc.Len = 100, 4000
	slc.SetPointer(slice.Pointer{Backing: 2, Offset: 1 << 20, Length: 8192, CRC: 0xdeadbeef}, 10)
	return []*meta.Region{
		{},
		{End: 5, Extents: []meta.Extent{{Off: 0, Len: 5, Kind: meta.KindInline, Data: []byte("hello")}}},
		{End: 4100, Extents: []meta.Extent{slc, {Off: 50, Len: 100, Kind: meta.KindHole},
			{Off: 4090, Len: 10, Kind: meta.KindInline, Data: bytes.Repeat([]byte{7}, 10)}}},
	}
}

func seedChunks() []*meta.Chunk {
	var out []*meta.Chunk
	for _, r := range seedRegions() {
		out = append(out, &meta.Chunk{End: r.End, Extents: r.Extents, Compacted: r.Compacted})
	}
	return out
}

func addSeeds[T any](f *testing.F, recs []T) {
	for _, r := range recs {
		b, err := meta.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[1:])
		f.Add(append(bytes.Clone(b), 0))
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0x9f, 0xff})
	f.Add([]byte{1, 0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) // array of 2^64-1 elements
	f.Add([]byte{1, 0x5b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) // huge byte string
}

// checkDecode decodes b into a fresh *T; on success the record must
// survive an encode/decode round trip.
func checkDecode[T any](t *testing.T, b []byte) {
	var v T
	err := meta.Unmarshal(b, &v)
	if err != nil {
		if !errors.Is(err, meta.ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
		return
	}
	enc, err := meta.Marshal(&v)
	if err != nil {
		t.Fatalf("decoded record does not encode: %v", err)
	}
	var w T
	if err := meta.Unmarshal(enc, &w); err != nil {
		t.Fatalf("re-encoded record does not decode: %v", err)
	}
	if !reflect.DeepEqual(normalize(v), normalize(w)) {
		t.Fatalf("round trip changed the record:\n%+v\n%+v", v, w)
	}
}

// normalize treats nil and empty byte slices alike.
func normalize(v any) any {
	if r, ok := v.(meta.Region); ok {
		r.Extents = append([]meta.Extent(nil), r.Extents...)
		for i := range r.Extents {
			if len(r.Extents[i].Data) == 0 {
				r.Extents[i].Data = nil
			}
		}
		if len(r.Extents) == 0 {
			r.Extents = nil
		}
		return r
	}
	if c, ok := v.(meta.Span); ok {
		r := normalize(meta.Region{Extents: c.Extents, Compacted: c.Compacted}).(meta.Region)
		return meta.Span{Extents: r.Extents, Compacted: r.Compacted}
	}
	if c, ok := v.(meta.Chunk); ok {
		r := normalize(meta.Region{End: c.End, Extents: c.Extents, Compacted: c.Compacted}).(meta.Region)
		return meta.Chunk{End: r.End, Extents: r.Extents, Compacted: r.Compacted}
	}
	return v
}

func FuzzUnmarshalInode(f *testing.F) {
	addSeeds(f, seedInodes())
	for _, n := range seedInodes() {
		n.Used = 0
		b, err := meta.Marshal(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(inodeV1Encoding(f, b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode[meta.Inode](t, b)
		var n meta.Inode
		if meta.Unmarshal(b, &n) == nil {
			if n.Type < 1 || n.Type > 7 || n.Mode&^0o7777 != 0 {
				t.Fatalf("invalid inode decoded without error: %+v", n)
			}
		}
	})
}

func FuzzUnmarshalDirent(f *testing.F) {
	addSeeds(f, seedDirents())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode[meta.Dirent](t, b)
		var d meta.Dirent
		if meta.Unmarshal(b, &d) == nil && (d.Ino == 0 || d.Type < 1 || d.Type > 7) {
			t.Fatalf("invalid dirent decoded without error: %+v", d)
		}
	})
}

func FuzzUnmarshalRegion(f *testing.F) {
	addSeeds(f, seedRegions())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode[meta.Region](t, b)
		var r meta.Region
		if meta.Unmarshal(b, &r) != nil {
			return
		}
		checkExtents(t, r.End, r.Extents, meta.RegionSize)
	})
}

func FuzzUnmarshalChunk(f *testing.F) {
	addSeeds(f, seedChunks())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode[meta.Chunk](t, b)
		var c meta.Chunk
		if meta.Unmarshal(b, &c) != nil {
			return
		}
		checkExtents(t, c.End, c.Extents, meta.ChunkSize)
	})
}

// FuzzUnmarshalSpan: a span record decodes (with its key) into extents
// that lie inside the span the key names, or gives ErrCorrupt.
func FuzzUnmarshalSpan(f *testing.F) {
	keys := [][]byte{meta.SpanKey(3, 0, meta.SpanOpen), meta.SpanKey(3, 4096, 8191), meta.SpanKey(3, 100, 99)[:24], meta.ChunkKey(3, 1)}
	for i, r := range seedSpans() {
		b, err := meta.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		for _, k := range keys {
			f.Add(k, b)
			f.Add(k, b[:len(b)/2])
		}
		f.Add(meta.SpanKey(uint64(i), 1<<40, 1<<40+9), b)
	}
	f.Fuzz(func(t *testing.T, k, b []byte) {
		checkDecode[meta.Span](t, b)
		ino, start, last, s, err := meta.UnmarshalSpan(k, b)
		if err != nil {
			if !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if start > last || !bytes.Equal(meta.SpanKey(ino, start, last), k) {
			t.Fatalf("span key %x decodes as (%d, %d, %d)", k, ino, start, last)
		}
		length := last - start + 1 // 0: 2^64
		for _, e := range s.Extents {
			if e.Off+uint64(e.Len) < e.Off || (length != 0 && e.Off+uint64(e.Len) > length) {
				t.Fatalf("extent [%d,+%d) outside a span of %d bytes", e.Off, e.Len, length)
			}
		}
		checkExtents(t, 0, s.Extents, ^uint64(0))
	})
}

// checkExtents: what decodes is safe to use: every extent lies inside the
// record's span and names a range inside its slice or data.
func checkExtents(t *testing.T, end uint32, exts []meta.Extent, span uint64) {
	if uint64(end) > span {
		t.Fatalf("end %d past %d", end, span)
	}
	for _, e := range exts {
		if e.Len == 0 || e.Off+uint64(e.Len) < e.Off || e.Off+uint64(e.Len) > span {
			t.Fatalf("extent [%d,+%d) outside [0, %d)", e.Off, e.Len, span)
		}
		switch e.Kind {
		case meta.KindInline:
			if len(e.Data) != int(e.Len) {
				t.Fatalf("inline extent of %d bytes holds %d", e.Len, len(e.Data))
			}
		case meta.KindSlice:
			if e.PtrLen == 0 || e.PtrLen > slice.MaxSize || uint64(e.SliceOff)+uint64(e.Len) > uint64(e.PtrLen) {
				t.Fatalf("slice extent range %d+%d of %d", e.SliceOff, e.Len, e.PtrLen)
			}
		case meta.KindHole:
		default:
			t.Fatalf("extent kind %d", e.Kind)
		}
	}
}

// FuzzParseKeys: key parsers reject what they cannot parse, never panic.
func FuzzParseKeys(f *testing.F) {
	f.Add(meta.RegionKey(5, 7))
	f.Add(meta.ChunkKey(5, 7))
	f.Add(meta.DirentKey(1, "name"))
	f.Add(meta.CookieKey(1, 3))
	f.Add(meta.XattrKey(2, "user.x"))
	f.Add(meta.InodeKey(9))
	f.Add(meta.SpanKey(9, 4096, meta.SpanOpen))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, k []byte) {
		for _, err := range []error{
			func() error { _, err := meta.ParseIno(k); return err }(),
			func() error { _, _, err := meta.ParseRegionKey(k); return err }(),
			func() error { _, _, err := meta.ParseChunkKey(k); return err }(),
			func() error { _, _, err := meta.ParseDirentKey(k); return err }(),
			func() error { _, _, err := meta.ParseCookieKey(k); return err }(),
			func() error { _, _, err := meta.ParseXattrKey(k); return err }(),
			func() error { _, _, _, err := meta.ParseSpanKey(k); return err }(),
		} {
			if err != nil && !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
		}
		if ino, idx, err := meta.ParseRegionKey(k); err == nil && !bytes.Equal(meta.RegionKey(ino, idx), k) {
			t.Fatalf("region key %x parses as (%d, %d)", k, ino, idx)
		}
		if ino, idx, err := meta.ParseChunkKey(k); err == nil && !bytes.Equal(meta.ChunkKey(ino, idx), k) {
			t.Fatalf("chunk key %x parses as (%d, %d)", k, ino, idx)
		}
		if ino, start, last, err := meta.ParseSpanKey(k); err == nil && (start > last || !bytes.Equal(meta.SpanKey(ino, start, last), k)) {
			t.Fatalf("span key %x parses as (%d, %d, %d)", k, ino, start, last)
		}
		if dir, name, err := meta.ParseDirentKey(k); err == nil && !bytes.Equal(meta.DirentKey(dir, name), k) {
			t.Fatalf("dirent key %x parses as (%d, %q)", k, dir, name)
		}
	})
}
