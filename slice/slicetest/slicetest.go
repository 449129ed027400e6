// Package slicetest is a conformance suite for slice.Store implementations.
// Every backend (local directory, memory tier, object storage) runs it:
//
//	func TestConformance(t *testing.T) {
//		slicetest.Run(t, func(t *testing.T) slice.Store { return open(t) })
//	}
//
// The suite checks the Store contract only: round trips, sub-range reads,
// argument errors, forged pointers, checksum verification, Free and
// Close. Durability across crashes is backend-specific and tested there.
package slicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/txnfs/txnfs/slice"
)

// Open returns a fresh, empty store. The suite closes it.
type Open func(t *testing.T) slice.Store

// Run runs every conformance test as a subtest of t.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(*testing.T, slice.Store)
	}{
		{"RoundTripSizes", testRoundTripSizes},
		{"SubRanges", testSubRanges},
		{"PutArguments", testPutArguments},
		{"BadPointers", testBadPointers},
		{"ForgedPointers", testForgedPointers},
		{"ChecksumMismatch", testChecksumMismatch},
		{"SyncBadPointer", testSyncBadPointer},
		{"HintLocality", testHintLocality},
		{"Concurrent", testConcurrent},
		{"Free", testFree},
		{"FreeArguments", testFreeArguments},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil && !errors.Is(err, slice.ErrClosed) {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// Sizes are the slice sizes round-tripped by the suite: the edges of
// MaxSize and of 4 KiB pages.
var Sizes = []int{1, 2, 7, 511, 4095, 4096, 4097, 65536, 100_003, slice.MaxSize - 1, slice.MaxSize}

// RandomData returns n reproducible pseudo-random bytes.
func RandomData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// MustPut puts data and fails the test on error.
func MustPut(t testing.TB, s slice.Store, hint uint64, data []byte) slice.Pointer {
	t.Helper()
	p, err := s.Put(context.Background(), hint, data)
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(data), err)
	}
	if p.Length != uint32(len(data)) || p.CRC != slice.Checksum(data) {
		t.Fatalf("Put(%d bytes) = %v, want length %d crc %08x", len(data), p, len(data), slice.Checksum(data))
	}
	return p
}

// MustRead reads the whole slice and fails the test on error.
func MustRead(t testing.TB, s slice.Store, p slice.Pointer) []byte {
	t.Helper()
	buf := make([]byte, p.Length)
	if err := s.ReadAt(context.Background(), p, 0, buf); err != nil {
		t.Fatalf("ReadAt(%v): %v", p, err)
	}
	return buf
}

func testRoundTripSizes(t *testing.T, s slice.Store) {
	ctx := context.Background()
	var ptrs []slice.Pointer
	var datas [][]byte
	for i, n := range Sizes {
		d := RandomData(uint64(i), n)
		ptrs = append(ptrs, MustPut(t, s, uint64(i), d))
		datas = append(datas, d)
	}
	// Readable before and after Sync.
	for i, p := range ptrs {
		if got := MustRead(t, s, p); !bytes.Equal(got, datas[i]) {
			t.Fatalf("before sync: %v: data differs", p)
		}
	}
	if err := s.Sync(ctx, ptrs); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := s.Sync(ctx, ptrs); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	for i, p := range ptrs {
		if got := MustRead(t, s, p); !bytes.Equal(got, datas[i]) {
			t.Fatalf("after sync: %v: data differs", p)
		}
		// An empty read verifies and succeeds.
		if err := s.ReadAt(ctx, p, p.Length, nil); err != nil {
			t.Fatalf("empty ReadAt at end of %v: %v", p, err)
		}
	}
	// Pointers survive their encoding.
	for _, p := range ptrs {
		q, err := slice.DecodePointer(p.AppendBinary(nil))
		if err != nil || q != p {
			t.Fatalf("DecodePointer(AppendBinary(%v)) = %v, %v", p, q, err)
		}
	}
	bs, err := s.Backings(ctx)
	if err != nil {
		t.Fatalf("Backings: %v", err)
	}
	for _, p := range ptrs {
		found := false
		for _, b := range bs {
			if b.ID == p.Backing {
				found = true
				if b.Size < p.End() {
					t.Errorf("backing %d size %d < end of %v", b.ID, b.Size, p)
				}
			}
		}
		if !found {
			t.Errorf("Backings() does not list backing of %v", p)
		}
	}
}

func testSubRanges(t *testing.T, s slice.Store) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for i, n := range []int{1, 4096, 70_001, slice.MaxSize} {
		d := RandomData(uint64(100+i), n)
		p := MustPut(t, s, 0, d)
		for range 50 {
			off := r.IntN(n + 1)
			l := r.IntN(n - off + 1)
			buf := make([]byte, l)
			if err := s.ReadAt(ctx, p, uint32(off), buf); err != nil {
				t.Fatalf("ReadAt(%v, %d, %d): %v", p, off, l, err)
			}
			if !bytes.Equal(buf, d[off:off+l]) {
				t.Fatalf("ReadAt(%v, %d, %d): data differs", p, off, l)
			}
		}
	}
}

