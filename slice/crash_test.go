package slice_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

// rec is a slice a workload put, with its bytes.
type rec struct {
	p    slice.Pointer
	data []byte
}

// ledger records what a workload did: every put, and the puts whose Sync
// returned nil (in the order the Syncs returned).
type ledger struct {
	mu      sync.Mutex
	puts    []rec
	durable []rec
}

func (g *ledger) put(r rec) {
	g.mu.Lock()
	g.puts = append(g.puts, r)
	g.mu.Unlock()
}

func (g *ledger) synced(rs []rec) {
	g.mu.Lock()
	g.durable = append(g.durable, rs...)
	g.mu.Unlock()
}

func (g *ledger) snapshot() (puts, durable []rec) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]rec(nil), g.puts...), append([]rec(nil), g.durable...)
}

// workload runs writers that put random slices and sometimes sync them,
// until stop is closed or each has done ops operations. Errors are counted,
// not fatal: under fault injection they are expected.
func workload(s slice.Store, seed uint64, writers, ops int, g *ledger, stop <-chan struct{}) (errs int64) {
	var wg sync.WaitGroup
	var nerr atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			var pending []rec
			for i := range ops {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + r.IntN(20_000)
				if r.IntN(30) == 0 { // MemFS grows files byte by byte: keep few
					n = slice.MaxSize - r.IntN(1000)
				}
				d := slicetest.RandomData(seed<<32|uint64(w)<<20|uint64(i), n)
				p, err := s.Put(ctx, uint64(r.IntN(6)), d)
				if err != nil {
					nerr.Add(1)
					continue
				}
				g.put(rec{p, d})
				pending = append(pending, rec{p, d})
				if r.IntN(3) == 0 {
					ptrs := make([]slice.Pointer, len(pending))
					for j, x := range pending {
						ptrs[j] = x.p
					}
					if err := s.Sync(ctx, ptrs); err != nil {
						nerr.Add(1)
					} else {
						g.synced(pending)
					}
					pending = nil
				}
			}
		}()
	}
	wg.Wait()
	return nerr.Load()
}

// verify checks that every durable slice reads back exactly, and that
// every other put reads back exactly or fails cleanly — never wrong data.
func verify(t *testing.T, s slice.Store, puts, durable []rec) {
	t.Helper()
	for _, x := range durable {
		buf := make([]byte, x.p.Length)
		if err := s.ReadAt(ctx, x.p, 0, buf); err != nil {
			t.Fatalf("durable %v: %v", x.p, err)
		}
		if !bytes.Equal(buf, x.data) {
			t.Fatalf("durable %v: data differs", x.p)
		}
	}
	lost := 0
	for _, x := range puts {
		buf := make([]byte, x.p.Length)
		err := s.ReadAt(ctx, x.p, 0, buf)
		switch {
		case err == nil:
			if !bytes.Equal(buf, x.data) {
				t.Fatalf("%v: read succeeded with wrong data", x.p)
			}
		case errors.Is(err, slice.ErrCorrupt):
			lost++
		default:
			t.Fatalf("%v: %v, want nil or ErrCorrupt", x.p, err)
		}
	}
	t.Logf("%d puts, %d durable, %d un-synced lost", len(puts), len(durable), lost)
}

