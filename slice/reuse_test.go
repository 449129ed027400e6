package slice_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

func openReuse(t testing.TB, fs vfs.FS, dir string, reuseMax int64) *slice.Local {
	t.Helper()
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fs, Dir: dir, Files: 1, ReuseMax: reuseMax})
	if err != nil {
		t.Fatalf("OpenLocal(%s): %v", dir, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// reuseStores runs fn over a MemFS store (buffered reuse writes) and a
// store in a real directory (direct reuse writes where O_DIRECT works).
func reuseStores(t *testing.T, reuseMax int64, fn func(t *testing.T, l *slice.Local)) {
	t.Run("mem", func(t *testing.T) { fn(t, openReuse(t, vfs.NewMem(), "/s", reuseMax)) })
	t.Run("disk", func(t *testing.T) { fn(t, openReuse(t, vfs.Default, t.TempDir(), reuseMax)) })
}

func mustRecycle(t *testing.T, s slice.Store, w *slice.ReuseWatch, id uint32, off, n uint64) []slice.Range {
	t.Helper()
	punched, err := slice.Recycle(ctx, s, w, id, off, n)
	if err != nil {
		t.Fatalf("Recycle(%d, [%d, +%d)): %v", id, off, n, err)
	}
	return punched
}

// TestRecyclePoolsWholeBlocks: Recycle keeps the whole 4 KiB blocks of a
// range for reuse and leaves the partial blocks at its ends alone; a large
// put then lands in the pooled range (the file does not grow) and reads
// back; a small put appends.
func TestRecyclePoolsWholeBlocks(t *testing.T) {
	reuseStores(t, 0, func(t *testing.T, l *slice.Local) {
		a := slicetest.MustPut(t, l, 0, slicetest.RandomData(1, 100))
		b := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 3<<20/4))
		c := slicetest.MustPut(t, l, 0, slicetest.RandomData(3, 100))
		if err := l.Sync(ctx, []slice.Pointer{a, b, c}); err != nil {
			t.Fatal(err)
		}
		off, end := a.End(), c.Offset // b and whatever padding surrounds it
		punched := mustRecycle(t, l, nil, b.Backing, off, end-off)
		lo, hi := (off+4095)&^4095, end&^4095
		if len(punched) != 0 {
			t.Fatalf("punched %v, want nothing", punched)
		}
		if st := l.Stats(); st.PoolBytes != hi-lo || st.RecycledBytes != hi-lo {
			t.Fatalf("pool %d bytes, recycled %d, want %d", st.PoolBytes, st.RecycledBytes, hi-lo)
		}
		// Recycling again is harmless: nothing is added twice.
		mustRecycle(t, l, nil, b.Backing, lo, hi-lo)
		if st := l.Stats(); st.PoolBytes != hi-lo || st.RecycledBytes != hi-lo {
			t.Fatalf("pool %d bytes, recycled %d after a second Recycle, want %d", st.PoolBytes, st.RecycledBytes, hi-lo)
		}
		size := backing(t, l, b.Backing).Size
		small := slicetest.MustPut(t, l, 0, slicetest.RandomData(4, 1000))
		if small.Offset < size {
			t.Fatalf("small put %v reused space (size was %d)", small, size)
		}
		size = backing(t, l, b.Backing).Size
		dData := slicetest.RandomData(5, 512<<10-3)
		d := slicetest.MustPut(t, l, 0, dData)
		if d.Offset != lo || backing(t, l, d.Backing).Size != size {
			t.Fatalf("put %v (size %d -> %d), want it at the pooled offset %d", d, size, backing(t, l, d.Backing).Size, lo)
		}
		if st := l.Stats(); st.ReusePuts != 1 || st.PoolBytes != hi-lo-512<<10 {
			t.Fatalf("stats %+v after one reuse", st)
		}
		if err := l.Sync(ctx, []slice.Pointer{d}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(slicetest.MustRead(t, l, d), dData) {
			t.Fatal("reused slice reads back wrong")
		}
		// The old slice there is dead: it fails verification.
		if err := l.ReadAt(ctx, b, 0, make([]byte, b.Length)); !errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("read of the recycled slice %v: %v, want ErrCorrupt", b, err)
		}
		for _, p := range []slice.Pointer{a, c} {
			slicetest.MustRead(t, l, p)
		}
		// Free takes a range out of the pool for good.
		if err := l.Free(ctx, b.Backing, lo, hi-lo); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.PoolBytes != 0 {
			t.Fatalf("pool %d bytes after Free, want 0", st.PoolBytes)
		}
		size = backing(t, l, b.Backing).Size
		if e := slicetest.MustPut(t, l, 0, slicetest.RandomData(6, 512<<10)); e.Offset < size {
			t.Fatalf("put %v reused a freed range", e)
		}
	})
}

