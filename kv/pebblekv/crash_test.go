package pebblekv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/kvtest"
	"github.com/txnfs/txnfs/kv/pebblekv"
)

var bg = context.Background()

// TestCrashDuringCommits simulates a power loss while concurrent commits are
// in flight: every commit acknowledged before the crash survives, and every
// transaction is all-or-nothing.
func TestCrashDuringCommits(t *testing.T) {
	seed := kvtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	rounds := 3
	if kvtest.Long() {
		rounds = 30
	}
	for round := range rounds {
		crashDuringCommits(t, rng, round)
	}
}

type ack struct{ w, i int }

func crashDuringCommits(t *testing.T, rng *rand.Rand, round int) {
	const writers, perWriter = 4, 200
	fs := vfs.NewCrashableMem()
	s, err := pebblekv.Open(pebblekv.Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked []ack
		wg    sync.WaitGroup
	)
	// Unbuffered: a writer waits for the crash loop to take its ack, so
	// the crash lands while commits are in flight.
	ackc, stopc := make(chan struct{}), make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				txn, err := s.Begin(bg, kv.TxnOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				v := fmt.Appendf(nil, "%d-%d", w, i)
				_ = txn.Set(fmt.Appendf(nil, "a/%d/%04d", w, i), v)
				_ = txn.Set(fmt.Appendf(nil, "b/%d/%04d", w, i), v)
				if err := txn.Commit(bg); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, ack{w, i})
				mu.Unlock()
				select {
				case ackc <- struct{}{}:
				case <-stopc:
					return
				}
			}
		})
	}
	// Crash after a random number of acknowledged commits.
	crashAfter := 1 + rng.IntN(writers*perWriter/2)
	for range crashAfter {
		<-ackc
	}
	mu.Lock()
	mustHave := append([]ack(nil), acked...)
	mu.Unlock()
	pct := rng.IntN(101)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), 2))})
	close(stopc)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := pebblekv.Open(pebblekv.Options{Dir: "db", FS: crashed})
	if err != nil {
		t.Fatalf("round %d: reopen after crash (unsynced kept %d%%): %v", round, pct, err)
	}
	defer s2.Close()
	txn, err := s2.Begin(bg, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	for _, a := range mustHave {
		for _, p := range []string{"a", "b"} {
			if _, err := txn.Get(bg, fmt.Appendf(nil, "%s/%d/%04d", p, a.w, a.i)); err != nil {
				t.Fatalf("round %d: acknowledged commit %v lost (key %s): %v", round, a, p, err)
			}
		}
	}
	as, err := txn.Scan(bg, []byte("a/"), []byte("a0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := txn.Scan(bg, []byte("b/"), []byte("b0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != len(bs) {
		t.Fatalf("round %d: torn transactions: %d a-keys, %d b-keys", round, len(as), len(bs))
	}
	for i := range as {
		if string(as[i].Key[1:]) != string(bs[i].Key[1:]) || string(as[i].Value) != string(bs[i].Value) {
			t.Fatalf("round %d: torn transaction: %s=%s vs %s=%s", round, as[i].Key, as[i].Value, bs[i].Key, bs[i].Value)
		}
	}
	t.Logf("round %d: crash after %d acks, unsynced kept %d%%: %d required, %d recovered", round, crashAfter, pct, len(mustHave), len(as))
}

// TestWALSyncFailure: when the WAL cannot be synced, Commit reports an error
// that is not a kv outcome, and the store refuses further transactions.
func TestWALSyncFailure(t *testing.T) {
	var on atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			return errorfs.ErrInjected
		}
		return nil
	})
	s, err := pebblekv.Open(pebblekv.Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), inj)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	txn, _ := s.Begin(bg, kv.TxnOptions{})
	_ = txn.Set([]byte("k"), []byte("v"))
	on.Store(true)
	err = txn.Commit(bg)
	if err == nil || errors.Is(err, kv.ErrConflict) {
		t.Fatalf("Commit with failing WAL sync = %v, want an I/O error", err)
	}
	if !errors.Is(err, errorfs.ErrInjected) {
		t.Logf("commit error does not wrap the injected error: %v", err)
	}
	if _, err := s.Begin(bg, kv.TxnOptions{}); err == nil {
		t.Fatal("Begin after a failed WAL sync succeeded")
	}
}

// TestCommitLogBound: a transaction that stays open while more than
// MaxLogBytes of other commits happen fails validation conservatively;
// within the bound, non-overlapping commits do not conflict with it.
func TestCommitLogBound(t *testing.T) {
	for _, tc := range []struct {
		maxLog int
		want   error
	}{{1 << 10, kv.ErrConflict}, {0, nil}} {
		s := open(t, pebblekv.Options{Dir: "db", FS: vfs.NewMem(), MaxLogBytes: tc.maxLog})
		long, _ := s.Begin(bg, kv.TxnOptions{})
		if _, err := long.Get(bg, []byte("x")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal(err)
		}
		_ = long.Set([]byte("y"), []byte("1"))
		for i := range 100 {
			txn, _ := s.Begin(bg, kv.TxnOptions{})
			_ = txn.Set(fmt.Appendf(nil, "other-key-%04d", i), []byte("v"))
			if err := txn.Commit(bg); err != nil {
				t.Fatal(err)
			}
		}
		if err := long.Commit(bg); !errors.Is(err, tc.want) {
			t.Fatalf("MaxLogBytes=%d: Commit = %v, want %v", tc.maxLog, err, tc.want)
		}
	}
}

// TestCloseWithOpenTxn: Close finishes open transactions.
func TestCloseWithOpenTxn(t *testing.T) {
	s, err := pebblekv.Open(pebblekv.Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	txn, _ := s.Begin(bg, kv.TxnOptions{})
	_ = txn.Set([]byte("k"), []byte("v"))
	ro, _ := s.Begin(bg, kv.TxnOptions{ReadOnly: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Get(bg, []byte("k")); !errors.Is(err, kv.ErrTxnDone) {
		t.Fatalf("Get after Close = %v, want ErrTxnDone", err)
	}
	if err := txn.Commit(bg); !errors.Is(err, kv.ErrTxnDone) {
		t.Fatalf("Commit after Close = %v, want ErrTxnDone", err)
	}
	txn.Rollback()
}
