package vnfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/txnfs/txnfs/vnfs"
)

// Tests of the data cache (Config.Cache), against each NFS server.

func withCache(budget int64) suiteOpts {
	return suiteOpts{cfg: func(c *vnfs.Config) { c.Cache = budget }}
}

func cacheStats(t *testing.T, f vnfs.FS) vnfs.CacheStats {
	t.Helper()
	s, ok := vnfs.CacheStatsOf(f)
	if !ok {
		t.Fatal("no cache")
	}
	return s
}

// readAll reads paths whole (buffers size+pad) with one VRead and returns
// the data.
func readAll(t *testing.T, f vnfs.FS, paths []string, size int) [][]byte {
	t.Helper()
	ios := make([]vnfs.IO, len(paths))
	for i, p := range paths {
		ios[i] = vnfs.IO{File: vnfs.P(p), Data: make([]byte, size+100)}
	}
	n, err := f.VRead(context.Background(), ios)
	mustN(t, n, err, len(paths))
	out := make([][]byte, len(paths))
	for i := range ios {
		if !ios[i].EOF {
			t.Fatalf("%s: no EOF after %d bytes", paths[i], ios[i].N)
		}
		out[i] = ios[i].Data[:ios[i].N]
	}
	return out
}

// other dials a second client, without a cache, to the same server.
func other(t *testing.T, e *env) vnfs.FS {
	t.Helper()
	o, err := vnfs.Dial(context.Background(), vnfs.Config{Addr: e.peer.Addr, Root: e.peer.Root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func TestCacheHit(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if !e.nfs {
			t.Skip("no cache on local paths")
		}
		ctx := context.Background()
		data := writeFiles(t, e, e.dir, 10, 40<<10)
		var paths []string
		for i := range data {
			paths = append(paths, fmt.Sprintf("%s/f%04d", e.dir, i))
		}
		got := readAll(t, e.fs, paths, 40<<10) // fills
		for i := range got {
			if !bytes.Equal(got[i], data[i]) {
				t.Fatalf("first read of %s differs", paths[i])
			}
		}
		s0, st0 := cacheStats(t, e.fs), e.stats()
		if s0.Fills != 10 || s0.Entries != 10 {
			t.Fatalf("after the first read: %+v, want 10 fills", s0)
		}
		got = readAll(t, e.fs, paths, 40<<10)
		s1, st1 := cacheStats(t, e.fs), e.stats()
		for i := range got {
			if !bytes.Equal(got[i], data[i]) {
				t.Fatalf("cached read of %s differs", paths[i])
			}
		}
		if s1.Hits-s0.Hits != 10 || s1.Misses != s0.Misses {
			t.Fatalf("second read: %+v -> %+v, want 10 hits", s0, s1)
		}
		// One COMPOUND, no data moved: 10 x 40 KiB would be 400 KiB.
		if c, in := st1.Compounds-st0.Compounds, st1.BytesIn-st0.BytesIn; c != 1 || in > 4096 {
			t.Fatalf("cached read of 10 files: %d COMPOUNDs, %d bytes in; want 1 and no data", c, in)
		}
		// A range inside a cached file, and one past its end.
		ios := []vnfs.IO{
			{File: vnfs.P(paths[3]), Offset: 1000, Data: make([]byte, 5000)},
			{File: vnfs.P(paths[4]), Offset: 39 << 10, Data: make([]byte, 5000)},
			{File: vnfs.P(paths[5]), Offset: 50 << 10, Data: make([]byte, 10)},
		}
		n, err := e.fs.VRead(ctx, ios)
		mustN(t, n, err, 3)
		if ios[0].N != 5000 || ios[0].EOF || !bytes.Equal(ios[0].Data, data[3][1000:6000]) {
			t.Fatalf("range read: N=%d EOF=%v", ios[0].N, ios[0].EOF)
		}
		if ios[1].N != 1<<10 || !ios[1].EOF || !bytes.Equal(ios[1].Data[:1<<10], data[4][39<<10:]) {
			t.Fatalf("read at the end: N=%d EOF=%v", ios[1].N, ios[1].EOF)
		}
		if ios[2].N != 0 || !ios[2].EOF {
			t.Fatalf("read past the end: N=%d EOF=%v", ios[2].N, ios[2].EOF)
		}
		if s2 := cacheStats(t, e.fs); s2.Hits-s1.Hits != 3 {
			t.Fatalf("range reads: %d hits, want 3", s2.Hits-s1.Hits)
		}
		// Descriptors: entries are keyed by file handle, so reads through
		// a descriptor hit what reads by path cached.
		of := []vnfs.OpenItem{{Path: paths[7], Flags: vnfs.OpenRead}}
		if _, err := e.fs.VOpen(ctx, of); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 2; k++ {
			h0 := cacheStats(t, e.fs).Hits
			ios := []vnfs.IO{{File: vnfs.D(of[0].FD), Data: make([]byte, 50<<10)}}
			n, err := e.fs.VRead(ctx, ios)
			mustN(t, n, err, 1)
			if !bytes.Equal(ios[0].Data[:ios[0].N], data[7]) || !ios[0].EOF {
				t.Fatalf("fd read %d: N=%d", k, ios[0].N)
			}
			if h := cacheStats(t, e.fs).Hits - h0; h != 1 {
				t.Fatalf("fd read %d: %d hits", k, h)
			}
		}
		if _, err := e.fs.VClose(ctx, []vnfs.FD{of[0].FD}); err != nil {
			t.Fatal(err)
		}
		// A read through a write-only descriptor goes to the server (which
		// may refuse it: Ganesha does, txnfs does not), cache or not.
		readWO := func(f vnfs.FS) error {
			wo := []vnfs.OpenItem{{Path: paths[7], Flags: vnfs.OpenWrite}}
			if _, err := f.VOpen(ctx, wo); err != nil {
				t.Fatal(err)
			}
			defer f.VClose(ctx, []vnfs.FD{wo[0].FD})
			_, err := f.VRead(ctx, []vnfs.IO{{File: vnfs.D(wo[0].FD), Data: make([]byte, 10)}})
			return err
		}
		h0 := cacheStats(t, e.fs).Hits
		if errC, errU := readWO(e.fs), readWO(other(t, e)); (errC == nil) != (errU == nil) || cacheStats(t, e.fs).Hits != h0 {
			t.Fatalf("write-only descriptor: cached client %v, uncached %v", errC, errU)
		}
		// Transactional reads bypass the cache.
		if e.txn {
			h0 := cacheStats(t, e.fs).Hits
			got := readAll(t, e.fs.Txn(), paths[:2], 40<<10)
			if !bytes.Equal(got[1], data[1]) || cacheStats(t, e.fs).Hits != h0 {
				t.Fatal("transactional read used the cache")
			}
		}
	}, withCache(8<<20))
}

// TestCacheOtherClient checks that changes by another client are seen by
// the next read: writes of the same size, truncation, rename over the
// name, removal; and that a vector with misses costs one COMPOUND per miss
// more than a vector of hits.
func TestCacheOtherClient(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if !e.nfs {
			t.Skip("no cache on local paths")
		}
		ctx := context.Background()
		o := other(t, e)
		const size = 8 << 10
		data := writeFiles(t, e, e.dir, 6, size)
		var paths []string
		for i := range data {
			paths = append(paths, fmt.Sprintf("%s/f%04d", e.dir, i))
		}
		readAll(t, e.fs, paths, size)
		// Another client: overwrite f1 in place (same size), truncate
		// f3, rename a new file over f4.
		data[1] = content(101, size)
		if n, err := o.VWrite(ctx, []vnfs.IO{{File: vnfs.P(paths[1]), Data: data[1]}}); err != nil || n != 1 {
			t.Fatal(n, err)
		}
		data[3] = data[3][:100]
		if _, err := o.VSetAttrs(ctx, []vnfs.AttrItem{{File: vnfs.P(paths[3]), Mask: vnfs.AttrSize, Attr: vnfs.Attr{Size: 100}}}); err != nil {
			t.Fatal(err)
		}
		data[4] = content(104, size)
		if err := vnfs.WriteFile(ctx, o, e.dir+"/new", data[4], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := o.VRename(ctx, []vnfs.RenameItem{{Old: e.dir + "/new", New: paths[4]}}); err != nil {
			t.Fatal(err)
		}
		s0, st0 := cacheStats(t, e.fs), e.stats()
		got := readAll(t, e.fs, paths, size)
		s1, st1 := cacheStats(t, e.fs), e.stats()
		for i := range got {
			if !bytes.Equal(got[i], data[i]) {
				t.Fatalf("%s: read %d bytes, not what the other client wrote (%d bytes)", paths[i], len(got[i]), len(data[i]))
			}
		}
		if m := s1.Misses - s0.Misses; m != 3 {
			t.Fatalf("%d misses, want 3", m)
		}
		if h := s1.Hits - s0.Hits; h != 3 {
			t.Fatalf("%d hits, want 3", h)
		}
		// Stopped at f1's VERIFY; from f1 with probes; f3 and f4 read.
		if c := st1.Compounds - st0.Compounds; c != 3 {
			t.Fatalf("%d COMPOUNDs, want 3", c)
		}
		// The re-read data is cached again: all hits.
		s0 = cacheStats(t, e.fs)
		got = readAll(t, e.fs, paths, size)
		if h := cacheStats(t, e.fs).Hits - s0.Hits; h != 6 || !bytes.Equal(got[4], data[4]) {
			t.Fatalf("after re-reading: %d hits, want 6", h)
		}
		// One miss: two COMPOUNDs.
		data[0] = content(200, size)
		if err := vnfs.WriteFile(ctx, o, paths[0], data[0], 0o644); err != nil {
			t.Fatal(err)
		}
		st0 = e.stats()
		if got := readAll(t, e.fs, paths, size); !bytes.Equal(got[0], data[0]) {
			t.Fatal("f0 not re-read")
		}
		if c := e.stats().Compounds - st0.Compounds; c != 2 {
			t.Fatalf("one miss: %d COMPOUNDs, want 2", c)
		}
		// Every file changed: three COMPOUNDs, not one per miss.
		for i := range data {
			data[i] = content(300+i, size/2)
		}
		ws := make([]vnfs.IO, len(paths))
		for i := range ws {
			ws[i] = vnfs.IO{File: vnfs.P(paths[i]), Data: data[i], Flags: vnfs.Truncate}
		}
		if n, err := o.VWrite(ctx, ws); err != nil || n != len(ws) {
			t.Fatal(n, err)
		}
		st0 = e.stats()
		got = readAll(t, e.fs, paths, size)
		for i := range got {
			if !bytes.Equal(got[i], data[i]) {
				t.Fatalf("%s: not the new version", paths[i])
			}
		}
		if c := e.stats().Compounds - st0.Compounds; c != 3 {
			t.Fatalf("all changed: %d COMPOUNDs, want 3", c)
		}
		// A removed file fails the item (not a miss), at its index.
		if _, err := o.VRemove(ctx, []string{paths[2]}); err != nil {
			t.Fatal(err)
		}
		ios := make([]vnfs.IO, len(paths))
		for i, p := range paths {
			ios[i] = vnfs.IO{File: vnfs.P(p), Data: make([]byte, size)}
		}
		n, err := e.fs.VRead(ctx, ios)
		var ve *vnfs.Error
		if n != 2 || !errors.As(err, &ve) || ve.Index != 2 || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("read with a removed file: n=%d err=%v, want 2 ENOENT", n, err)
		}
		if ios[3].N != 0 || !bytes.Equal(ios[1].Data[:ios[1].N], data[1]) {
			t.Fatalf("outputs: item 1 N=%d, item 3 N=%d", ios[1].N, ios[3].N)
		}
	}, withCache(8<<20))
}