func equalRanges(a, b []slice.Range) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRecycleBound: past LocalOptions.ReuseMax, Recycle punches; a
// negative bound disables the pool.
func TestRecycleBound(t *testing.T) {
	for _, tc := range []struct {
		max    int64
		pooled uint64
	}{{1 << 20, 1 << 20}, {-1, 0}} {
		l := openReuse(t, vfs.NewMem(), "/s", tc.max)
		var ptrs []slice.Pointer
		for i := range 3 {
			ptrs = append(ptrs, slicetest.MustPut(t, l, 0, slicetest.RandomData(uint64(i), 1<<20)))
		}
		var punched uint64
		for _, p := range ptrs {
			for _, r := range mustRecycle(t, l, nil, p.Backing, p.Offset, uint64(p.Length)) {
				punched += r.End - r.Start
			}
		}
		if st := l.Stats(); st.PoolBytes != tc.pooled || punched != 3<<20-tc.pooled {
			t.Errorf("ReuseMax %d: pool %d bytes, punched %d; want %d pooled", tc.max, st.PoolBytes, punched, tc.pooled)
		}
		for _, p := range ptrs[1:] { // the ones punched read as zeros
			if err := l.ReadAt(ctx, p, 0, make([]byte, p.Length)); !errors.Is(err, slice.ErrCorrupt) {
				t.Errorf("ReuseMax %d: punched %v reads %v", tc.max, p, err)
			}
		}
	}
}

// TestSyncAfterReuseFsyncs: a put into reused space lies below the file's
// synced watermark, yet Sync (and SyncAll) must fdatasync for it, once.
func TestSyncAfterReuseFsyncs(t *testing.T) {
	reuseStores(t, 0, func(t *testing.T, l *slice.Local) {
		for _, all := range []bool{false, true} {
			a := slicetest.MustPut(t, l, 0, slicetest.RandomData(1, 1<<20))
			b := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 1<<20))
			if err := l.Sync(ctx, []slice.Pointer{a, b}); err != nil {
				t.Fatal(err)
			}
			mustRecycle(t, l, nil, a.Backing, a.Offset, uint64(a.Length))
			c := slicetest.MustPut(t, l, 0, slicetest.RandomData(3, 1<<20))
			if c.Offset != a.Offset {
				t.Fatalf("put %v did not reuse %v", c, a)
			}
			before := l.Stats().Fsyncs
			sync := func() error { return l.Sync(ctx, []slice.Pointer{c}) }
			if all {
				sync = func() error { return l.SyncAll(ctx) }
			}
			if err := sync(); err != nil {
				t.Fatal(err)
			}
			if got := l.Stats().Fsyncs - before; got != 1 {
				t.Fatalf("SyncAll=%v after a reuse: %d fsyncs, want 1", all, got)
			}
			if err := sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.Sync(ctx, []slice.Pointer{b}); err != nil {
				t.Fatal(err)
			}
			if got := l.Stats().Fsyncs - before; got != 1 {
				t.Fatalf("SyncAll=%v: %d fsyncs after syncing again, want still 1", all, got)
			}
			mustRecycle(t, l, nil, c.Backing, c.Offset, uint64(c.Length))
			mustRecycle(t, l, nil, b.Backing, b.Offset, uint64(b.Length))
		}
	})
}

