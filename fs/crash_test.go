package fs_test

// Crash tests: a workload of transactions, each of which changes a group
// of files, directories and a log so that every part names the
// transaction, runs in a subprocess killed with SIGKILL at random moments,
// and on a crashable in-memory disk cloned at random moments (keeping only
// synced data). After each crash the data directory must reopen with a
// clean fsck, every transaction reported committed must be there whole,
// and no part of any other transaction may be visible.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

const crashGroupFiles = 4

// crashData is file j's content as written by transaction id: a header
// naming both, then a pattern; sizes vary from inline to several slices.
func crashData(id uint64, j int) []byte {
	size := 20 + int((id*7919+uint64(j)*104729)%(300<<10))
	if (id+uint64(j))%3 == 0 {
		size %= 3000 // often small: inline data
	}
	hdr := fmt.Sprintf("id=%d j=%d;", id, j)
	return append([]byte(hdr), pattern(byte(id*13+uint64(j)), max(size, 1))...)
}

func crashLogRecord(id uint64) []byte { return []byte(fmt.Sprintf("L%015d\n", id)) }

// crashTxn runs transaction id of worker w: it rewrites the group files,
// copies f1 to c (metadata only), concatenates f0 and f2 into cat, appends
// to the log, replaces the marker file and renames the marker directory.
func crashTxn(ctx context.Context, f *fs.FS, w int, id uint64) error {
	return crashTxnOpts(ctx, f, fs.TxnOptions{}, w, id)
}

// crashTxnOpts is crashTxn committed with opts (e.g. NoSync).
func crashTxnOpts(ctx context.Context, f *fs.FS, opts fs.TxnOptions, w int, id uint64) error {
	return f.DoOpts(ctx, fs.RootCred, opts, func(tx *fs.Txn) error {
		name := fmt.Sprintf("w%d", w)
		d, err := tx.Lookup(ctx, fs.RootIno, name)
		if errors.Is(err, fs.ErrNotExist) {
			if id != 1 {
				return fmt.Errorf("worker %d: directory missing before txn %d", w, id)
			}
			if d, _, err = tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755}); err != nil {
				return err
			}
			if _, _, err = tx.Create(ctx, d.Ino, "sub-0", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755}); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		file := func(n string) (fs.Ino, error) {
			a, _, err := tx.Create(ctx, d.Ino, n, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
			return a.Ino, err
		}
		var inos [crashGroupFiles]fs.Ino
		for j := range inos {
			if inos[j], err = file(fmt.Sprintf("f%d", j)); err != nil {
				return err
			}
			if err := overwrite(ctx, tx, inos[j], crashData(id, j)); err != nil {
				return err
			}
		}
		c, err := file("c")
		if err != nil {
			return err
		}
		if err := tx.Copy(ctx, inos[1], c); err != nil {
			return err
		}
		cat, err := file("cat")
		if err != nil {
			return err
		}
		if err := tx.Concat(ctx, cat, []fs.Ino{inos[0], inos[2]}); err != nil {
			return err
		}
		lg, err := file("log")
		if err != nil {
			return err
		}
		if _, err := tx.Append(ctx, lg, crashLogRecord(id)); err != nil {
			return err
		}
		if id > 1 {
			if err := tx.Unlink(ctx, d.Ino, fmt.Sprintf("m-%d", id-1)); err != nil {
				return err
			}
		}
		if _, _, err := tx.Create(ctx, d.Ino, fmt.Sprintf("m-%d", id), fs.CreateRequest{Type: fs.TypeRegular, Exclusive: true}); err != nil {
			return err
		}
		return tx.Rename(ctx, d.Ino, fmt.Sprintf("sub-%d", id-1), d.Ino, fmt.Sprintf("sub-%d", id), fs.RenameFlags{NoReplace: true})
	})
}

