package slice_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

// benchDir is a real directory for benchmarks: $TXNFS_BENCH_DIR if set
// (to measure another disk), else a temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("TXNFS_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "slicebench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkPutSync measures one Put followed by a Sync of that slice — the
// cost of a durable write — on a real directory. Writer w uses hint w, so
// 8 writers share the 4 backing files two by two and group commit merges
// their fsyncs; fsyncs/op shows how much. direct=false turns O_DIRECT
// off (LocalOptions.DirectMin -1), the A/B of the direct write path for
// sizes that take it (>= DefaultDirectMin).
func BenchmarkPutSync(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		for _, writers := range []int{1, 8} {
			for _, direct := range []bool{true, false} {
				if !direct && size < slice.DefaultDirectMin {
					continue
				}
				name := fmt.Sprintf("size=%s/writers=%d", sizeName(size), writers)
				if size >= slice.DefaultDirectMin {
					name += fmt.Sprintf("/direct=%v", direct)
				}
				b.Run(name, func(b *testing.B) { benchPutSync(b, size, writers, direct) })
			}
		}
	}
}

func benchPutSync(b *testing.B, size, writers int, direct bool) {
	o := slice.LocalOptions{FS: vfs.Default, Dir: benchDir(b)}
	if !direct {
		o.DirectMin = -1
	}
	l, err := slice.OpenLocal(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := slicetest.RandomData(1, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := l.Stats()
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				p, err := l.Put(ctx, uint64(w), data)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Sync(ctx, []slice.Pointer{p}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	st := l.Stats()
	b.ReportMetric(float64(st.Fsyncs-start.Fsyncs)/float64(b.N), "fsyncs/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkPut measures Put alone (no Sync): appends to the page cache.
func BenchmarkPut(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run("size="+sizeName(size), func(b *testing.B) {
			l := openLocal(b, vfs.Default, benchDir(b))
			defer l.Close()
			data := slicetest.RandomData(1, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := l.Put(ctx, uint64(i), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadAt reads random slices out of 64 MiB of them. cache=hit
// serves them from a Cache holding all of them; cache=miss reads them from
// the Local store (whole slice read + CRC32C; the backing files are in the
// OS page cache, so this is the verify path, not the device). read=4KiB
// reads 4 KiB out of each slice: a miss still reads and verifies the whole
// slice.
func BenchmarkReadAt(b *testing.B) {
	for _, cache := range []string{"hit", "miss"} {
		for _, tc := range []struct{ size, read int }{
			{4 << 10, 4 << 10}, {64 << 10, 64 << 10}, {1 << 20, 1 << 20}, {1 << 20, 4 << 10},
		} {
			name := fmt.Sprintf("cache=%s/size=%s", cache, sizeName(tc.size))
			if tc.read != tc.size {
				name += "/read=" + sizeName(tc.read)
			}
			b.Run(name, func(b *testing.B) {
				l := openLocal(b, vfs.Default, benchDir(b))
				var s slice.Store = l
				if cache == "hit" {
					s = slice.NewCache(l, 128<<20)
				}
				defer s.Close()
				n := (64 << 20) / tc.size
				ptrs := make([]slice.Pointer, n)
				data := slicetest.RandomData(1, tc.size)
				for i := range ptrs {
					ptrs[i] = slicetest.MustPut(b, s, uint64(i), data)
				}
				if err := s.Sync(ctx, ptrs); err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(1, 2))
				buf := make([]byte, tc.read)
				b.SetBytes(int64(tc.read))
				b.ReportAllocs()
				for b.Loop() {
					p := ptrs[r.IntN(n)]
					off := uint32(0)
					if tc.read < tc.size {
						off = uint32(r.IntN(tc.size - tc.read + 1))
					}
					if err := s.ReadAt(ctx, p, off, buf); err != nil {
						b.Fatal(err)
					}
				}
				if c, ok := s.(*slice.Cache); ok {
					if st := c.Stats(); st.Misses != 0 {
						b.Fatalf("cache=hit had %d misses", st.Misses)
					}
				}
			})
		}
	}
}