// TestCacheOwnWrites checks that writes through the caching client drop
// the entries they touch and that the next read sees them.
func TestCacheOwnWrites(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if !e.nfs {
			t.Skip("no cache on local paths")
		}
		ctx := context.Background()
		p := e.dir + "/f"
		if err := vnfs.WriteFile(ctx, e.fs, p, []byte("one"), 0o644); err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"two!", "3", "four four"} {
			if got, err := vnfs.ReadFile(ctx, e.fs, p); err != nil || i > 0 && string(got) != []string{"two!", "3"}[i-1] {
				t.Fatalf("read %d: %q %v", i, got, err)
			}
			if cacheStats(t, e.fs).Entries != 1 {
				t.Fatalf("read %d not cached", i)
			}
			if err := vnfs.WriteFile(ctx, e.fs, p, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			if s := cacheStats(t, e.fs); s.Entries != 0 {
				t.Fatalf("write %d did not drop the entry: %+v", i, s)
			}
		}
		if got, err := vnfs.ReadFile(ctx, e.fs, p); err != nil || string(got) != "four four" {
			t.Fatalf("final read: %q %v", got, err)
		}
	}, withCache(1<<20))
}

// TestCacheEviction checks that the cache stays within its budget.
func TestCacheEviction(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if !e.nfs {
			t.Skip("no cache on local paths")
		}
		const size, budget = 24 << 10, 64 << 10
		data := writeFiles(t, e, e.dir, 6, size)
		var paths []string
		for i := range data {
			paths = append(paths, fmt.Sprintf("%s/f%04d", e.dir, i))
		}
		for round := 0; round < 2; round++ {
			for i, p := range paths {
				got := readAll(t, e.fs, []string{p}, size)
				if !bytes.Equal(got[0], data[i]) {
					t.Fatalf("round %d: %s differs", round, p)
				}
				if s := cacheStats(t, e.fs); s.Bytes > budget || s.Entries > 2 {
					t.Fatalf("over budget: %+v", s)
				}
			}
		}
		s := cacheStats(t, e.fs)
		if s.Evictions < 10 || s.Hits != 0 {
			t.Fatalf("LRU over 6 files of 24 KiB in 64 KiB, read in a cycle: %+v, want >= 10 evictions and no hits", s)
		}
		// The most recent file is still cached.
		readAll(t, e.fs, paths[5:], size)
		if cacheStats(t, e.fs).Hits != 1 {
			t.Fatal("most recently read file not cached")
		}
		// A file larger than the budget is never cached.
		big := content(9, budget+1)
		if err := vnfs.WriteFile(context.Background(), e.fs, e.dir+"/big", big, 0o644); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 2; k++ {
			if got := readAll(t, e.fs, []string{e.dir + "/big"}, budget+1); !bytes.Equal(got[0], big) {
				t.Fatal("big file differs")
			}
		}
		if s := cacheStats(t, e.fs); s.Hits != 1 || s.Bytes > budget {
			t.Fatalf("file larger than the budget: %+v", s)
		}
	}, withCache(64<<10))
}