// TestReuseSurvivesCrash: on a strict MemFS, a put into reused space whose
// Sync returned survives a crash (the un-synced state is dropped); one not
// synced may read as corrupt but never as other data.
func TestReuseSurvivesCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "/s", Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []slice.Pointer
	for i := range 4 {
		ptrs = append(ptrs, slicetest.MustPut(t, l, 0, slicetest.RandomData(uint64(i), 256<<10)))
	}
	if err := l.Sync(ctx, ptrs); err != nil {
		t.Fatal(err)
	}
	mustRecycle(t, l, nil, ptrs[0].Backing, ptrs[0].Offset, ptrs[3].End()-ptrs[0].Offset)
	durData := slicetest.RandomData(10, 256<<10)
	dur := slicetest.MustPut(t, l, 0, durData)
	if err := l.Sync(ctx, []slice.Pointer{dur}); err != nil {
		t.Fatal(err)
	}
	lostData := slicetest.RandomData(11, 256<<10)
	lost := slicetest.MustPut(t, l, 0, lostData)
	if dur.Offset >= ptrs[3].End() || lost.Offset >= ptrs[3].End() {
		t.Fatalf("puts %v %v did not reuse", dur, lost)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	l.Close()
	l, err = slice.OpenLocal(ctx, slice.LocalOptions{FS: crashed, Dir: "/s", Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := slicetest.MustRead(t, l, dur); !bytes.Equal(got, durData) {
		t.Fatal("synced put into reused space lost by a crash")
	}
	buf := make([]byte, lost.Length)
	if err := l.ReadAt(ctx, lost, 0, buf); err != nil && !errors.Is(err, slice.ErrCorrupt) {
		t.Fatalf("un-synced reused put: %v", err)
	} else if err == nil && !bytes.Equal(buf, lostData) {
		t.Fatal("un-synced reused put reads other data")
	}
}

// TestRecycleSkipsReusedSinceWatch: the collector recycles with a watch
// begun before its scan; a range handed out since (a transaction may be
// writing there) is left alone, even if the collector asks for it.
func TestRecycleSkipsReusedSinceWatch(t *testing.T) {
	l := openReuse(t, vfs.NewMem(), "/s", 0)
	s := slice.NewCache(l, 64<<20)
	a := slicetest.MustPut(t, s, 0, slicetest.RandomData(1, 1<<20))
	slicetest.MustPut(t, s, 0, slicetest.RandomData(2, 100))
	mustRecycle(t, s, nil, a.Backing, a.Offset, uint64(a.Length))
	w := slice.WatchReuse(s)
	defer w.Close()
	bData := slicetest.RandomData(3, 1<<20)
	b := slicetest.MustPut(t, s, 0, bData)
	if b.Offset != a.Offset {
		t.Fatalf("put %v did not reuse %v", b, a)
	}
	if got := w.Reused(b.Backing); !equalRanges(got, []slice.Range{{Start: b.Offset, End: b.End()}}) {
		t.Fatalf("watch saw %v", got)
	}
	if punched := mustRecycle(t, s, w, a.Backing, a.Offset, uint64(a.Length)); len(punched) != 0 {
		t.Fatalf("recycle of a range reused since the watch punched %v", punched)
	}
	if st := l.Stats(); st.PoolBytes != 0 {
		t.Fatalf("range reused since the watch went back to the pool (%d bytes)", st.PoolBytes)
	}
	if got := slicetest.MustRead(t, s, b); !bytes.Equal(got, bData) {
		t.Fatal("reused slice damaged")
	}
	// Without the watch, the same call would recycle it.
	mustRecycle(t, s, nil, a.Backing, a.Offset, uint64(a.Length))
	if st := l.Stats(); st.PoolBytes != 1<<20 {
		t.Fatalf("pool %d bytes", st.PoolBytes)
	}
}

// TestCacheReuseNotStale: the memory tier never serves the old bytes of a
// recycled range, neither for the new slice there nor for the dead one.
func TestCacheReuseNotStale(t *testing.T) {
	l := openReuse(t, vfs.NewMem(), "/s", 0)
	s := slice.NewCache(l, 64<<20)
	aData := slicetest.RandomData(1, 1<<20)
	a := slicetest.MustPut(t, s, 0, aData)
	slicetest.MustRead(t, s, a) // cached now
	mustRecycle(t, s, nil, a.Backing, a.Offset, uint64(a.Length))
	bData := slicetest.RandomData(2, 1<<20)
	b := slicetest.MustPut(t, s, 0, bData)
	if b.Offset != a.Offset || b.Length != a.Length {
		t.Fatalf("put %v did not reuse %v", b, a)
	}
	if got := slicetest.MustRead(t, s, b); !bytes.Equal(got, bData) {
		t.Fatal("new slice in reused space reads stale bytes")
	}
	if err := s.ReadAt(ctx, a, 0, make([]byte, a.Length)); !errors.Is(err, slice.ErrCorrupt) {
		t.Fatalf("dead slice in reused space: %v, want ErrCorrupt", err)
	}
}

// TestReuseConcurrentCrash: writers put slices of 64 KiB–1 MiB (each
// recycling its own older slices once done with them, so most puts land in
// reused space, direct and asynchronous on a real directory) and sync
// some, concurrently; then on a crash clone (MemFS) or after reopening (a
// real directory: the page cache holds everything, so this checks the
// reads and the dirty-range bookkeeping, not power loss), every slice
// still live whose Sync returned reads back exactly, and a live un-synced
// one reads back exactly or fails cleanly.
func TestReuseConcurrentCrash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			var fsys vfs.FS
			mem := vfs.NewCrashableMem()
			dir := "/s"
			fsys = mem
			if disk {
				fsys, dir = vfs.Default, t.TempDir()
			}
			l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fsys, Dir: dir, Files: 2})
			if err != nil {
				t.Fatal(err)
			}
			const writers, ops = 4, 60
			type liveRec struct {
				rec
				durable bool
			}
			lives := make([][]liveRec, writers)
			var bigPuts atomic.Uint64
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(w)))
					var live []liveRec
					var pending []int
					for i := range ops {
						n := 64<<10 + r.IntN(slice.MaxSize-64<<10)
						d := slicetest.RandomData(seed<<20|uint64(w)<<12|uint64(i), n)
						p, err := l.Put(ctx, uint64(w), d)
						if err != nil {
							t.Errorf("put: %v", err)
							return
						}
						if n >= slice.DefaultDirectMin {
							bigPuts.Add(1)
						}
						live = append(live, liveRec{rec: rec{p, d}})
						pending = append(pending, len(live)-1)
						if r.IntN(2) == 0 {
							var ptrs []slice.Pointer
							for _, j := range pending {
								ptrs = append(ptrs, live[j].p)
							}
							if err := l.Sync(ctx, ptrs); err != nil {
								t.Errorf("sync: %v", err)
								return
							}
							for _, j := range pending {
								live[j].durable = true
							}
							pending = pending[:0]
						}
						if len(live) > 6 && len(pending) == 0 {
							// Done with the oldest: recycle it (whole
							// blocks only, as the collector would).
							old := live[0]
							live = live[1:]
							// Direct puts are padded to whole
							// blocks (garbage, as the collector
							// finds it); buffered ones are not.
							start, end := old.p.Offset, old.p.End()
							if disk {
								end = (end + 4095) &^ 4095
							}
							if _, err := l.Recycle(ctx, nil, old.p.Backing, start, end-start); err != nil {
								t.Errorf("recycle: %v", err)
								return
							}
						}
					}
					lives[w] = live
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			st := l.Stats()
			t.Logf("stats %+v", st)
			if st.PoolBytes%4096 != 0 {
				t.Errorf("pool holds %d bytes: not whole blocks", st.PoolBytes)
			}
			// Where O_DIRECT works, every large put went direct: a
			// misaligned pool range would make a direct write fail
			// with EINVAL and the file fall back to buffered writes.
			if st.DirectPuts > 0 && st.DirectPuts != bigPuts.Load() {
				t.Errorf("%d direct puts of %d large ones", st.DirectPuts, bigPuts.Load())
			}
			if st.ReusePuts < writers*ops/3 {
				t.Errorf("only %d of %d puts reused space", st.ReusePuts, writers*ops)
			}
			if !disk {
				fsys = mem.CrashClone(vfs.CrashCloneCfg{})
			}
			l.Close()
			l2, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fsys, Dir: dir, Files: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			var puts, durable []rec
			for _, live := range lives {
				for _, x := range live {
					puts = append(puts, x.rec)
					if x.durable {
						durable = append(durable, x.rec)
					}
				}
			}
			verify(t, l2, puts, durable)
		})
	}
}

