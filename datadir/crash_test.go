//go:build linux

package datadir

// Kill -9 test of direct (O_DIRECT, asynchronous) slice puts: a workload
// process rewrites whole files of 256 KiB–4 MiB (mixed with small ones)
// through the engine on the real disk, with durable and NoSync commits
// plus FS.Sync, and reports every acknowledged durable point; the parent
// SIGKILLs it at random moments, reopens, runs fsck and checks that every
// file holds exactly one complete version, no older than the last one
// acknowledged durable. fs/crash_test.go's TestCrashKill9 does the same
// for transactions of small files (its helpers are in another package's
// test files, hence not shared).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

const directCrashFiles = 4 // files per worker

// directCrashMode is one variant of the workload.
type directCrashMode struct {
	name    string
	workers int
	// small is the share (of 10) of small writes (1 B–64 KiB).
	small int
	// syncPct is the share (of 100) of durable commits; the others are
	// NoSync, followed by an FS.Sync every third one of a worker.
	syncPct int
	// covered opens with Options.Covered (large puts into reused space
	// skip their fdatasync; Open checks their descriptors).
	covered bool
}

var directCrashModes = map[string]directCrashMode{
	// Mixed sizes, durable and NoSync commits.
	"mixed": {name: "mixed", workers: 3, small: 3, syncPct: 40},
	// Many concurrent large puts with NoSync commits: Put returns while
	// the direct write runs, so kills land with writes in flight.
	"inflight": {name: "inflight", workers: 8, small: 0, syncPct: 10},
	// "mixed" with covered puts: a kill loses no completed direct write,
	// so Open finds no damage; it may cut commits that pledged a write
	// not yet begun (never acknowledged).
	"covered": {name: "covered", workers: 3, small: 3, syncPct: 40, covered: true},
}

// crashVersion is file (w, k)'s content at version v of n bytes: a header
// naming all four, then words that differ at every offset and version.
func crashVersion(w, k int, v uint64, n int) []byte {
	hdr := fmt.Appendf(nil, "w=%d k=%d v=%d n=%d;", w, k, v, n)
	b := make([]byte, max(n, len(hdr)))
	x := v*0x9e3779b97f4a7c15 ^ uint64(w)<<56 ^ uint64(k)<<48
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x+uint64(i))
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(x) + byte(i)
	}
	copy(b, hdr)
	return b
}

// parseCrashVersion returns the version and size a file's header names.
func parseCrashVersion(data []byte, w, k int) (v uint64, n int, err error) {
	var gw, gk int
	end := bytes.IndexByte(data, ';')
	if end < 0 {
		return 0, 0, fmt.Errorf("no header in %d bytes %.40q", len(data), data)
	}
	if _, err := fmt.Sscanf(string(data[:end]), "w=%d k=%d v=%d n=%d", &gw, &gk, &v, &n); err != nil || gw != w || gk != k {
		return 0, 0, fmt.Errorf("bad header %.60q (%v)", data[:end], err)
	}
	return v, n, nil
}

func crashFileName(w, k int) string { return fmt.Sprintf("w%d-f%d", w, k) }

// crashSize picks the size of a new version.
func crashSize(r *rand.Rand, m directCrashMode) int {
	if r.IntN(10) < m.small {
		return 1 + r.IntN(64<<10)
	}
	if m.small == 0 {
		return 1<<20 + r.IntN(3<<20) // 1–4 MiB
	}
	return 256<<10 + r.IntN(4<<20-256<<10) // 256 KiB–4 MiB
}

// writeCrashVersion replaces file (w, k) with a new version in one
// transaction: truncate, then the second half, then the first (slices land
// out of file order).
func writeCrashVersion(ctx context.Context, e *Engine, noSync bool, w, k int, data []byte) error {
	return e.FS.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: noSync}, func(tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, crashFileName(w, k), fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		zero := uint64(0)
		if _, err := tx.SetAttr(ctx, a.Ino, fs.SetAttr{Size: &zero}); err != nil {
			return err
		}
		h := len(data) / 2
		if err := tx.Write(ctx, a.Ino, uint64(h), data[h:]); err != nil {
			return err
		}
		if h == 0 {
			return nil
		}
		return tx.Write(ctx, a.Ino, 0, data[:h])
	})
}