// crashVerify checks worker w's group and returns the id of the last
// transaction it holds (0: none).
func crashVerify(ctx context.Context, f *fs.FS, w int) (uint64, error) {
	var id uint64
	err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		d, err := tx.Lookup(ctx, fs.RootIno, fmt.Sprintf("w%d", w))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		ents, err := readDirAll(ctx, tx, d.Ino, 0)
		if err != nil {
			return err
		}
		var markers, subs []string
		for _, e := range ents {
			if s, ok := strings.CutPrefix(e.Name, "m-"); ok {
				markers = append(markers, s)
			}
			if s, ok := strings.CutPrefix(e.Name, "sub-"); ok {
				subs = append(subs, s)
			}
		}
		if len(markers) != 1 || len(subs) != 1 || markers[0] != subs[0] {
			return fmt.Errorf("worker %d: markers %v and marker dirs %v: partial transaction", w, markers, subs)
		}
		if id, err = strconv.ParseUint(markers[0], 10, 64); err != nil || id == 0 {
			return fmt.Errorf("worker %d: bad marker %q", w, markers[0])
		}
		read := func(name string) ([]byte, error) {
			a, err := tx.Lookup(ctx, d.Ino, name)
			if err != nil {
				return nil, fmt.Errorf("worker %d txn %d: %s: %w", w, id, name, err)
			}
			return readFile(ctx, tx, a.Ino)
		}
		var group [crashGroupFiles][]byte
		for j := range group {
			if group[j], err = read(fmt.Sprintf("f%d", j)); err != nil {
				return err
			}
			if want := crashData(id, j); !bytes.Equal(group[j], want) {
				return fmt.Errorf("worker %d: marker says txn %d but f%d holds %.30q (%d bytes, want %d)", w, id, j,
					group[j], len(group[j]), len(want))
			}
		}
		c, err := read("c")
		if err != nil {
			return err
		}
		if !bytes.Equal(c, group[1]) {
			return fmt.Errorf("worker %d txn %d: copy differs from its source", w, id)
		}
		cat, err := read("cat")
		if err != nil {
			return err
		}
		if !bytes.Equal(cat, append(bytes.Clone(group[0]), group[2]...)) {
			return fmt.Errorf("worker %d txn %d: concat differs from its sources", w, id)
		}
		lg, err := read("log")
		if err != nil {
			return err
		}
		var want []byte
		for i := uint64(1); i <= id; i++ {
			want = append(want, crashLogRecord(i)...)
		}
		if !bytes.Equal(lg, want) {
			return fmt.Errorf("worker %d txn %d: log holds %d bytes %.40q..., want records 1..%d", w, id, len(lg), lg, id)
		}
		return nil
	})
	return id, err
}

// TestCrashChild is the workload process of TestCrashKill9; it does
// nothing unless TXNFS_CRASH_DIR is set. It prints "open" once the data
// directory is open and "commit W ID" after each commit returns. With
// TXNFS_CRASH_NOSYNC=1 it commits with NoSync, calls FS.Sync after every
// few commits and prints "synced W ID" when a Sync returned that followed
// the commit of ID.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("TXNFS_CRASH_DIR")
	if dir == "" {
		t.Skip("the workload process of TestCrashKill9")
	}
	workers, _ := strconv.Atoi(os.Getenv("TXNFS_CRASH_WORKERS"))
	noSync := os.Getenv("TXNFS_CRASH_NOSYNC") == "1"
	ctx := context.Background()
	e, err := datadir.Open(ctx, datadir.Options{Dir: dir, CacheBytes: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		mu.Unlock()
	}
	say("open")
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		last, err := crashVerify(ctx, e.FS, w)
		if err != nil {
			fmt.Fprintln(os.Stderr, "verify at start:", err)
			os.Exit(2)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := last + 1; id < last+100000; id++ {
				if err := crashTxnOpts(ctx, e.FS, fs.TxnOptions{NoSync: noSync}, w, id); err != nil {
					fmt.Fprintf(os.Stderr, "worker %d txn %d: %v\n", w, id, err)
					os.Exit(2)
				}
				say("commit %d %d", w, id)
				if noSync && id%3 == 0 {
					if err := e.FS.Sync(ctx); err != nil {
						fmt.Fprintf(os.Stderr, "worker %d sync after txn %d: %v\n", w, id, err)
						os.Exit(2)
					}
					say("synced %d %d", w, id)
				}
				if w == 0 && id%7 == 0 {
					if _, err := e.FS.CollectGarbage(ctx); err != nil {
						fmt.Fprintf(os.Stderr, "gc: %v\n", err)
						os.Exit(2)
					}
				}
			}
		}()
	}
	wg.Wait()
	os.Exit(3) // the parent kills us long before
}

