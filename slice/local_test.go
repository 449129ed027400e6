package slice_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
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

var ctx = context.Background()

func openLocal(t testing.TB, fs vfs.FS, dir string) *slice.Local {
	t.Helper()
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fs, Dir: dir})
	if err != nil {
		t.Fatalf("OpenLocal(%s): %v", dir, err)
	}
	return l
}

func TestLocalConformanceMem(t *testing.T) {
	slicetest.Run(t, func(t *testing.T) slice.Store { return openLocal(t, vfs.NewMem(), "/data/slices") })
}

func TestLocalConformanceDisk(t *testing.T) {
	slicetest.Run(t, func(t *testing.T) slice.Store { return openLocal(t, vfs.Default, t.TempDir()) })
}

func TestCacheConformance(t *testing.T) {
	t.Run("big", func(t *testing.T) {
		slicetest.Run(t, func(t *testing.T) slice.Store {
			return slice.NewCache(openLocal(t, vfs.NewMem(), "slices"), 64<<20)
		})
	})
	// A cache smaller than one slice, and one that evicts constantly.
	t.Run("tiny", func(t *testing.T) {
		slicetest.Run(t, func(t *testing.T) slice.Store {
			return slice.NewCache(openLocal(t, vfs.NewMem(), "slices"), 100_000)
		})
	})
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []slice.LocalOptions{
		{},
		{Dir: "x", Files: -1},
		{Dir: "x", Files: slice.MaxFiles + 1},
	} {
		if _, err := slice.OpenLocal(ctx, o); err == nil {
			t.Errorf("OpenLocal(%+v) succeeded", o)
		}
	}
}

func TestBackingFilesAndLock(t *testing.T) {
	fs := vfs.NewMem()
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fs, Dir: "d", Files: 3})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := l.Backings(ctx)
	if err != nil || len(bs) != 3 {
		t.Fatalf("Backings = %v, %v; want 3", bs, err)
	}
	for i, b := range bs {
		if b.ID != uint32(i+1) || b.Size != 0 {
			t.Errorf("backing %d = %+v", i, b)
		}
		if _, err := fs.Stat(fs.PathJoin("d", slice.BackingName(b.ID))); err != nil {
			t.Errorf("backing file: %v", err)
		}
	}
	if _, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fs, Dir: "d"}); err == nil {
		t.Fatal("second OpenLocal of a locked directory succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen with fewer files: the extra one stays readable, puts use ids 1..2.
	l2, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: fs, Dir: "d", Files: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if bs, _ := l2.Backings(ctx); len(bs) != 3 {
		t.Fatalf("after reopen: %v", bs)
	}
	for h := range uint64(10) {
		if p := slicetest.MustPut(t, l2, h, []byte("x")); p.Backing > 2 {
			t.Fatalf("put went to read-only backing %v", p)
		}
	}
}

// TestReopen: synced slices survive Close and reopen; new puts go after
// the old bytes, including an un-synced garbage tail.
func TestReopen(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		dir  func(t *testing.T) string
	}{
		{"mem", vfs.NewMem(), func(*testing.T) string { return "a/b/slices" }},
		{"disk", vfs.Default, func(t *testing.T) string { return filepath.Join(t.TempDir(), "slices") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			l := openLocal(t, tc.fs, dir)
			var ptrs []slice.Pointer
			for i, n := range slicetest.Sizes {
				ptrs = append(ptrs, slicetest.MustPut(t, l, uint64(i), slicetest.RandomData(uint64(i), n)))
			}
			if err := l.Sync(ctx, ptrs); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Garbage at the end of backing 1, as a crash mid-append leaves.
			name := tc.fs.PathJoin(dir, slice.BackingName(1))
			f, err := tc.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stat()
			if _, err := f.WriteAt([]byte("garbage tail"), st.Size()); err != nil {
				t.Fatal(err)
			}
			f.Close()

			l = openLocal(t, tc.fs, dir)
			defer l.Close()
			for i, p := range ptrs {
				if got := slicetest.MustRead(t, l, p); !bytes.Equal(got, slicetest.RandomData(uint64(i), slicetest.Sizes[i])) {
					t.Fatalf("%v differs after reopen", p)
				}
			}
			p := slicetest.MustPut(t, l, 0, []byte("after reopen"))
			if p.Backing != 1 || p.Offset != uint64(st.Size())+uint64(len("garbage tail")) {
				t.Fatalf("put after reopen = %v, want backing 1 offset %d", p, st.Size()+12)
			}
			if err := l.Sync(ctx, []slice.Pointer{p}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(slicetest.MustRead(t, l, p), []byte("after reopen")) {
				t.Fatal("data differs")
			}
		})
	}
}

// TestCorruptionNeverReturnsWrongData flips single bytes in the backing file
// under a slice: every read of it is then ErrCorrupt.
func TestCorruptionNeverReturnsWrongData(t *testing.T) {
	fs := vfs.NewMem()
	l := openLocal(t, fs, "s")
	defer l.Close()
	d := slicetest.RandomData(1, 50_000)
	p := slicetest.MustPut(t, l, 0, d)
	other := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 3000))
	f, err := fs.OpenReadWrite(fs.PathJoin("s", slice.BackingName(p.Backing)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		pos := int64(p.Offset) + r.Int64N(int64(p.Length))
		var b [1]byte
		f.ReadAt(b[:], pos)
		flipped := [1]byte{b[0] ^ byte(1+r.IntN(255))}
		f.WriteAt(flipped[:], pos)
		buf := make([]byte, p.Length)
		if err := l.ReadAt(ctx, p, 0, buf); !errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("ReadAt after flipping byte %d: %v, want ErrCorrupt", pos, err)
		}
		if !bytes.Equal(buf, make([]byte, len(buf))) {
			t.Fatal("failed full read left data in the caller's buffer")
		}
		if err := l.ReadAt(ctx, p, 10, buf[:100]); !errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("partial ReadAt after flipping byte %d: %v, want ErrCorrupt", pos, err)
		}
		f.WriteAt(b[:], pos)
		if got := slicetest.MustRead(t, l, p); !bytes.Equal(got, d) {
			t.Fatal("data differs after restoring the byte")
		}
	}
	if got := slicetest.MustRead(t, l, other); !bytes.Equal(got, slicetest.RandomData(2, 3000)) {
		t.Fatal("neighbour differs")
	}
	if l.Stats().Corrupt != 100 {
		t.Errorf("Stats().Corrupt = %d, want 100", l.Stats().Corrupt)
	}
}

