package slice_test

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

func FuzzDecodePointer(f *testing.F) {
	for _, p := range []slice.Pointer{
		{Backing: 1, Offset: 0, Length: 1, CRC: 0},
		{Backing: 7, Offset: 1 << 40, Length: slice.MaxSize, CRC: 0xdeadbeef},
		{Backing: math.MaxUint32, Offset: math.MaxUint64, Length: math.MaxUint32, CRC: math.MaxUint32},
		{},
	} {
		f.Add(p.AppendBinary(nil))
	}
	f.Add([]byte{})
	f.Add(make([]byte, slice.PointerSize-1))
	f.Add(make([]byte, slice.PointerSize+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := slice.DecodePointer(b)
		if err != nil {
			if !errors.Is(err, slice.ErrBadPointer) {
				t.Fatalf("DecodePointer(%x) = %v, want ErrBadPointer", b, err)
			}
			return
		}
		if p.Length == 0 || p.Length > slice.MaxSize {
			t.Fatalf("DecodePointer(%x) accepted length %d", b, p.Length)
		}
		if enc := p.AppendBinary(nil); !bytes.Equal(enc, b) {
			t.Fatalf("AppendBinary(DecodePointer(%x)) = %x", b, enc)
		}
		_ = p.String()
		_ = p.End()
	})
}

// FuzzReadAt reads an arbitrary pointer from a store whose backing file
// holds arbitrary bytes, directly and through the cache: it must fail with
// ErrBadPointer/ErrCorrupt or return exactly the named bytes, never panic.
// fixCRC makes the pointer's CRC match the bytes it names, so the success
// path is explored too.
func FuzzReadAt(f *testing.F) {
	good := slicetest.RandomData(1, 300)
	f.Add(good, uint32(1), uint64(0), uint32(300), uint32(0), uint32(0), uint32(300), true)
	f.Add(good, uint32(1), uint64(10), uint32(100), uint32(0), uint32(5), uint32(20), true)
	f.Add(good, uint32(1), uint64(10), uint32(100), uint32(0), uint32(5), uint32(20), false)
	f.Add(good, uint32(1), uint64(290), uint32(100), uint32(0), uint32(0), uint32(100), true)
	f.Add(good, uint32(2), uint64(0), uint32(1), uint32(0), uint32(0), uint32(1), true)
	f.Add(good, uint32(0), uint64(0), uint32(1), uint32(0), uint32(0), uint32(1), true)
	f.Add(good, uint32(9), uint64(0), uint32(1), uint32(0), uint32(0), uint32(1), true)
	f.Add([]byte{}, uint32(1), uint64(math.MaxUint64), uint32(math.MaxUint32), uint32(0), uint32(math.MaxUint32), uint32(math.MaxUint32), false)
	f.Add(make([]byte, 4096), uint32(1), uint64(math.MaxInt64), uint32(slice.MaxSize), uint32(0), uint32(0), uint32(slice.MaxSize), true)
	f.Add(make([]byte, 4096), uint32(1), uint64(0), uint32(4096), uint32(0), uint32(4000), uint32(97), true)
	f.Fuzz(func(t *testing.T, contents []byte, backing uint32, offset uint64, length, crc, off, n uint32, fixCRC bool) {
		fs := vfs.NewMem()
		if err := fs.MkdirAll("s", 0o755); err != nil {
			t.Fatal(err)
		}
		file, err := fs.Create(fs.PathJoin("s", slice.BackingName(1)), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := file.Write(bytes.Clone(contents)); err != nil {
			t.Fatal(err)
		}
		file.Close()
		l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fs, Dir: "s", Files: 2})
		if err != nil {
			t.Fatal(err)
		}
		c := slice.NewCache(l, 1<<20)
		defer c.Close()

		inFile := length > 0 && offset <= uint64(len(contents)) && uint64(length) <= uint64(len(contents))-offset
		if fixCRC && inFile {
			crc = slice.Checksum(contents[offset : offset+uint64(length)])
		}
		p := slice.Pointer{Backing: backing, Offset: offset, Length: length, CRC: crc}
		buf := make([]byte, n%(slice.MaxSize+2))
		for _, s := range []slice.Store{l, c, c} { // the second cache read may be a hit
			clear(buf)
			err := s.ReadAt(ctx, p, off, buf)
			if err != nil {
				if !errors.Is(err, slice.ErrBadPointer) && !errors.Is(err, slice.ErrCorrupt) {
					t.Fatalf("ReadAt(%v, %d, %d) = %v", p, off, len(buf), err)
				}
				continue
			}
			if backing != 1 || !inFile || length > slice.MaxSize || uint64(off)+uint64(len(buf)) > uint64(length) {
				t.Fatalf("ReadAt(%v, %d, %d) succeeded outside the written bytes", p, off, len(buf))
			}
			named := contents[offset : offset+uint64(length)]
			if slice.Checksum(named) != crc {
				t.Fatalf("ReadAt(%v) succeeded with a wrong checksum", p)
			}
			if !bytes.Equal(buf, named[off:uint64(off)+uint64(len(buf))]) {
				t.Fatalf("ReadAt(%v, %d, %d) returned wrong bytes", p, off, len(buf))
			}
		}
	})
}