func testPutArguments(t *testing.T, s slice.Store) {
	ctx := context.Background()
	if _, err := s.Put(ctx, 0, nil); !errors.Is(err, slice.ErrEmpty) {
		t.Errorf("Put(empty) = %v, want ErrEmpty", err)
	}
	if _, err := s.Put(ctx, 0, make([]byte, slice.MaxSize+1)); !errors.Is(err, slice.ErrTooLarge) {
		t.Errorf("Put(MaxSize+1) = %v, want ErrTooLarge", err)
	}
	// Put neither modifies nor retains its argument.
	d := RandomData(7, 10_000)
	orig := bytes.Clone(d)
	p := MustPut(t, s, 0, d)
	if !bytes.Equal(d, orig) {
		t.Fatal("Put modified its argument")
	}
	clear(d)
	if got := MustRead(t, s, p); !bytes.Equal(got, orig) {
		t.Fatal("store retained the caller's buffer")
	}
}

func testBadPointers(t *testing.T, s slice.Store) {
	ctx := context.Background()
	p := MustPut(t, s, 0, RandomData(1, 1000))
	buf := make([]byte, 10)
	bad := []struct {
		name string
		p    slice.Pointer
		off  uint32
		n    int
	}{
		{"zero", slice.Pointer{}, 0, 0},
		{"length0", slice.Pointer{Backing: p.Backing, Offset: p.Offset, CRC: p.CRC}, 0, 0},
		{"tooLong", slice.Pointer{Backing: p.Backing, Offset: p.Offset, Length: slice.MaxSize + 1, CRC: p.CRC}, 0, 1},
		{"maxLength", slice.Pointer{Backing: p.Backing, Offset: p.Offset, Length: math.MaxUint32, CRC: p.CRC}, 0, 1},
		{"maxOffset", slice.Pointer{Backing: p.Backing, Offset: math.MaxUint64, Length: 10, CRC: p.CRC}, 0, 10},
		{"offsetOverflowsInt64", slice.Pointer{Backing: p.Backing, Offset: math.MaxInt64 - 5, Length: 10, CRC: p.CRC}, 0, 10},
		{"unknownBacking", slice.Pointer{Backing: math.MaxUint32, Offset: 0, Length: 10}, 0, 10},
		{"rangePastEnd", p, p.Length - 5, 10},
		{"offPastEnd", p, p.Length + 1, 0},
		{"offMax", p, math.MaxUint32, 1},
	}
	for _, tc := range bad {
		err := s.ReadAt(ctx, tc.p, tc.off, buf[:tc.n])
		if !errors.Is(err, slice.ErrBadPointer) {
			t.Errorf("%s: ReadAt(%v, %d, %d) = %v, want ErrBadPointer", tc.name, tc.p, tc.off, tc.n, err)
		}
	}
	// Bytes that were never written are ErrCorrupt (or ErrBadPointer).
	beyond := slice.Pointer{Backing: p.Backing, Offset: 1 << 40, Length: 10, CRC: 1}
	if err := s.ReadAt(ctx, beyond, 0, buf); !errors.Is(err, slice.ErrCorrupt) && !errors.Is(err, slice.ErrBadPointer) {
		t.Errorf("ReadAt(%v) = %v, want ErrCorrupt", beyond, err)
	}
}

