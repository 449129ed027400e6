package slice

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// alignedData returns n pseudo-random bytes in a 4 KiB-aligned buffer (a
// put of it skips the staging copy when n is a multiple of 4 KiB).
func alignedData(seed uint64, n int) []byte {
	b := newAligned()
	return append((*b)[:0], directData(seed, n)...)
}

// TestDirectUnstaged: a put whose data is 4 KiB-aligned and a multiple of
// 4 KiB long is written with O_DIRECT straight from the caller's buffer
// (no staging copy), before Put returns, every time (not only the probe);
// the caller may then reuse its buffer: the slice reads back with the old
// contents and CRC, also after Sync and a reopen. Unaligned callers (in
// memory, or in length) are staged as before. Puts into recycled space go
// the same way and need a Sync (dirty tracking).
func TestDirectUnstaged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openUnstagedOrSkip(t, dir)
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	// Staged puts write from background goroutines: the hook's state is
	// under mu.
	var mu sync.Mutex
	var fromCaller, calls int
	var callerBuf []byte // the data of the put running now
	setCaller := func(b []byte) { mu.Lock(); callerBuf = b; mu.Unlock() }
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return calls, fromCaller }
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		mu.Lock()
		calls++
		if unsafe.SliceData(buf) == unsafe.SliceData(callerBuf) {
			fromCaller++
		}
		mu.Unlock()
		return old(fd, buf, off)
	}
	type put struct {
		p    Pointer
		want []byte
	}
	var puts []put
	cases := []struct {
		name    string
		data    []byte
		aligned bool
	}{
		{"aligned 1 MiB (probe)", alignedData(1, MaxSize), true},
		{"aligned 1 MiB", alignedData(2, MaxSize), true},
		{"unaligned address", directData(3, MaxSize), false},
		{"aligned address, odd length", alignedData(4, MaxSize-512), false},
		{"aligned 256 KiB", alignedData(5, DefaultDirectMin), true},
		{"aligned 1 MiB again", alignedData(6, MaxSize), true},
	}
	for _, c := range cases {
		setCaller(c.data)
		want := bytes.Clone(c.data)
		before, beforeCaller := counts()
		st := l.Stats()
		p, err := l.Put(ctx, 0, c.data)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		calls, fromCaller := counts()
		if calls == before && c.aligned {
			t.Errorf("%s: Put returned before its direct write was issued", c.name)
		}
		if got := fromCaller - beforeCaller; (got > 0) != c.aligned {
			t.Errorf("%s: %d direct writes from the caller's buffer, want them iff aligned (%v)", c.name, got, c.aligned)
		}
		if got := l.Stats().UnstagedPuts - st.UnstagedPuts; got != uint64(boolInt(c.aligned)) {
			t.Errorf("%s: UnstagedPuts +%d, want +%d", c.name, got, boolInt(c.aligned))
		}
		if c.aligned && inFlight(l, p) {
			t.Errorf("%s: a write from the caller's buffer is still in flight after Put", c.name)
		}
		if p.CRC != Checksum(want) {
			t.Errorf("%s: CRC %08x, want %08x", c.name, p.CRC, Checksum(want))
		}
		scribble(c.data) // the caller reuses its buffer at once
		puts = append(puts, put{p, want})
	}
	if got := l.Stats().DirectPuts; got != uint64(len(cases)) {
		t.Errorf("DirectPuts = %d, want %d", got, len(cases))
	}
	var ptrs []Pointer
	for _, p := range puts {
		mustGet(t, l, p.p, p.want)
		ptrs = append(ptrs, p.p)
	}
	if err := l.Sync(ctx, ptrs); err != nil {
		t.Fatal(err)
	}

	// Into recycled space: the put takes the range, and its Sync fsyncs.
	r := puts[1].p
	if _, err := l.Recycle(ctx, nil, r.Backing, r.Offset, uint64(r.Length)); err != nil {
		t.Fatal(err)
	}
	d := alignedData(7, MaxSize)
	setCaller(d)
	want := bytes.Clone(d)
	st := l.Stats()
	p, err := l.Put(ctx, 0, d)
	if err != nil {
		t.Fatal(err)
	}
	scribble(d)
	if p.Offset != r.Offset {
		t.Errorf("aligned put at %d did not reuse the recycled range at %d", p.Offset, r.Offset)
	}
	if got := l.Stats(); got.UnstagedPuts != st.UnstagedPuts+1 || got.ReusePuts != st.ReusePuts+1 {
		t.Errorf("put into reused space: UnstagedPuts +%d, ReusePuts +%d; want +1, +1",
			got.UnstagedPuts-st.UnstagedPuts, got.ReusePuts-st.ReusePuts)
	}
	fsyncs := l.Stats().Fsyncs
	if err := l.Sync(ctx, []Pointer{p}); err != nil {
		t.Fatal(err)
	}
	if l.Stats().Fsyncs == fsyncs {
		t.Error("Sync of a put into reused space did not fsync")
	}
	mustGet(t, l, p, want)
	puts[1] = put{p, want}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	pwriteDirect = old
	l = openDirectLocal(t, dir, 0)
	defer l.Close()
	for _, p := range puts {
		mustGet(t, l, p.p, p.want)
	}
}

