package slice_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

// readCountingLocal opens a Local over a MemFS whose backing-file reads
// are counted and, while hold is set, blocked until release is closed.
type readCounter struct {
	reads   atomic.Int64
	hold    atomic.Bool
	release chan struct{}
}

func (rc *readCounter) open(t *testing.T) *slice.Local {
	rc.release = make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt && filepath.Ext(op.Path) == ".dat" {
			rc.reads.Add(1)
			if rc.hold.Load() {
				<-rc.release
			}
		}
		return nil
	})
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: errorfs.Wrap(vfs.NewMem(), inj), Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCacheReturnsStore(t *testing.T) {
	l := openLocal(t, vfs.NewMem(), "s")
	defer l.Close()
	if s := slice.NewCache(l, 0); s != slice.Store(l) {
		t.Fatal("NewCache(next, 0) should return next")
	}
	if _, ok := slice.NewCache(l, 1).(*slice.Cache); !ok {
		t.Fatal("NewCache should return a *Cache")
	}
}

// TestCacheHitsDoNotTouchDisk: written-through and loaded slices are served
// from memory.
func TestCacheHitsDoNotTouchDisk(t *testing.T) {
	var rc readCounter
	l := rc.open(t)
	c := slice.NewCache(l, 8<<20).(*slice.Cache)
	defer c.Close()
	d := slicetest.RandomData(1, 100_000)
	p := slicetest.MustPut(t, c, 0, d)
	for i := range 100 {
		buf := make([]byte, 1000)
		if err := c.ReadAt(ctx, p, uint32(i*900), buf); err != nil || !bytes.Equal(buf, d[i*900:i*900+1000]) {
			t.Fatalf("ReadAt: %v", err)
		}
	}
	if rc.reads.Load() != 0 {
		t.Fatalf("%d disk reads for written-through slice", rc.reads.Load())
	}
	// A slice put below the cache is loaded once.
	q := slicetest.MustPut(t, l, 0, d)
	for range 10 {
		slicetest.MustRead(t, c, q)
	}
	if rc.reads.Load() != 1 {
		t.Fatalf("%d disk reads, want 1", rc.reads.Load())
	}
	st := c.Stats()
	if st.Hits != 109 || st.Misses != 1 || st.Entries != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCacheSingleflight: concurrent misses of one slice read it from disk
// once.
func TestCacheSingleflight(t *testing.T) {
	const n = 16
	var rc readCounter
	l := rc.open(t)
	c := slice.NewCache(l, 8<<20).(*slice.Cache)
	defer c.Close()
	d := slicetest.RandomData(1, 300_000)
	p := slicetest.MustPut(t, l, 0, d)
	rc.hold.Store(true)
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1000)
			if err := c.ReadAt(ctx, p, uint32(i*1000), buf); err != nil {
				errc <- err
			} else if !bytes.Equal(buf, d[i*1000:i*1000+1000]) {
				errc <- errors.New("data differs")
			}
		}()
	}
	for c.Stats().Shared < n-1 {
		runtime.Gosched() // until every other caller waits on the one load
	}
	close(rc.release)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if rc.reads.Load() != 1 {
		t.Fatalf("%d concurrent misses did %d disk reads, want 1", n, rc.reads.Load())
	}
}