// TestCrashKill9 kills the workload process with SIGKILL at random
// moments (after a random number of reported commits, or at once, which
// often lands in the middle of opening the previous crash's directory),
// then checks the directory in-process.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXNFS_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("TXNFS_CRASH_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	const workers = 3
	ctx := context.Background()
	reported := make([]uint64, workers) // highest id reported committed
	synced := make([]uint64, workers)   // highest id reported durable
	iterations := scale(20, 200)
	for it := 0; it < iterations; it++ {
		waitFor := rng.IntN(40) - 5 // < 0: kill right after start
		noSync := it%2 == 1         // odd iterations: NoSync commits + Sync
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), "TXNFS_CRASH_DIR="+dir, "TXNFS_CRASH_WORKERS="+strconv.Itoa(workers),
			fmt.Sprintf("TXNFS_CRASH_NOSYNC=%d", map[bool]int{false: 0, true: 1}[noSync]))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		commits := 0
		handle := func(line string) {
			var w int
			var id uint64
			if _, err := fmt.Sscanf(line, "commit %d %d", &w, &id); err == nil {
				reported[w] = max(reported[w], id)
				if !noSync {
					synced[w] = max(synced[w], id)
				}
				commits++
			} else if _, err := fmt.Sscanf(line, "synced %d %d", &w, &id); err == nil {
				synced[w] = max(synced[w], id)
			}
		}
		if waitFor >= 0 {
			for commits < waitFor && sc.Scan() {
				handle(sc.Text())
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() { // lines written before the kill
			handle(sc.Text())
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("iteration %d: workload process ended by itself (%v):\n%s", it, err, stderr.String())
		}

		e, err := datadir.Open(ctx, datadir.Options{Dir: dir, CacheBytes: -1})
		if err != nil {
			t.Fatalf("seed %d iteration %d: reopening after kill -9: %v", seed, it, err)
		}
		rep, err := e.FS.Check(ctx)
		if err != nil || !rep.OK() {
			e.Close()
			t.Fatalf("seed %d iteration %d: fsck after kill -9: %v\n%s", seed, it, err, joinLines(rep.Problems, 20))
		}
		for w := 0; w < workers; w++ {
			got, err := crashVerify(ctx, e.FS, w)
			if err != nil {
				e.Close()
				t.Fatalf("seed %d iteration %d: %v", seed, it, err)
			}
			if got < synced[w] || got > reported[w]+1 {
				e.Close()
				t.Fatalf("seed %d iteration %d (nosync=%v): worker %d holds txn %d, but txn %d was reported committed, %d durable",
					seed, it, noSync, w, got, reported[w], synced[w])
			}
			reported[w], synced[w] = got, got
		}
		if err := e.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		t.Logf("iteration %d (nosync=%v): killed after %d commits (waited for %d); state %v", it, noSync, commits, waitFor, reported)
	}
}

// TestCrashCloneMem runs the workload in-process on a crashable in-memory
// disk and takes crash clones at random moments, keeping only synced data
// (and, in some rounds, a random part of the unsynced data, as a disk
// might). Every transaction whose commit returned before the clone must be
// in it, whole. In the nosync variant the workers commit with NoSync and
// call FS.Sync after every fifth commit: every commit a returned Sync
// covered must be in the clone, later ones whole or absent. The garbage
// collector runs all the time, so freeing what only a lost NoSync commit
// had unreferenced would show as corrupt data.
func TestCrashCloneMem(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("nosync=%v", noSync), func(t *testing.T) { crashCloneMem(t, noSync, 0, 0) })
	}
	// A tiny metadata log buffer: log bytes reach the OS (and so the
	// clone's random unsynced data) between syncs, after slice flushes.
	t.Run("nosync=true/logbuffer=4KiB", func(t *testing.T) { crashCloneMem(t, true, 4<<10, 0) })
	// Every put (not only those of 64 KiB or more) takes freed space
	// from the reuse pool when it can: puts land below the files'
	// synced watermarks, in ranges the collector recycled.
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("nosync=%v/reuse-all", noSync), func(t *testing.T) { crashCloneMem(t, noSync, 0, 1) })
	}
}