// testForgedPointers reads random pointers: every read fails cleanly or
// returns exactly the bytes the pointer names.
func testForgedPointers(t *testing.T, s slice.Store) {
	ctx := context.Background()
	var real []slice.Pointer
	for i := range 8 {
		real = append(real, MustPut(t, s, uint64(i), RandomData(uint64(i), 1000+i*5000)))
	}
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, slice.MaxSize)
	for i := range 2000 {
		var p slice.Pointer
		switch i % 4 {
		case 0: // anything at all
			p = slice.Pointer{Backing: r.Uint32(), Offset: r.Uint64(), Length: r.Uint32(), CRC: r.Uint32()}
		case 1: // plausible fields
			p = slice.Pointer{Backing: r.Uint32N(10), Offset: r.Uint64N(1 << 20), Length: r.Uint32N(slice.MaxSize + 2), CRC: r.Uint32()}
		case 2: // a real pointer with one field changed
			p = real[r.IntN(len(real))]
			switch r.IntN(4) {
			case 0:
				p.Backing ^= 1 << r.IntN(32)
			case 1:
				p.Offset ^= 1 << r.IntN(64)
			case 2:
				p.Length ^= 1 << r.IntN(32)
			case 3:
				p.CRC ^= 1 << r.IntN(32)
			}
		case 3: // extreme values
			vals := []uint64{0, 1, math.MaxInt64, math.MaxUint64, math.MaxUint32, slice.MaxSize, slice.MaxSize + 1}
			p = slice.Pointer{Backing: uint32(vals[r.IntN(len(vals))]), Offset: vals[r.IntN(len(vals))],
				Length: uint32(vals[r.IntN(len(vals))]), CRC: r.Uint32()}
		}
		off := uint32(0)
		n := int(min(p.Length, slice.MaxSize))
		if r.IntN(2) == 0 && n > 0 {
			off = r.Uint32N(uint32(n))
			n -= int(off)
		}
		err := s.ReadAt(ctx, p, off, buf[:n])
		if err == nil {
			// Only a pointer equal to a real one can verify (or a CRC
			// collision, 2^-32 per read).
			ok := false
			for _, q := range real {
				ok = ok || q == p
			}
			if !ok {
				t.Errorf("forged %v read successfully", p)
			}
			continue
		}
		if !errors.Is(err, slice.ErrBadPointer) && !errors.Is(err, slice.ErrCorrupt) {
			t.Errorf("ReadAt(forged %v) = %v, want ErrBadPointer or ErrCorrupt", p, err)
		}
	}
}

func testChecksumMismatch(t *testing.T, s slice.Store) {
	ctx := context.Background()
	d := RandomData(9, 5000)
	p := MustPut(t, s, 0, d)
	for _, q := range []slice.Pointer{
		{Backing: p.Backing, Offset: p.Offset, Length: p.Length, CRC: p.CRC ^ 1},
		{Backing: p.Backing, Offset: p.Offset, Length: p.Length - 1, CRC: p.CRC},
		{Backing: p.Backing, Offset: p.Offset + 1, Length: p.Length - 1, CRC: p.CRC},
	} {
		buf := make([]byte, q.Length)
		if err := s.ReadAt(ctx, q, 0, buf); !errors.Is(err, slice.ErrCorrupt) {
			t.Errorf("ReadAt(%v) = %v, want ErrCorrupt", q, err)
		}
		if err := s.ReadAt(ctx, q, 1, buf[:10]); !errors.Is(err, slice.ErrCorrupt) {
			t.Errorf("ReadAt(%v, sub-range) = %v, want ErrCorrupt", q, err)
		}
	}
	// The good pointer still reads.
	if !bytes.Equal(MustRead(t, s, p), d) {
		t.Fatal("data differs")
	}
}

func testSyncBadPointer(t *testing.T, s slice.Store) {
	ctx := context.Background()
	p := MustPut(t, s, 0, RandomData(1, 100))
	for _, q := range []slice.Pointer{
		{},
		{Backing: math.MaxUint32, Length: 1},
		{Backing: p.Backing, Offset: math.MaxUint64, Length: 1},
		{Backing: p.Backing, Offset: p.End() + 1<<30, Length: 1},
	} {
		if err := s.Sync(ctx, []slice.Pointer{p, q}); !errors.Is(err, slice.ErrBadPointer) {
			t.Errorf("Sync(%v) = %v, want ErrBadPointer", q, err)
		}
	}
	if err := s.Sync(ctx, nil); err != nil {
		t.Errorf("Sync(nil) = %v", err)
	}
}

// testHintLocality checks WTF §2.7: consecutive puts with one hint land
// adjacent in one backing file when nothing else writes.
func testHintLocality(t *testing.T, s slice.Store) {
	prev := MustPut(t, s, 42, RandomData(1, 3000))
	for i := range 10 {
		p := MustPut(t, s, 42, RandomData(uint64(i), 1000+i))
		if p.Backing != prev.Backing || p.Offset != prev.End() {
			t.Fatalf("put with same hint: %v does not follow %v", p, prev)
		}
		prev = p
	}
}

