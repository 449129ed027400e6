package slice_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

// TestCoveredSkipsSync: with LocalOptions.Covered, a direct put into
// reused space below the synced watermark is reported by Covered and needs
// no fdatasync from Sync or SyncAll; an append still gets one and is not
// reported, and so does a put into reused space that was never synced;
// past maxCovered listed covered puts one fdatasync empties the list. Without Covered the
// reused put is synced (TestSyncAfterReuseFsyncs) and never reported.
func TestCoveredSkipsSync(t *testing.T) {
	for _, covered := range []bool{false, true} {
		l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.Default, Dir: t.TempDir(), Files: 1, ReuseMin: 1, DirectMin: 4096, Covered: covered})
		if err != nil {
			t.Fatal(err)
		}
		a := slicetest.MustPut(t, l, 0, slicetest.RandomData(1, 1<<20))
		if err := l.Sync(ctx, []slice.Pointer{a}); err != nil {
			t.Fatal(err)
		}
		if got := l.Covered([]slice.Pointer{a}); len(got) != 0 {
			t.Fatalf("covered=%v: an append reported covered: %v", covered, got)
		}
		mustRecycle(t, l, nil, a.Backing, a.Offset, uint64(a.Length))
		c := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 1<<20))
		if c.Offset != a.Offset {
			t.Fatalf("put %v did not reuse %v", c, a)
		}
		if st := l.Stats(); st.DirectPuts < 2 {
			t.Skipf("no direct puts here (%+v): O_DIRECT refused by %s?", st, t.TempDir())
		}
		got := l.Covered([]slice.Pointer{c})
		if covered != (len(got) == 1 && got[0] == c) {
			t.Fatalf("covered=%v: Covered = %v", covered, got)
		}
		before := l.Stats().Fsyncs
		if err := l.Sync(ctx, []slice.Pointer{c}); err != nil {
			t.Fatal(err)
		}
		if err := l.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
		want := uint64(1)
		if covered {
			want = 0
		}
		if n := l.Stats().Fsyncs - before; n != want {
			t.Fatalf("covered=%v: %d fdatasyncs for a put into reused space, want %d", covered, n, want)
		}
		// An append next to it is synced as always.
		d := slicetest.MustPut(t, l, 0, slicetest.RandomData(3, 1<<20))
		if err := l.Sync(ctx, []slice.Pointer{d}); err != nil {
			t.Fatal(err)
		}
		if n := l.Stats().Fsyncs - before; n != want+1 {
			t.Fatalf("covered=%v: %d fdatasyncs after an append, want %d", covered, n, want+1)
		}
		if covered {
			// That fdatasync covered c: no longer reported.
			if got := l.Covered([]slice.Pointer{c}); len(got) != 0 {
				t.Fatalf("Covered after a SyncData: %v", got)
			}
			// Past the bound, one fdatasync empties the list.
			var ptrs []slice.Pointer
			for i := 0; i < 300; i++ {
				p := slicetest.MustPut(t, l, 0, slicetest.RandomData(uint64(10+i), 4096))
				ptrs = append(ptrs, p)
			}
			if err := l.Sync(ctx, ptrs); err != nil {
				t.Fatal(err)
			}
			for _, p := range ptrs {
				mustRecycle(t, l, nil, p.Backing, p.Offset, uint64(p.Length))
			}
			before = l.Stats().Fsyncs
			for i := 0; i < 300; i++ {
				p := slicetest.MustPut(t, l, 0, slicetest.RandomData(uint64(400+i), 4096))
				if err := l.Sync(ctx, []slice.Pointer{p}); err != nil {
					t.Fatal(err)
				}
			}
			if n := l.Stats().Fsyncs - before; n != 1 {
				t.Fatalf("300 covered puts and Syncs: %d fdatasyncs, want 1 (when the list passed its bound)", n)
			}
		}
		if covered {
			// A pooled range never synced (the put that appended it was
			// not): a put there is not covered — the file's size and
			// allocation there may not be durable — and Sync
			// fdatasyncs for it.
			x := slicetest.MustPut(t, l, 0, slicetest.RandomData(900, 1<<20))
			mustRecycle(t, l, nil, x.Backing, x.Offset, uint64(x.Length))
			y := slicetest.MustPut(t, l, 0, slicetest.RandomData(901, 1<<20))
			if y.Offset != x.Offset {
				t.Fatalf("put %v did not reuse %v", y, x)
			}
			if got := l.Covered([]slice.Pointer{y}); len(got) != 0 {
				t.Fatalf("a put into never-synced reused space reported covered: %v", got)
			}
			before = l.Stats().Fsyncs
			if err := l.Sync(ctx, []slice.Pointer{y}); err != nil {
				t.Fatal(err)
			}
			if n := l.Stats().Fsyncs - before; n != 1 {
				t.Fatalf("a put into never-synced reused space: %d fdatasyncs, want 1", n)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCoveredNotIntoUnsureSpace: a covered put relies on the device flush
// alone, so the range it rewrites must be allocated, with that allocation
// durable: a hole (a range the reuse pool gave back to the file system,
// DrainPool, that the collector recycled again) needs block allocation,
// and so is a range left an unwritten extent by a put never synced before
// a restart (lseek SEEK_HOLE reports both); filling them changes file system metadata that only a journal
// commit (an fdatasync of the backing file) makes durable, which the
// metadata log's flush does not do. A put there is not covered, and Sync
// fdatasyncs for it.
func TestCoveredNotIntoUnsureSpace(t *testing.T) {
	dir := t.TempDir()
	open := func() *slice.Local {
		l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.Default, Dir: dir, Files: 1, ReuseMin: 1, DirectMin: 4096, ReuseMax: 64 << 20, Covered: true})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// notCovered puts 1 MiB that must land at off, and checks that it is
	// not covered.
	notCovered := func(l *slice.Local, what string, off uint64, seed uint64) {
		t.Helper()
		p := slicetest.MustPut(t, l, 0, slicetest.RandomData(seed, 1<<20))
		if p.Offset != off {
			t.Fatalf("%s: put %v did not reuse offset %d", what, p, off)
		}
		if st := l.Stats(); st.DirectPuts == 0 {
			t.Skipf("no direct puts here (%+v): O_DIRECT refused by %s?", st, dir)
		}
		if got := l.Covered([]slice.Pointer{p}); len(got) != 0 {
			t.Errorf("%s: the put was reported covered: %v", what, got)
		}
		before := l.Stats().Fsyncs
		if err := l.Sync(ctx, []slice.Pointer{p}); err != nil {
			t.Fatal(err)
		}
		if n := l.Stats().Fsyncs - before; n != 1 {
			t.Errorf("%s: %d fdatasyncs, want 1", what, n)
		}
	}

	l := open()
	a := slicetest.MustPut(t, l, 0, slicetest.RandomData(1, 1<<20))
	b := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 1<<20))
	if err := l.Sync(ctx, []slice.Pointer{a, b}); err != nil {
		t.Fatal(err)
	}
	// A hole: pooled, drained (punched), offered again by the collector.
	mustRecycle(t, l, nil, a.Backing, a.Offset, uint64(a.Length))
	if n, err := slice.DrainPool(ctx, l); err != nil || n != uint64(a.Length) {
		t.Fatalf("DrainPool: %d, %v", n, err)
	}
	// A later SyncData (an append's) must not take the hole for allocated.
	e := slicetest.MustPut(t, l, 0, slicetest.RandomData(10, 1<<20))
	if err := l.Sync(ctx, []slice.Pointer{e}); err != nil {
		t.Fatal(err)
	}
	mustRecycle(t, l, nil, a.Backing, a.Offset, uint64(a.Length))
	notCovered(l, "a put into a drained range", a.Offset, 3)
	// Once synced the range is allocated: the next put there is covered.
	mustRecycle(t, l, nil, a.Backing, a.Offset, uint64(a.Length))
	c := slicetest.MustPut(t, l, 0, slicetest.RandomData(4, 1<<20))
	if got := l.Covered([]slice.Pointer{c}); c.Offset != a.Offset || len(got) != 1 {
		t.Fatalf("a put into a range rewritten and synced: %v, Covered %v", c, got)
	}
	if err := l.Sync(ctx, []slice.Pointer{c}); err != nil {
		t.Fatal(err)
	}
	// A hole left by a drained pool before a restart (the collector
	// recycles it again after the restart: the pool is not persistent);
	// a range written before the restart, never synced, holds data and
	// is allocated once this run's first SyncData committed it.
	x := slicetest.MustPut(t, l, 0, slicetest.RandomData(5, 1<<20))
	z := slicetest.MustPut(t, l, 0, slicetest.RandomData(6, 1<<20))
	if err := l.Sync(ctx, []slice.Pointer{x}); err != nil {
		t.Fatal(err)
	}
	mustRecycle(t, l, nil, x.Backing, x.Offset, uint64(x.Length))
	if _, err := slice.DrainPool(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open()
	defer l.Close()
	y := slicetest.MustPut(t, l, 0, slicetest.RandomData(7, 1<<20)) // an append, synced:
	if err := l.Sync(ctx, []slice.Pointer{y}); err != nil {         // the whole file is
		t.Fatal(err) //                                                  synced past x
	}
	mustRecycle(t, l, nil, x.Backing, x.Offset, uint64(x.Length))
	notCovered(l, "a put into a range drained before the restart", x.Offset, 8)
	mustRecycle(t, l, nil, z.Backing, z.Offset, uint64(z.Length))
	w := slicetest.MustPut(t, l, 0, slicetest.RandomData(9, 1<<20))
	if got := l.Covered([]slice.Pointer{w}); w.Offset != z.Offset || len(got) != 1 {
		t.Fatalf("a put into a range written before the restart (data, synced since): %v, Covered %v", w, got)
	}
}