func crashCloneMem(t *testing.T, noSync bool, logBuffer, reuseMin int) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXNFS_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("TXNFS_CRASH_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	const workers = 3
	mem := vfs.NewCrashableMem()
	// The data directory is made by an administrator and synced, so that
	// this test does not trip over TestCrashCloneFreshDir's bug.
	if err := mem.MkdirAll("data", 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mem, "/")
	var committed, durable [workers]atomic.Uint64
	var reusePuts uint64
	defer func() {
		t.Logf("%d puts reused freed space", reusePuts)
		if reuseMin > 0 && reusePuts == 0 && !t.Failed() {
			t.Error("no put reused freed space: the reuse variant tested nothing")
		}
	}()
	for round := 0; round < scale(8, 60); round++ {
		e, err := datadir.Open(ctx, datadir.Options{Dir: "data", FS: mem, CacheBytes: -1, LogBufferBytes: logBuffer, SliceReuseMin: reuseMin})
		if err != nil {
			t.Fatalf("seed %d round %d: open: %v", seed, round, err)
		}
		for w := 0; w < workers; w++ {
			got, err := crashVerify(ctx, e.FS, w)
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			committed[w].Store(got)
			durable[w].Store(got)
		}
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var total atomic.Int64
		progress := make(chan struct{}, 1000)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := committed[w].Load() + 1; runCtx.Err() == nil; id++ {
					if err := crashTxnOpts(runCtx, e.FS, fs.TxnOptions{NoSync: noSync}, w, id); err != nil {
						if runCtx.Err() == nil {
							t.Errorf("worker %d txn %d: %v", w, id, err)
						}
						return
					}
					committed[w].Store(id)
					if !noSync {
						durable[w].Store(id)
					} else if id%5 == 0 {
						if err := e.FS.Sync(runCtx); err != nil {
							if runCtx.Err() == nil {
								t.Errorf("worker %d: sync after txn %d: %v", w, id, err)
							}
							return
						}
						durable[w].Store(id)
					}

					total.Add(1)
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // the collector, all the time
			defer wg.Done()
			for runCtx.Err() == nil {
				if _, err := e.FS.CollectGarbage(runCtx); err != nil && runCtx.Err() == nil {
					t.Errorf("gc: %v", err)
					return
				}
			}
		}()
		for n := rng.IntN(30); n > 0; n-- {
			<-progress
		}
		var before [workers]uint64
		for w := range before {
			before[w] = durable[w].Load()
		}
		cfg := vfs.CrashCloneCfg{}
		if rng.IntN(2) == 0 {
			cfg.UnsyncedDataPercent = 1 + rng.IntN(99)
			cfg.RNG = rand.New(rand.NewPCG(rng.Uint64(), 2))
		}
		clone := mem.CrashClone(cfg)
		var after [workers]uint64
		for w := range after {
			after[w] = committed[w].Load()
		}
		cancel()
		wg.Wait()
		reusePuts += e.Slices.(*slice.Local).Stats().ReusePuts
		e.Close()
		if t.Failed() {
			t.FailNow()
		}

		mem = clone
		e, err = datadir.Open(ctx, datadir.Options{Dir: "data", FS: mem, CacheBytes: -1, LogBufferBytes: logBuffer, SliceReuseMin: reuseMin})
		if err != nil {
			t.Fatalf("seed %d round %d: reopening the crash clone: %v", seed, round, err)
		}
		rep, err := e.FS.Check(ctx)
		if err != nil || !rep.OK() {
			t.Fatalf("seed %d round %d: fsck of the crash clone: %v\n%s", seed, round, err, joinLines(rep.Problems, 20))
		}
		for w := 0; w < workers; w++ {
			got, err := crashVerify(ctx, e.FS, w)
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			if got < before[w] || got > after[w]+1 {
				t.Fatalf("seed %d round %d: worker %d holds txn %d; committed before the crash: %d, by its end: %d",
					seed, round, w, got, before[w], after[w])
			}
		}
		t.Logf("round %d: %d commits, clone %+v: before %v after %v", round, total.Load(), cfg.UnsyncedDataPercent, before, after)
		e.Close()
	}
}