// readCrashFile returns file (w, k)'s content, or nil, false if it does
// not exist.
func readCrashFile(ctx context.Context, e *Engine, w, k int) ([]byte, bool, error) {
	var data []byte
	found := true
	err := e.FS.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, err := tx.Lookup(ctx, fs.RootIno, crashFileName(w, k))
		if errors.Is(err, fs.ErrNotExist) {
			found = false
			return nil
		} else if err != nil {
			return err
		}
		data = make([]byte, a.Size)
		for off := 0; off < len(data); {
			n, eof, err := tx.Read(ctx, a.Ino, uint64(off), data[off:])
			if err != nil {
				return err
			}
			off += n
			if n == 0 || eof && off < len(data) {
				return fmt.Errorf("short read: %d of %d bytes", off, len(data))
			}
		}
		return nil
	})
	return data, found, err
}

// TestDirectCrashChild is the workload process of TestDirectCrashKill9; it
// does nothing unless TXNFS_DCRASH_DIR is set. Output lines:
//
//	open                  the data directory is open
//	durable W K V         a durable commit of version V of file (W, K) returned
//	commit W K V          a NoSync commit returned
//	synced W              an FS.Sync by worker W returned (its commits before are durable)
//	stats DIRECT INFLIGHT DESCRIBED
//	                      direct puts so far, direct writes in flight now, and
//	                      (covered mode) covered-put descriptors in the store
func TestDirectCrashChild(t *testing.T) {
	dir := os.Getenv("TXNFS_DCRASH_DIR")
	if dir == "" {
		t.Skip("the workload process of TestDirectCrashKill9")
	}
	m := directCrashModes[os.Getenv("TXNFS_DCRASH_MODE")]
	gen, err1 := strconv.ParseUint(os.Getenv("TXNFS_DCRASH_GEN"), 10, 32)
	seed, err2 := strconv.ParseUint(os.Getenv("TXNFS_DCRASH_SEED"), 10, 64)
	if m.workers == 0 || err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "bad TXNFS_DCRASH_MODE, _GEN or _SEED")
		os.Exit(2)
	}
	ctx := context.Background()
	e, err := Open(ctx, Options{Dir: dir, CacheBytes: -1, Covered: m.covered})
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
	fail := func(format string, args ...any) {
		mu.Lock() // no further lines
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(2)
	}
	say("open")
	go func() { // sample the direct writes in flight and the descriptors
		var last slice.LocalStats
		described, lastDescribed := 0, 0
		for i := 0; ; i++ {
			st := e.local.Stats()
			if m.covered && i%4 == 0 {
				n, err := coveredDescriptors(ctx, e)
				if err != nil {
					fail("descriptors: %v", err)
				}
				described = n
			}
			if st.DirectInFlight > 0 || st.DirectPuts != last.DirectPuts || described != lastDescribed || i%100 == 0 {
				say("stats %d %d %d", st.DirectPuts, st.DirectInFlight, described)
			}
			last, lastDescribed = st, described
			time.Sleep(500 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for w := range m.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, gen<<8|uint64(w)))
			nosyncs := 0
			for i := uint64(1); i < 1<<20; i++ {
				k := r.IntN(directCrashFiles)
				v := gen<<32 | i
				noSync := r.IntN(100) >= m.syncPct
				if err := writeCrashVersion(ctx, e, noSync, w, k, crashVersion(w, k, v, crashSize(r, m))); err != nil {
					fail("worker %d file %d version %d: %v", w, k, v, err)
				}
				if !noSync {
					say("durable %d %d %d", w, k, v)
				} else {
					say("commit %d %d %d", w, k, v)
					if nosyncs++; nosyncs%3 == 0 {
						if err := e.FS.Sync(ctx); err != nil {
							fail("worker %d sync: %v", w, err)
						}
						say("synced %d", w)
					}
				}
				if w == 0 && i%10 == 0 {
					if _, err := e.FS.CollectGarbage(ctx); err != nil {
						fail("gc: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	os.Exit(3) // the parent kills us long before
}

// directWorks reports whether the file system under dir takes O_DIRECT
// writes of 4 KiB-aligned buffers (asked of the OS, not of the slice
// store, so that a store that stopped writing direct fails the test
// instead of skipping it).
func directWorks(t *testing.T, dir string) bool {
	fd, err := unix.Open(filepath.Join(dir, "probe"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT, 0o644)
	if err != nil {
		t.Logf("open O_DIRECT: %v", err)
		return false
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // page-aligned
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		t.Logf("O_DIRECT write: %v", err)
		return false
	}
	return true
}

// TestDirectCrashKill9 kills the workload of TestDirectCrashChild with
// SIGKILL at random moments (seeded; TXNFS_CRASH_SEED reruns a seed):
// after a random number of acknowledged commits ("mixed"), or while the
// child reports direct writes in flight ("inflight"), or, with covered
// puts ("covered"), at the first moment after a random number of commits
// when the child reports covered-put descriptors in the store (the
// collector deletes them, so most moments have none). After each kill the
// data directory must reopen, pass fsck, and every file must hold exactly
// one complete version, no older than the last acknowledged durable one.
// Each variant runs for TXNFS_DCRASH_SECONDS (default 20; then at least
// 2 iterations) or 60 iterations (unbounded if TXNFS_DCRASH_SECONDS is
// set), whichever ends first. The test fails if no put went direct
// although the file system takes O_DIRECT, and skips if it does not.
func TestDirectCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	if !directWorks(t, t.TempDir()) {
		t.Skipf("the file system under %s refuses O_DIRECT", os.TempDir())
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXNFS_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	budget := 20 * time.Second
	iterations := 60
	if s := os.Getenv("TXNFS_DCRASH_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("bad TXNFS_DCRASH_SECONDS %q", s)
		}
		budget, iterations = time.Duration(n)*time.Second, 100000
	}
	for _, name := range []string{"mixed", "inflight", "covered"} {
		t.Run(name, func(t *testing.T) {
			t.Logf("TXNFS_CRASH_SEED=%d", seed)
			b := budget
			if name == "covered" && os.Getenv("TXNFS_DCRASH_SECONDS") == "" {
				b = 10 * time.Second
			}
			directCrashKill9(t, directCrashModes[name], seed, b, iterations)
		})
	}
}

func directCrashKill9(t *testing.T, m directCrashMode, seed uint64, budget time.Duration, iterations int) {
	rng := rand.New(rand.NewPCG(seed, uint64(len(m.name))))
	dir := t.TempDir()
	ctx := context.Background()
	// durable[w][k] is the last version of file (w, k) acknowledged
	// durable (or found after a kill); 0: none.
	durable := make([][directCrashFiles]uint64, m.workers)
	start := time.Now()
	var directPuts, killsInFlight, acks, synceds, described uint64
	it := 0
	// The covered mode kills where the child saw descriptors, and runs
	// on (up to three budgets and three times the iterations) until a
	// reopen has found one, which the check below requires.
	more := func() bool {
		if it < 2 || it < iterations && time.Since(start) < budget {
			return true
		}
		return m.covered && described == 0 && it < 3*iterations && time.Since(start) < 3*budget
	}
	for ; more(); it++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDirectCrashChild$", "-test.count=1", "-test.timeout=2m")
		cmd.Env = append(os.Environ(), "TXNFS_DCRASH_DIR="+dir, "TXNFS_DCRASH_MODE="+m.name,
			fmt.Sprintf("TXNFS_DCRASH_GEN=%d", it+1), fmt.Sprintf("TXNFS_DCRASH_SEED=%d", seed))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A child that stops making progress (a hang) is killed and fails
		// the test, rather than passing as one more kill.
		var hung atomic.Bool
		watchdog := time.AfterFunc(60*time.Second, func() { hung.Store(true); cmd.Process.Signal(syscall.SIGKILL) })
		// pending[w] holds worker w's NoSync commits not yet covered by a
		// reported Sync.
		pending := make([][][2]uint64, m.workers)
		var lastDirect, lastInFlight, lastDescribed uint64
		handle := func(line string) (inflight bool) {
			var w, k int
			var v, d, n, c uint64
			switch {
			case sscan(line, "durable %d %d %d", &w, &k, &v):
				durable[w][k] = max(durable[w][k], v)
				acks++
			case sscan(line, "commit %d %d %d", &w, &k, &v):
				pending[w] = append(pending[w], [2]uint64{uint64(k), v})
				acks++
			case sscan(line, "synced %d", &w):
				for _, p := range pending[w] {
					durable[w][p[0]] = max(durable[w][p[0]], p[1])
				}
				pending[w] = nil
				synceds++
			case sscan(line, "stats %d %d %d", &d, &n, &c):
				lastDirect, lastInFlight, lastDescribed = d, n, c
				return n >= 4
			}
			return false
		}
		sc := bufio.NewScanner(stdout)
		waitFor := rng.IntN(40) - 5 // < 0: kill right after start (often during recovery)
		seen, commits := 0, 0
		if waitFor >= 0 {
			for sc.Scan() {
				line := sc.Text()
				inflight := handle(line)
				if line[0] == 'd' || line[0] == 'c' {
					commits++
				}
				if m.name == "inflight" {
					// Kill at the waitFor-th sample with >= 4 in
					// flight (or, if there are none, after 400 commits).
					if inflight {
						seen++
					}
					if seen > waitFor || commits >= 400 {
						break
					}
				} else if seen = commits; seen >= waitFor && !m.covered {
					break
				} else if m.covered && seen >= waitFor && (lastDescribed > 0 || commits >= waitFor+400) {
					// Covered: at the first sample after the waitFor-th
					// commit that saw descriptors (or after 400 more
					// commits without any).
					break
				}
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		killedInFlight := lastInFlight > 0
		for sc.Scan() { // lines written before the kill
			handle(sc.Text())
		}
		err = cmd.Wait()
		watchdog.Stop()
		if hung.Load() {
			t.Fatalf("seed %d iteration %d: no kill point reached in 60 s (%d commits acknowledged): hung?\n%s", seed, it, commits, stderr.String())
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("seed %d iteration %d: workload process ended by itself (%v):\n%s", seed, it, err, stderr.String())
		}
		directPuts += lastDirect
		if killedInFlight {
			killsInFlight++
		}

		logs := &logBuf{}
		e, err := Open(ctx, Options{Dir: dir, CacheBytes: -1, Covered: m.covered, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatalf("seed %d iteration %d: reopening after kill -9: %v", seed, it, err)
		}
		// A kill -9 loses no completed write, so no descriptor names
		// damaged bytes; but a commit may have pledged a covered put
		// whose write had not begun when the log reached the OS
		// (slice.Local.Pledge): Open cuts such a commit, never
		// acknowledged, and the later ones (the versions checked below
		// show that no acknowledged one went).
		if l := logs.String(); strings.Contains(l, "level=ERROR") || strings.Contains(l, "covered puts:") && !strings.Contains(l, "cut from the metadata log") {
			e.Close()
			t.Fatalf("seed %d iteration %d: a kill -9 loses no completed write, yet Open found bad covered-put descriptors:\n%s", seed, it, logs)
		}
		if n := countDescriptors(t, e); n > 0 {
			described++
		}
		fatal := func(format string, args ...any) {
			e.Close()
			t.Fatalf("seed %d iteration %d: "+format, append([]any{seed, it}, args...)...)
		}
		rep, err := e.FS.Check(ctx)
		if err != nil || !rep.OK() {
			fatal("fsck after kill -9: %v %q", err, rep.Problems)
		}
		if err := checkCrashFiles(ctx, e, durable); err != nil {
			fatal("%v", err)
		}
		if it%4 == 3 { // collect what the kills left behind, then check again
			if _, err := e.FS.CollectGarbage(ctx); err != nil {
				fatal("gc: %v", err)
			}
			if rep, err := e.FS.Check(ctx); err != nil || !rep.OK() {
				fatal("fsck after gc: %v %q", err, rep.Problems)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatalf("seed %d iteration %d: close: %v", seed, it, err)
		}
		t.Logf("iteration %d: killed after %d of %d (commits, or samples with >= 4 in flight) waited for; %d direct puts, %d in flight and %d descriptors at the last sample; %d slices checked",
			it, seen, waitFor, lastDirect, lastInFlight, lastDescribed, rep.Slices)
	}
	t.Logf("%s: %d iterations in %v: %d commits acknowledged, %d Syncs, %d direct puts, %d kills with direct writes in flight, %d reopens with covered-put descriptors",
		m.name, it, time.Since(start).Round(time.Millisecond), acks, synceds, directPuts, killsInFlight, described)
	if directPuts == 0 {
		t.Fatalf("seed %d: no put went direct (O_DIRECT works here: the engine stopped using it?)", seed)
	}
	if m.covered && described == 0 {
		t.Fatalf("seed %d: no reopen found a covered-put descriptor (no covered puts?)", seed)
	}
	if m.name == "inflight" && killsInFlight == 0 {
		t.Fatalf("seed %d: no kill landed while direct writes were in flight", seed)
	}
}

// countDescriptors returns the number of covered-put descriptors in e.
func countDescriptors(t *testing.T, e *Engine) int {
	n, err := coveredDescriptors(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// coveredDescriptors returns the number of covered-put descriptors in e's
// metadata store.
func coveredDescriptors(ctx context.Context, e *Engine) (int, error) {
	tx, err := e.KV.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	pairs, err := tx.Scan(ctx, meta.CoveredPrefix(), kv.PrefixEnd(meta.CoveredPrefix()), 0)
	return len(pairs), err
}

// sscan reports whether line parses as format.
func sscan(line, format string, args ...any) bool {
	_, err := fmt.Sscanf(line, format, args...)
	return err == nil
}

// checkCrashFiles checks, after a crash, that every file (w, k) holds one
// whole version, no older than durable[w][k] (the last one acknowledged
// durable; 0: none, and then the file may be missing), and records the
// version found in durable.
func checkCrashFiles(ctx context.Context, e *Engine, durable [][directCrashFiles]uint64) error {
	for w := range durable {
		for k := range directCrashFiles {
			data, found, err := readCrashFile(ctx, e, w, k)
			if err != nil {
				return fmt.Errorf("file %s: %w", crashFileName(w, k), err)
			}
			if !found {
				if durable[w][k] != 0 {
					return fmt.Errorf("file %s missing; version %#x was acknowledged durable", crashFileName(w, k), durable[w][k])
				}
				continue
			}
			v, n, err := parseCrashVersion(data, w, k)
			if err != nil {
				return fmt.Errorf("file %s: %w", crashFileName(w, k), err)
			}
			if want := crashVersion(w, k, v, n); !bytes.Equal(data, want) {
				at := 0
				for at < min(len(data), len(want)) && data[at] == want[at] {
					at++
				}
				return fmt.Errorf("file %s holds %d bytes, not version %#x (%d bytes) whole: first difference at %d", crashFileName(w, k), len(data), v, n, at)
			}
			if v < durable[w][k] {
				return fmt.Errorf("file %s holds version %#x, older than version %#x acknowledged durable", crashFileName(w, k), v, durable[w][k])
			}
			durable[w][k] = v
		}
	}
	return nil
}
