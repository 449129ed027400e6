package pebblekv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/txnfs/txnfs/kv"
)

func putOpts(t *testing.T, st kv.Store, opts kv.TxnOptions, k, v string) {
	t.Helper()
	tx, err := st.Begin(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Set([]byte(k), []byte(v)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func getRO(t *testing.T, ctx context.Context, st kv.Store, k string) (string, error) {
	t.Helper()
	tx, err := st.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	v, err := tx.Get(ctx, []byte(k))
	return string(v), err
}

// TestNoSyncVisibleNotWaited: a NoSync commit is visible at once, and
// neither readers nor empty read-write commits wait for it to become
// durable, even while WAL syncs are blocked.
func TestNoSyncVisibleNotWaited(t *testing.T) {
	ctx := context.Background()
	gate := &walGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	st, err := Open(Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), gate)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer func() {
		if gate.blocking.Swap(false) {
			close(gate.release)
		}
	}()
	gate.blocking.Store(true) // any WAL sync from now on blocks
	putOpts(t, st, kv.TxnOptions{NoSync: true}, "k", "v1")
	putOpts(t, st, kv.TxnOptions{NoSync: true}, "k", "v2")
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := getRO(t, sctx, st, "k"); err != nil || v != "v2" {
		t.Fatalf("read after NoSync commits: %q, %v", v, err)
	}
	rw, err := st.Begin(sctx, kv.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Get(sctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := rw.Commit(sctx); err != nil {
		t.Fatalf("empty commit after NoSync commits: %v", err)
	}
	// Sync must wait for the (blocked) WAL sync.
	synced := make(chan error, 1)
	go func() { synced <- st.Sync(ctx) }()
	select {
	case <-gate.entered:
	case err := <-synced:
		t.Fatalf("Sync returned %v without a WAL sync", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Sync started no WAL sync in 10s")
	}
	select {
	case err := <-synced:
		t.Fatalf("Sync returned %v while the WAL sync was blocked", err)
	case <-time.After(50 * time.Millisecond):
	}
	gate.blocking.Store(false)
	close(gate.release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
}

// TestNoSyncCrash: after a power loss (crash clone keeping only synced
// data) every commit acknowledged by a Sync (or by a synced commit after
// it) is there, and the NoSync commits after the last Sync form a prefix
// of the commit order.
func TestNoSyncCrash(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		mem := vfs.NewCrashableMem()
		st, err := Open(Options{Dir: "db", FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		durable := 0
		const n = 40
		syncAt := 4 + round*2 // 4..42: sometimes never
		for i := 1; i <= n; i++ {
			synced := i == 3 && round%2 == 0 // a synced commit covers everything before it
			putOpts(t, st, kv.TxnOptions{NoSync: !synced}, fmt.Sprintf("k%03d", i), "v")
			if synced {
				durable = i
			}
			if i == syncAt {
				if err := st.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				durable = i
			}
		}
		clone := mem.CrashClone(vfs.CrashCloneCfg{})
		st.Close()
		st, err = Open(Options{Dir: "db", FS: clone})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		seenGap := 0
		for i := 1; i <= n; i++ {
			_, err := getRO(t, ctx, st, fmt.Sprintf("k%03d", i))
			switch {
			case err == nil && seenGap != 0:
				t.Fatalf("round %d: commit %d survived but %d before it did not", round, i, seenGap)
			case errors.Is(err, kv.ErrNotFound):
				if i <= durable {
					t.Fatalf("round %d: commit %d lost, but commits up to %d were made durable", round, i, durable)
				}
				if seenGap == 0 {
					seenGap = i
				}
			case err != nil:
				t.Fatal(err)
			}
		}
		st.Close()
	}
}

// TestSharedReadSnapshot: read-only transactions that begin with no commit
// in between share one pebble snapshot; one beginning after a commit sees
// it; closing the store with readers open releases everything.
func TestSharedReadSnapshot(t *testing.T) {
	ctx := context.Background()
	st, err := Open(Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	putOpts(t, st, kv.TxnOptions{}, "k", "v1")
	a, _ := st.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	b, _ := st.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if a.(*txn).snap != b.(*txn).snap {
		t.Fatal("two readers with no commit in between took two snapshots")
	}
	putOpts(t, st, kv.TxnOptions{}, "k", "v2")
	c, _ := st.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if c.(*txn).snap == a.(*txn).snap {
		t.Fatal("a reader after a commit reused the older snapshot")
	}
	for _, r := range []struct {
		tx   kv.Txn
		want string
	}{{a, "v1"}, {b, "v1"}, {c, "v2"}} {
		if v, err := r.tx.Get(ctx, []byte("k")); err != nil || string(v) != r.want {
			t.Fatalf("got %q, %v, want %q", v, err, r.want)
		}
	}
	a.Rollback()
	if v, err := b.Get(ctx, []byte("k")); err != nil || string(v) != "v1" {
		t.Fatalf("after the other sharer finished: %q, %v", v, err)
	}
	if err := st.Close(); err != nil { // b and c still open
		t.Fatal(err)
	}
	b.Rollback()
	c.Rollback()
}