func syncDir(t *testing.T, fsys vfs.FS, dir string) {
	t.Helper()
	d, err := fsys.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// TestCrashCloneFreshDir: transactions committed in a data directory that
// datadir.Open created must survive a power loss, which needs the new
// directory's entry in its parent synced.
func TestCrashCloneFreshDir(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	e, err := datadir.Open(ctx, datadir.Options{Dir: "data", FS: mem, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if err := crashTxn(ctx, e.FS, 0, id); err != nil {
			t.Fatal(err)
		}
	}
	clone := mem.CrashClone(vfs.CrashCloneCfg{})
	cloned := clone.String()
	e.Close()
	e, err = datadir.Open(ctx, datadir.Options{Dir: "data", FS: clone, CacheBytes: -1})
	if err != nil {
		t.Fatalf("reopening after power loss: %v", err)
	}
	defer e.Close()
	got, err := crashVerify(ctx, e.FS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 {
		t.Fatalf("BUG: after power loss the data directory holds txn %d of 3 committed; the crash clone holds:\n%s"+
			"(datadir.Open creates Dir without syncing its parent directory)", got, cloned)
	}
}

// TestOrphans: a file unlinked while pinned (open) stays readable, its
// data survives garbage collection, and it is reclaimed by the last Unpin
// or, after a crash, by the next Open.
func TestOrphans(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"unpin", "restart"} {
		t.Run(how, func(t *testing.T) {
			f := newTestFS(t, fsOpts{inlineMax: -1})
			data := pattern(5, 200_000)
			var ino fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "open", fs.CreateRequest{Type: fs.TypeRegular})
				ino = a.Ino
				if err != nil {
					return err
				}
				return tx.Write(ctx, ino, 0, data)
			})
			f.Pin(ino)
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, "open") })
			for i := 0; i < 2; i++ {
				if _, err := f.CollectGarbage(ctx); err != nil {
					t.Fatal(err)
				}
			}
			err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				a, err := tx.GetAttr(ctx, ino)
				if err != nil {
					return err
				}
				if a.Nlink != 0 {
					return fmt.Errorf("orphan has nlink %d", a.Nlink)
				}
				got, err := readAll(ctx, tx, ino, a.Size)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, data) {
					return fmt.Errorf("orphan's data changed")
				}
				return nil
			})
			if err != nil {
				t.Fatalf("pinned orphan after GC: %v", err)
			}
			// Writes to an open unlinked file work too.
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, 0, []byte("still open")) })
			requireCheckClean(t, f.FS)

			fsys := f.FS
			if how == "unpin" {
				if err := f.Unpin(ctx, ino); err != nil {
					t.Fatal(err)
				}
			} else {
				// Crash: the pin is lost with the process.
				if fsys, err = fs.Open(ctx, fs.Config{KV: f.KV, Slices: f.Slices}); err != nil {
					t.Fatal(err)
				}
			}
			err = fsys.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				_, err := tx.GetAttr(ctx, ino)
				return err
			})
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("orphan after %s: %v, want ErrNotExist", how, err)
			}
			rep, err := fsys.Check(ctx)
			if err != nil || !rep.OK() || rep.Orphans != 0 {
				t.Fatalf("Check after %s: %v %+v", how, err, rep)
			}
			var freed uint64
			for i := 0; i < 2; i++ {
				r, err := fsys.CollectGarbage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				freed += r.FreedBytes
			}
			if freed < uint64(len(data)) {
				t.Errorf("GC freed %d bytes of a reclaimed %d-byte orphan", freed, len(data))
			}
		})
	}
}

// TestGCKeepsSnapshotData: a transaction reads from the snapshot it began
// with, so data it can see must not be freed, even after another
// transaction removed the last reference to it and two collections ran.
// (Found by TestModel, -rapid.seed=949328838786759763.)
func TestGCKeepsSnapshotData(t *testing.T) {
	ctx := context.Background()
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("slice-written-before-first-scan=%v", early), func(t *testing.T) {
			f := newTestFS(t, fsOpts{inlineMax: -1})
			data := pattern(3, 3000)
			var ino fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "a", fs.CreateRequest{Type: fs.TypeRegular})
				ino = a.Ino
				return err
			})
			gc := func() {
				t.Helper()
				if _, err := f.CollectGarbage(ctx); err != nil {
					t.Fatal(err)
				}
			}
			w, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(ctx, ino, 0, data); err != nil {
				t.Fatal(err)
			}
			if early {
				// The slice is written, not yet committed, when the
				// collector scans.
				gc()
				gc()
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			reader, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Abort()
			if _, err := reader.GetAttr(ctx, ino); err != nil { // takes the snapshot
				t.Fatal(err)
			}
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, "a") })
			gc()
			gc()
			buf := make([]byte, len(data))
			n, _, err := reader.Read(ctx, ino, 0, buf)
			if err != nil || !bytes.Equal(buf[:n], data) {
				t.Fatalf("BUG: a running transaction's snapshot lost its data to the collector: read %d bytes, %v", n, err)
			}
		})
	}
}