// inFlight reports whether a direct write overlapping p's range is listed
// in flight.
func inFlight(l *Local, p Pointer) bool {
	b := l.byID[p.Backing]
	b.dmu.Lock()
	defer b.dmu.Unlock()
	for _, w := range b.dmu.writes {
		if w.off < alignUp(p.End()) && p.Offset < w.end {
			return true
		}
	}
	return false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDirectUnstagedFails: after the probe, an unstaged put whose write
// fails (EIO) fails the Put itself (it is synchronous) and consumes its
// range; one refused (EINVAL) falls back to a buffered put, and the file
// takes buffered writes from then on; the store stays usable and every
// successful put reads back.
func TestDirectUnstagedFails(t *testing.T) {
	ctx := context.Background()
	l := openUnstagedOrSkip(t, t.TempDir())
	defer l.Close()
	a := alignedData(1, MaxSize)
	pa, err := l.Put(ctx, 0, a) // the probe
	if err != nil {
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()

	pwriteDirect = func(int, []byte, int64) (int, error) { return -1, unix.EIO }
	before := l.writable[0].size.Load()
	if _, err := l.Put(ctx, 0, alignedData(2, MaxSize)); !errors.Is(err, unix.EIO) {
		t.Fatalf("unstaged put with a failing write = %v, want EIO", err)
	}
	if l.writable[0].size.Load() <= before {
		t.Error("failed unstaged put did not consume its range")
	}
	if inFlight(l, Pointer{Backing: 1, Offset: before, Length: MaxSize}) {
		t.Error("failed unstaged write still listed in flight")
	}
	pwriteDirect = old
	b := alignedData(3, MaxSize)
	pb, err := l.Put(ctx, 0, b)
	if err != nil {
		t.Fatal(err)
	}
	if pb.Offset < before+MaxSize {
		t.Errorf("put after a failed one at %d reuses its range (from %d)", pb.Offset, before)
	}
	if err := l.Sync(ctx, []Pointer{pa, pb}); err != nil {
		t.Fatalf("Sync after a failed unstaged put: %v", err)
	}

	pwriteDirect = func(int, []byte, int64) (int, error) { return -1, unix.EINVAL }
	c := alignedData(4, MaxSize)
	want := bytes.Clone(c)
	pc, err := l.Put(ctx, 0, c)
	if err != nil {
		t.Fatalf("refused unstaged put: %v", err)
	}
	scribble(c)
	if !l.writable[0].directOff.Load() {
		t.Error("refused unstaged write did not turn direct writes off")
	}
	if err := l.Sync(ctx, []Pointer{pc}); err != nil {
		t.Fatal(err)
	}
	pwriteDirect = old
	mustGet(t, l, pa, a)
	mustGet(t, l, pb, b)
	mustGet(t, l, pc, want)
}

// TestIsAligned: only a 4 KiB-aligned start and a 4 KiB multiple length
// qualify.
func TestIsAligned(t *testing.T) {
	b := *newAligned()
	for _, c := range []struct {
		d    []byte
		want bool
	}{
		{b[:4096], true}, {b[:MaxSize], true}, {b[4096 : 4096+8192], true},
		{b[:0], false}, {b[:4095], false}, {b[1 : 1+4096], false}, {b[512 : 512+4096], false},
	} {
		if got := isAligned(c.d); got != c.want {
			t.Errorf("isAligned(offset %d, len %d) = %v, want %v",
				uintptr(unsafe.Pointer(unsafe.SliceData(c.d)))-uintptr(unsafe.Pointer(&b[0])), len(c.d), got, c.want)
		}
	}
}

// TestDirectStagedByDefault: without LocalOptions.Unstaged, aligned data
// is staged like any other (the put returns before its background write;
// a FUSE mount relies on that overlap).
func TestDirectStagedByDefault(t *testing.T) {
	ctx := context.Background()
	l := openDirectOrSkip(t, t.TempDir())
	defer l.Close()
	for i := range 3 { // the probe, then background writes
		data := alignedData(uint64(i), MaxSize)
		want := bytes.Clone(data)
		p, err := l.Put(ctx, 0, data)
		if err != nil {
			t.Fatal(err)
		}
		scribble(data)
		if err := l.Sync(ctx, []Pointer{p}); err != nil {
			t.Fatal(err)
		}
		mustGet(t, l, p, want)
	}
	if n := l.Stats().UnstagedPuts; n != 0 {
		t.Errorf("%d unstaged puts without LocalOptions.Unstaged", n)
	}
}