// TestCrashKeepsSyncedSlices: after a simulated crash (pebble's crashable
// MemFS keeps only synced data, plus a random share of un-synced blocks),
// every slice whose Sync returned is intact. Two generations: the store
// reopened after a crash keeps working and survives the next crash.
func TestCrashKeepsSyncedSlices(t *testing.T) {
	for seed := range uint64(3) {
		for _, unsynced := range []int{0, 50, 100} {
			t.Run(fmt.Sprintf("seed=%d/unsynced=%d%%", seed, unsynced), func(t *testing.T) {
				fs := vfs.NewCrashableMem()
				const dir = "/srv/txnfs/slices" // created by OpenLocal: parents must be synced too
				var all []rec
				var allDurable []rec
				for gen := range 2 {
					s := slice.NewCache(openLocal(t, fs, dir), 8<<20)
					if gen > 0 {
						verify(t, s, all, allDurable)
					}
					g := &ledger{}
					stop := make(chan struct{})
					done := make(chan struct{})
					go func() { workload(s, seed*10+uint64(gen), 4, 60, g, stop); close(done) }()
					// Crash while the writers run, once some syncs returned.
					var durable []rec
				wait:
					for {
						_, durable = g.snapshot()
						if len(durable) >= 20 {
							break
						}
						select {
						case <-done:
							_, durable = g.snapshot()
							break wait
						default:
							runtime.Gosched()
						}
					}
					crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(seed, 7))})
					close(stop)
					<-done
					s.Close()
					// Puts made after the snapshot may also be in the clone;
					// they are checked as "maybe lost" below.
					puts, _ := g.snapshot()
					all = append(all, puts...)
					allDurable = append(allDurable, durable...)
					fs = crashed
				}
				s := openLocal(t, fs, dir)
				defer s.Close()
				verify(t, s, all, allDurable)
			})
		}
	}
}

// TestCrashRightAfterCreate: backing files created by OpenLocal survive a
// crash (the directory is synced), so does a slice synced right away.
func TestCrashRightAfterCreate(t *testing.T) {
	fs := vfs.NewCrashableMem()
	l := openLocal(t, fs, "a/b")
	p := slicetest.MustPut(t, l, 0, []byte("hello"))
	if err := l.Sync(ctx, []slice.Pointer{p}); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	l.Close()
	l = openLocal(t, crashed, "a/b")
	defer l.Close()
	bs, _ := l.Backings(ctx)
	if len(bs) != slice.DefaultFiles {
		t.Fatalf("backings after crash: %v", bs)
	}
	if got := slicetest.MustRead(t, l, p); string(got) != "hello" {
		t.Fatalf("got %q", got)
	}
}

var errInjected = errors.New("injected I/O error")

// lossyFS models Linux after a failed fsync ("fsyncgate"): the failed
// SyncData loses the file's un-synced bytes (they read back as zeros) and
// a later SyncData succeeds without them. Sync failures are injected when
// failSync returns true.
type lossyFS struct {
	vfs.FS
	failSync func() bool
}

func (fs *lossyFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, o...)
	if err != nil {
		return nil, err
	}
	return &lossyFile{File: f, fs: fs}, nil
}

type lossyFile struct {
	vfs.File
	fs     *lossyFS
	mu     sync.Mutex
	synced int64
}

func (f *lossyFile) SyncData() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if f.fs.failSync() {
		if size > f.synced {
			f.WriteAt(make([]byte, size-f.synced), f.synced)
		}
		return errInjected
	}
	if err := f.File.SyncData(); err != nil {
		return err
	}
	f.synced = max(f.synced, size)
	return nil
}

func (f *lossyFile) Sync() error { return f.SyncData() }

func TestWriteErrorIsReturned(t *testing.T) {
	var on atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && op.Kind == errorfs.OpFileWriteAt {
			return errInjected
		}
		return nil
	})
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: errorfs.Wrap(vfs.NewMem(), inj), Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := slicetest.MustPut(t, l, 0, []byte("before"))
	on.Store(true)
	if p, err := l.Put(ctx, 0, []byte("lost")); !errors.Is(err, errInjected) {
		t.Fatalf("Put with failing write = %v, %v; want the injected error", p, err)
	}
	on.Store(false)
	b := slicetest.MustPut(t, l, 0, []byte("after"))
	if b.Offset < a.End()+4 {
		t.Fatalf("put after a failed write reuses its range: %v", b)
	}
	if err := l.Sync(ctx, []slice.Pointer{a, b}); err != nil {
		t.Fatal(err)
	}
	if string(slicetest.MustRead(t, l, b)) != "after" || string(slicetest.MustRead(t, l, a)) != "before" {
		t.Fatal("data differs")
	}
}