// TestDrainPool: DrainPool gives every pooled byte back (punched), after
// which large puts append again and the slices around still read back.
func TestDrainPool(t *testing.T) {
	reuseStores(t, 0, func(t *testing.T, l *slice.Local) {
		a := slicetest.MustPut(t, l, 0, slicetest.RandomData(1, 100))
		b := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 1<<20))
		c := slicetest.MustPut(t, l, 0, slicetest.RandomData(3, 100))
		if err := l.Sync(ctx, []slice.Pointer{a, b, c}); err != nil {
			t.Fatal(err)
		}
		mustRecycle(t, l, nil, b.Backing, a.End(), c.Offset-a.End())
		pooled := l.Stats().PoolBytes
		if pooled == 0 {
			t.Fatal("nothing pooled")
		}
		released, err := slice.DrainPool(ctx, slice.NewCache(l, 1<<20))
		if err != nil || released != pooled {
			t.Fatalf("DrainPool = %d, %v; want %d pooled bytes", released, err, pooled)
		}
		if st := l.Stats(); st.PoolBytes != 0 {
			t.Fatalf("pool %d bytes after DrainPool", st.PoolBytes)
		}
		size := backing(t, l, b.Backing).Size
		if d := slicetest.MustPut(t, l, 0, slicetest.RandomData(4, 512<<10)); d.Offset < size {
			t.Fatalf("put %v reused a drained range", d)
		}
		for _, p := range []slice.Pointer{a, c} {
			slicetest.MustRead(t, l, p)
		}
		// Recycled again later (the collector still sees the range as
		// garbage), it pools and takes puts as before.
		mustRecycle(t, l, nil, b.Backing, a.End(), c.Offset-a.End())
		if l.Stats().PoolBytes != pooled {
			t.Fatalf("pool %d bytes after recycling the drained range, want %d", l.Stats().PoolBytes, pooled)
		}
	})
}

// backing returns backing file id of s.
func backing(t *testing.T, s slice.Store, id uint32) slice.Backing {
	t.Helper()
	bs, err := s.Backings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no backing %d in %v", id, bs)
	return slice.Backing{}
}