func testConcurrent(t *testing.T, s slice.Store) {
	ctx := context.Background()
	const writers, perWriter = 8, 40
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			type rec struct {
				p slice.Pointer
				d []byte
			}
			var mine []rec
			for i := range perWriter {
				d := RandomData(uint64(w*1000+i), 1+r.IntN(64<<10))
				p, err := s.Put(ctx, uint64(w), d)
				if err != nil {
					errc <- err
					return
				}
				mine = append(mine, rec{p, d})
				if i%4 == 3 {
					ps := make([]slice.Pointer, 0, 4)
					for _, m := range mine[len(mine)-4:] {
						ps = append(ps, m.p)
					}
					if err := s.Sync(ctx, ps); err != nil {
						errc <- err
						return
					}
				}
				m := mine[r.IntN(len(mine))]
				off := r.IntN(len(m.d))
				buf := make([]byte, r.IntN(len(m.d)-off+1))
				if err := s.ReadAt(ctx, m.p, uint32(off), buf); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(buf, m.d[off:off+len(buf)]) {
					errc <- fmt.Errorf("%v [%d,+%d): data differs", m.p, off, len(buf))
					return
				}
			}
			if _, err := s.Backings(ctx); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func testFree(t *testing.T, s slice.Store) {
	ctx := context.Background()
	a := MustPut(t, s, 5, RandomData(1, 5000))
	bData := RandomData(2, 9000)
	b := MustPut(t, s, 5, bData)
	c := MustPut(t, s, 5, RandomData(3, 7000))
	if b.Backing != a.Backing || b.Offset != a.End() || c.Offset != b.End() {
		t.Fatalf("expected adjacent slices, got %v %v %v", a, b, c)
	}
	if err := s.Sync(ctx, []slice.Pointer{a, b, c}); err != nil {
		t.Fatal(err)
	}
	MustRead(t, s, b) // make sure a cache, if any, holds it
	if err := s.Free(ctx, b.Backing, b.Offset, uint64(b.Length)); err != nil {
		t.Fatalf("Free(%v): %v", b, err)
	}
	buf := make([]byte, b.Length)
	if err := s.ReadAt(ctx, b, 0, buf); !errors.Is(err, slice.ErrCorrupt) {
		t.Fatalf("ReadAt(freed %v) = %v, want ErrCorrupt", b, err)
	}
	if err := s.ReadAt(ctx, b, 100, buf[:10]); !errors.Is(err, slice.ErrCorrupt) {
		t.Fatalf("ReadAt(freed %v, sub-range) = %v, want ErrCorrupt", b, err)
	}
	// Neighbours are untouched.
	if !bytes.Equal(MustRead(t, s, a), RandomData(1, 5000)) || !bytes.Equal(MustRead(t, s, c), RandomData(3, 7000)) {
		t.Fatal("Free damaged a neighbour")
	}
	// Freeing again, or a sub-range, is harmless.
	if err := s.Free(ctx, b.Backing, b.Offset+10, 100); err != nil {
		t.Fatalf("second Free: %v", err)
	}
	if err := s.Free(ctx, b.Backing, b.Offset, 0); err != nil {
		t.Fatalf("empty Free: %v", err)
	}
	// A later put never reuses the freed range.
	d := MustPut(t, s, 5, RandomData(4, 100))
	if d.Backing == b.Backing && d.Offset < b.End() {
		t.Fatalf("put %v reuses freed range of %v", d, b)
	}
}

func testFreeArguments(t *testing.T, s slice.Store) {
	ctx := context.Background()
	p := MustPut(t, s, 0, RandomData(1, 100))
	for _, tc := range []struct {
		id          uint32
		off, length uint64
	}{
		{math.MaxUint32, 0, 1},
		{p.Backing, 0, math.MaxUint64},
		{p.Backing, math.MaxUint64, 1},
		{p.Backing, math.MaxUint64, math.MaxUint64},
		{p.Backing, p.End() + 1<<30, 10},
	} {
		if err := s.Free(ctx, tc.id, tc.off, tc.length); !errors.Is(err, slice.ErrBadPointer) {
			t.Errorf("Free(%d, %d, %d) = %v, want ErrBadPointer", tc.id, tc.off, tc.length, err)
		}
	}
	// The slice is intact after the rejected frees.
	if !bytes.Equal(MustRead(t, s, p), RandomData(1, 100)) {
		t.Fatal("rejected Free damaged data")
	}
}

func testClosed(t *testing.T, s slice.Store) {
	ctx := context.Background()
	p := MustPut(t, s, 0, RandomData(1, 100))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Put(ctx, 0, []byte("x")); !errors.Is(err, slice.ErrClosed) {
		t.Errorf("Put after Close = %v", err)
	}
	if err := s.ReadAt(ctx, p, 0, make([]byte, p.Length)); !errors.Is(err, slice.ErrClosed) {
		t.Errorf("ReadAt after Close = %v", err)
	}
	if err := s.Sync(ctx, []slice.Pointer{p}); !errors.Is(err, slice.ErrClosed) {
		t.Errorf("Sync after Close = %v", err)
	}
	if _, err := s.Backings(ctx); !errors.Is(err, slice.ErrClosed) {
		t.Errorf("Backings after Close = %v", err)
	}
	if err := s.Free(ctx, p.Backing, p.Offset, 1); !errors.Is(err, slice.ErrClosed) {
		t.Errorf("Free after Close = %v", err)
	}
	if err := s.Close(); !errors.Is(err, slice.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}