// TestCacheConcurrent reads files from several goroutines through one
// caching client while another client rewrites them; every read must
// return one complete version (each version is one repeated byte), and
// after the writer stops every file reads as its last version. Run with
// -race.
func TestCacheConcurrent(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	forEach(t, func(t *testing.T, e *env) {
		if !e.nfs {
			t.Skip("no cache on local paths")
		}
		ctx := context.Background()
		o := other(t, e)
		const nfiles, size = 8, 3000
		paths := make([]string, nfiles)
		last := make([]byte, nfiles)
		for i := range paths {
			paths[i] = fmt.Sprintf("%s/c%d", e.dir, i)
			if err := vnfs.WriteFile(ctx, o, paths[i], bytes.Repeat([]byte{1}, size), 0o644); err != nil {
				t.Fatal(err)
			}
			last[i] = 1
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan error, 8)
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(g)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := 1 + r.IntN(nfiles)
					ios := make([]vnfs.IO, k)
					for j := range ios {
						ios[j] = vnfs.IO{File: vnfs.P(paths[r.IntN(nfiles)]), Data: make([]byte, size)}
					}
					if _, err := e.fs.VRead(ctx, ios); err != nil {
						errs <- err
						return
					}
					for _, io := range ios {
						if io.N != size || !bytes.Equal(io.Data, bytes.Repeat(io.Data[:1], size)) {
							errs <- fmt.Errorf("%s: torn or short read (N=%d)", io.File.Path, io.N)
							return
						}
					}
				}
			}(g)
		}
		r := rand.New(rand.NewPCG(seed, 99))
		for w := 0; w < 60; w++ {
			i := r.IntN(nfiles)
			last[i]++
			if _, err := o.VWrite(ctx, []vnfs.IO{{File: vnfs.P(paths[i]), Data: bytes.Repeat([]byte{last[i]}, size)}}); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := readAll(t, e.fs, paths, size)
		for i := range got {
			if len(got[i]) != size || got[i][0] != last[i] || got[i][size-1] != last[i] {
				t.Fatalf("%s: version %d, want %d", paths[i], got[i][0], last[i])
			}
		}
		t.Logf("%+v", cacheStats(t, e.fs))
	}, withCache(1<<20))
}