func TestCacheEvictsLRU(t *testing.T) {
	l := openLocal(t, vfs.NewMem(), "s")
	const max = 3<<20 + 1<<10
	c := slice.NewCacheOpts(l, slice.CacheOptions{MaxBytes: max, PutMax: -1}).(*slice.Cache)
	defer c.Close()
	var ptrs []slice.Pointer
	for i := range 3 {
		ptrs = append(ptrs, slicetest.MustPut(t, c, 0, slicetest.RandomData(uint64(i), 1<<20)))
	}
	if st := c.Stats(); st.Entries != 3 || st.Evictions != 0 {
		t.Fatalf("stats %+v", st)
	}
	slicetest.MustRead(t, c, ptrs[0]) // ptrs[1] is now least recent
	ptrs = append(ptrs, slicetest.MustPut(t, c, 0, slicetest.RandomData(3, 1<<20)))
	st := c.Stats()
	if st.Entries != 3 || st.Evictions != 1 || st.Bytes > max {
		t.Fatalf("stats %+v", st)
	}
	hits := st.Hits
	slicetest.MustRead(t, c, ptrs[0])
	slicetest.MustRead(t, c, ptrs[3])
	if c.Stats().Hits != hits+2 {
		t.Fatal("recently used slices were evicted")
	}
	misses := c.Stats().Misses
	if got := slicetest.MustRead(t, c, ptrs[1]); !bytes.Equal(got, slicetest.RandomData(1, 1<<20)) {
		t.Fatal("evicted slice reads back wrong")
	}
	if c.Stats().Misses != misses+1 {
		t.Fatal("least recently used slice was not the one evicted")
	}
	// Slices bigger than the whole cache are not cached.
	small := slice.NewCache(openLocal(t, vfs.NewMem(), "t"), 1000).(*slice.Cache)
	defer small.Close()
	slicetest.MustPut(t, small, 0, make([]byte, 2000))
	if st := small.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("oversized slice cached: %+v", st)
	}
}

// TestCacheFreeInvalidatesRange frees a range spanning several 1 MiB index
// chunks: exactly the cached slices overlapping it stop reading.
func TestCacheFreeInvalidatesRange(t *testing.T) {
	l := openLocal(t, vfs.NewMem(), "s")
	c := slice.NewCache(l, 64<<20).(*slice.Cache)
	defer c.Close()
	var ptrs []slice.Pointer
	for i := range 40 {
		ptrs = append(ptrs, slicetest.MustPut(t, c, 3, slicetest.RandomData(uint64(i), 100_000+i)))
	}
	// Free from the middle of slice 10 to the middle of slice 30.
	from := ptrs[10].Offset + 50
	to := ptrs[30].Offset + 50
	if err := c.Free(ctx, ptrs[0].Backing, from, to-from); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Invalidations; got != 21 {
		t.Fatalf("invalidated %d slices, want 21", got)
	}
	for i, p := range ptrs {
		err := c.ReadAt(ctx, p, 0, make([]byte, p.Length))
		if freed := i >= 10 && i <= 30; freed != errors.Is(err, slice.ErrCorrupt) || (!freed && err != nil) {
			t.Fatalf("slice %d (%v): %v", i, p, err)
		}
	}
}

// TestCacheDoesNotCacheErrors: a failed verification is not remembered as
// good data, and a corrupt pointer never poisons the good one.
func TestCacheDoesNotCacheErrors(t *testing.T) {
	l := openLocal(t, vfs.NewMem(), "s")
	c := slice.NewCache(l, 8<<20).(*slice.Cache)
	defer c.Close()
	p := slicetest.MustPut(t, l, 0, []byte("hello"))
	bad := p
	bad.CRC ^= 1
	for range 3 {
		if err := c.ReadAt(ctx, bad, 0, make([]byte, 5)); !errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("ReadAt(bad) = %v", err)
		}
	}
	if string(slicetest.MustRead(t, c, p)) != "hello" {
		t.Fatal("data differs")
	}
	if st := c.Stats(); st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCachePutMax: Puts above PutMax are not copied into the cache (the
// first read loads them), smaller ones are.
func TestCachePutMax(t *testing.T) {
	l := openLocal(t, vfs.NewMem(), "s")
	c := slice.NewCache(l, 64<<20).(*slice.Cache)
	defer c.Close()
	big := slicetest.MustPut(t, c, 0, slicetest.RandomData(1, slice.DefaultCachePutMax+1))
	small := slicetest.MustPut(t, c, 0, slicetest.RandomData(2, slice.DefaultCachePutMax))
	if st := c.Stats(); st.Entries != 1 {
		t.Fatalf("after a large and a small Put: %+v, want only the small one cached", st)
	}
	slicetest.MustRead(t, c, small)
	slicetest.MustRead(t, c, big)
	slicetest.MustRead(t, c, big)
	if st := c.Stats(); st.Entries != 2 || st.Hits != 2 || st.Misses != 1 {
		t.Fatalf("after reads: %+v, want the large slice loaded once, then hits", st)
	}
}