func TestReadErrorIsReturned(t *testing.T) {
	var on atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && op.Kind == errorfs.OpFileReadAt {
			return errInjected
		}
		return nil
	})
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: errorfs.Wrap(vfs.NewMem(), inj), Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	c := slice.NewCache(l, 1<<20)
	defer c.Close()
	p := slicetest.MustPut(t, l, 0, []byte("data")) // not through the cache
	on.Store(true)
	for _, s := range []slice.Store{l, c} {
		err := s.ReadAt(ctx, p, 0, make([]byte, 4))
		if !errors.Is(err, errInjected) || errors.Is(err, slice.ErrCorrupt) {
			t.Fatalf("ReadAt with failing read = %v; want the injected error, not ErrCorrupt", err)
		}
	}
	on.Store(false)
	if string(slicetest.MustRead(t, c, p)) != "data" { // the error was not cached
		t.Fatal("data differs")
	}
}

// TestSyncFailureIsSticky: after an fsync fails, the file's un-synced
// slices are never reported durable, even if a later fsync succeeds; bytes
// synced before the failure stay durable; puts move to healthy files.
func TestSyncFailureIsSticky(t *testing.T) {
	var fail atomic.Bool
	mem := vfs.NewCrashableMem()
	fs := &lossyFS{FS: mem, failSync: fail.Load}
	l := openLocal(t, fs, "s")
	defer l.Close()
	p0 := slicetest.MustPut(t, l, 0, []byte("synced before"))
	if err := l.Sync(ctx, []slice.Pointer{p0}); err != nil {
		t.Fatal(err)
	}
	a := slicetest.MustPut(t, l, 0, []byte("doomed"))
	fail.Store(true)
	if err := l.Sync(ctx, []slice.Pointer{a}); !errors.Is(err, errInjected) {
		t.Fatalf("Sync with failing fsync = %v", err)
	}
	fail.Store(false)
	if err := l.Sync(ctx, []slice.Pointer{a}); err == nil {
		t.Fatal("Sync after a failed fsync reported lost data durable")
	}
	if err := l.Sync(ctx, []slice.Pointer{p0}); err != nil {
		t.Fatalf("Sync of data synced before the failure: %v", err)
	}
	b := slicetest.MustPut(t, l, 0, []byte("elsewhere"))
	if b.Backing == a.Backing {
		t.Fatalf("put went to the failed backing file: %v", b)
	}
	if err := l.Sync(ctx, []slice.Pointer{b}); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	l2 := openLocal(t, crashed, "s")
	defer l2.Close()
	verify(t, l2, nil, []rec{{p0, []byte("synced before")}, {b, []byte("elsewhere")}})
}

// TestRandomFaultsThenCrash runs a concurrent workload while writes, reads
// and fsyncs fail at random (fsync failures lose data as on Linux), then
// crashes: every slice whose Sync returned nil must be intact.
func TestRandomFaultsThenCrash(t *testing.T) {
	for seed := range int64(6) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			var mu sync.Mutex
			r := rand.New(rand.NewPCG(uint64(seed), 1))
			chance := func(pct int) bool { mu.Lock(); defer mu.Unlock(); return r.IntN(100) < pct }
			var armed atomic.Bool
			fs := errorfs.Wrap(&lossyFS{FS: mem, failSync: func() bool { return armed.Load() && chance(10) }},
				errorfs.InjectorFunc(func(op errorfs.Op) error {
					if !armed.Load() {
						return nil
					}
					switch op.Kind {
					case errorfs.OpFileWriteAt, errorfs.OpFileReadAt:
						if chance(5) {
							return errInjected
						}
					}
					return nil
				}))
			l := openLocal(t, fs, "s")
			s := slice.NewCache(l, 4<<20)
			armed.Store(true)
			g := &ledger{}
			errs := workload(s, uint64(seed), 4, 40, g, nil)
			armed.Store(false)
			puts, durable := g.snapshot()
			t.Logf("seed %d: %d errors injected into the workload", seed, errs)
			if errs == 0 {
				t.Error("no errors surfaced; is injection working?")
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 30, RNG: rand.New(rand.NewPCG(uint64(seed), 2))})
			s.Close()
			l2 := openLocal(t, crashed, "s")
			defer l2.Close()
			verify(t, l2, puts, durable)
		})
	}
}