// TestTruncatedBacking: a backing file cut short (while open and across
// reopen) makes the slices past the cut ErrCorrupt.
func TestTruncatedBacking(t *testing.T) {
	dir := t.TempDir()
	l := openLocal(t, vfs.Default, dir)
	a := slicetest.MustPut(t, l, 0, slicetest.RandomData(1, 10_000))
	b := slicetest.MustPut(t, l, 0, slicetest.RandomData(2, 10_000))
	if err := l.Sync(ctx, []slice.Pointer{a, b}); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, slice.BackingName(a.Backing))
	if err := os.Truncate(name, int64(b.Offset+100)); err != nil {
		t.Fatal(err)
	}
	check := func(l slice.Store) {
		t.Helper()
		slicetest.MustRead(t, l, a)
		if err := l.ReadAt(ctx, b, 0, make([]byte, b.Length)); !errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("ReadAt(truncated %v) = %v, want ErrCorrupt", b, err)
		}
		if err := l.ReadAt(ctx, b, 0, make([]byte, 10)); !errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("partial ReadAt(truncated %v) = %v, want ErrCorrupt", b, err)
		}
	}
	check(l)
	l.Close()
	l = openLocal(t, vfs.Default, dir)
	defer l.Close()
	check(l)
	check(slice.NewCache(l, 1<<20))
}

// TestGroupCommit: Syncs that arrive while an fsync is in flight share the
// next one. The first fsync is held until every caller is inside Sync.
func TestGroupCommit(t *testing.T) {
	const n = 32
	var fsyncs atomic.Int64
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var first sync.Once
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSync {
			if filepath.Ext(op.Path) == ".dat" {
				fsyncs.Add(1)
				first.Do(func() { entered <- struct{}{}; <-gate })
			}
		}
		return nil
	})
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: errorfs.Wrap(vfs.NewMem(), inj), Dir: "s", Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	p0 := slicetest.MustPut(t, l, 0, []byte("first"))
	errc := make(chan error, n)
	go func() { errc <- l.Sync(ctx, []slice.Pointer{p0}) }()
	<-entered // fsync #1 is running and covers only p0
	// Puts are not blocked by the running fsync.
	ptrs := make([]slice.Pointer, n-1)
	for i := range ptrs {
		ptrs[i] = slicetest.MustPut(t, l, 0, slicetest.RandomData(uint64(i), 1000))
	}
	for _, p := range ptrs {
		go func() { errc <- l.Sync(ctx, []slice.Pointer{p}) }()
	}
	for l.Stats().Syncs < n {
		// Wait for every caller to be inside Sync; fsync #1 is still held.
		runtime.Gosched()
	}
	close(gate)
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d concurrent Syncs, %d fsyncs", n, fsyncs.Load())
	// #1 covers p0 only; every later caller needs bytes written after #1
	// started, and the first to ask starts #2, which covers them all.
	if got := fsyncs.Load(); got != 2 {
		t.Fatalf("%d Syncs did %d fsyncs; want 2 (group commit)", n, got)
	}
	if got := l.Stats().Fsyncs; got != uint64(fsyncs.Load()) {
		t.Errorf("Stats().Fsyncs = %d, counted %d", got, fsyncs.Load())
	}
	// Everything is durable now: syncing again costs nothing.
	before := fsyncs.Load()
	if err := l.Sync(ctx, append(ptrs, p0)); err != nil || fsyncs.Load() != before {
		t.Fatalf("re-Sync: %v, %d extra fsyncs", err, fsyncs.Load()-before)
	}
}

// TestSyncParallelFiles: one Sync over slices in several backing files
// waits for all of them and fsyncs each once.
func TestSyncParallelFiles(t *testing.T) {
	var fsyncs atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncData && filepath.Ext(op.Path) == ".dat" {
			fsyncs.Add(1)
		}
		return nil
	})
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: errorfs.Wrap(vfs.NewMem(), inj), Dir: "s", Files: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ptrs []slice.Pointer
	for h := range uint64(12) {
		ptrs = append(ptrs, slicetest.MustPut(t, l, h, []byte("data")))
	}
	if err := l.Sync(ctx, ptrs); err != nil {
		t.Fatal(err)
	}
	if fsyncs.Load() != 4 {
		t.Fatalf("fsyncs = %d, want 4 (one per backing file)", fsyncs.Load())
	}
}

// TestLocalConformanceDiskDirect runs the suite with every put of more than
// 9000 bytes written with O_DIRECT (where the file system allows it).
func TestLocalConformanceDiskDirect(t *testing.T) {
	slicetest.Run(t, func(t *testing.T) slice.Store {
		l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.Default, Dir: t.TempDir(), DirectMin: 9001})
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
