//go:build linux

package datadir

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPowerLoss is TestDirectCrashKill9 for a power cut rather than a
// kill -9: the workload (durable and NoSync commits, FS.Sync, whole-file
// rewrites) runs on a crashable in-memory disk, which is cloned while the
// workers write as a power cut would leave it: synced bytes kept, of the
// unsynced ones a random share (0–100%, per round), as an OS that wrote
// some of its dirty pages back. The data directory must reopen on the
// clone, pass fsck, and every file must hold exactly one complete version,
// no older than the last one acknowledged durable before the cut. This is
// the check of orderedFS's claim (docs/engine.md, "Durability") that
// pebble recovers from whatever a legal OS leaves of the write-ahead log —
// buffered in process memory or not (both rounds alternate), with the log
// files kept zero-filled ahead of the log (walAhead) — and that no
// durable metadata references slice bytes that did not survive. (A kill
// -9 loses nothing the OS was given, so TestDirectCrashKill9 cannot check
// this.)
//
// TXNFS_POWERLOSS_ROUNDS (default 12) sets the number of cuts;
// TXNFS_CRASH_SEED reruns a seed.
func TestPowerLoss(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXNFS_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rounds := 12
	if s := os.Getenv("TXNFS_POWERLOSS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("bad TXNFS_POWERLOSS_ROUNDS %q", s)
		}
		rounds = n
	}
	t.Logf("TXNFS_CRASH_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	ctx := context.Background()
	const workers, dir = 3, "data"
	m := directCrashMode{name: "powerloss", workers: workers, small: 7, syncPct: 40}
	mem := vfs.NewCrashableMem()
	// durable[w][k]: the last version of file (w, k) acknowledged durable
	// before a cut (or found after one); 0: none.
	durable := make([][directCrashFiles]uint64, workers)
	var acks, syncs int
	for round := 0; ; round++ {
		logBuf := 0 // the default: log bytes buffered in process memory
		if round%2 == 1 {
			logBuf = -1 // every log write handed to the OS at once
		}
		e, err := Open(ctx, Options{Dir: dir, FS: mem, CacheBytes: -1, LogBufferBytes: logBuf})
		if err != nil {
			t.Fatalf("seed %d round %d: opening: %v", seed, round, err)
		}
		fatal := func(format string, args ...any) {
			t.Helper()
			e.Close()
			t.Fatalf("seed %d round %d: "+format, append([]any{seed, round}, args...)...)
		}
		if round > 0 {
			rep, err := e.FS.Check(ctx)
			if err != nil || !rep.OK() {
				fatal("fsck after the power cut: %v %q", err, rep.Problems)
			}
			if err := checkCrashFiles(ctx, e, durable); err != nil {
				fatal("%v", err)
			}
		}
		if round == rounds {
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			break
		}

		// The workload, until the cut.
		var (
			mu      sync.Mutex
			acked   = make([][directCrashFiles]uint64, workers) // durable versions acknowledged this round
			stop    atomic.Bool
			wg      sync.WaitGroup
			errs    = make(chan error, workers)
			commits atomic.Int64
		)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(round)<<8|uint64(w)))
				var pending [directCrashFiles]uint64 // NoSync commits not yet followed by a Sync
				nosyncs := 0
				for i := uint64(1); !stop.Load(); i++ {
					k := r.IntN(directCrashFiles)
					v := uint64(round+1)<<32 | i
					noSync := r.IntN(100) >= m.syncPct
					n := 1 + r.IntN(64<<10)
					if r.IntN(10) >= m.small {
						n = 64<<10 + r.IntN(448<<10)
					}
					if err := writeCrashVersion(ctx, e, noSync, w, k, crashVersion(w, k, v, n)); err != nil {
						if stop.Load() {
							return // the engine may be closing
						}
						errs <- fmt.Errorf("worker %d file %d version %#x: %w", w, k, v, err)
						return
					}
					commits.Add(1)
					if !noSync {
						mu.Lock()
						acked[w][k] = v
						mu.Unlock()
						continue
					}
					pending[k] = v
					if nosyncs++; nosyncs%3 == 0 {
						if err := e.FS.Sync(ctx); err != nil {
							errs <- fmt.Errorf("worker %d sync: %w", w, err)
							return
						}
						mu.Lock()
						for k, v := range pending {
							acked[w][k] = max(acked[w][k], v)
						}
						syncs++
						mu.Unlock()
					}
				}
			}()
		}
		// Cut after a random number of commits (0: at once).
		want := int64(rng.IntN(60))
		for deadline := time.Now().Add(30 * time.Second); commits.Load() < want && time.Now().Before(deadline); {
			select {
			case err := <-errs:
				stop.Store(true)
				wg.Wait()
				fatal("%v", err)
			case <-time.After(time.Millisecond):
			}
		}
		mu.Lock()
		cutAcked := slices.Clone(acked) // what was durable before the cut
		mu.Unlock()
		cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(round)))}
		clone := mem.CrashClone(cfg)
		stop.Store(true)
		wg.Wait()
		select {
		case err := <-errs:
			fatal("%v", err)
		default:
		}
		e.Close() // of the disk that lived on; errors do not matter
		for w := range workers {
			for k := range directCrashFiles {
				if cutAcked[w][k] > durable[w][k] {
					durable[w][k] = cutAcked[w][k]
					acks++
				}
			}
		}
		t.Logf("round %d: cut after %d commits (%d wanted), %d%% of unsynced data kept, log buffer %d",
			round, commits.Load(), want, cfg.UnsyncedDataPercent, logBuf)
		mem = clone
	}
	t.Logf("%d power cuts; %d durable versions required, %d Syncs", rounds, acks, syncs)
}
