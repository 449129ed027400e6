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
