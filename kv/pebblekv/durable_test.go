package pebblekv

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/txnfs/txnfs/kv"
)

// walGate blocks WAL syncs while closed.
type walGate struct {
	blocking atomic.Bool
	entered  chan struct{}
	release  chan struct{}
}

func (g *walGate) String() string { return "walGate" }

func (g *walGate) MaybeError(op errorfs.Op) error {
	if (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) &&
		strings.HasSuffix(op.Path, ".log") && g.blocking.Load() {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-g.release
	}
	return nil
}

// TestNoReadOfUndurableCommit: a transaction that begins while another's
// commit is applied but its WAL sync has not finished must not see it — a
// crash at that moment would lose what it saw. Begin waits instead.
func TestNoReadOfUndurableCommit(t *testing.T) {
	ctx := context.Background()
	gate := &walGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	st, err := Open(Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), gate)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			gate.blocking.Store(false)
			close(gate.release)
		})
	}
	defer release() // before Close, which waits for the blocked commit

	gate.blocking.Store(true)
	committed := make(chan error, 1)
	go func() {
		tx, err := st.Begin(ctx, kv.TxnOptions{})
		if err == nil {
			err = tx.Set([]byte("k"), []byte("v"))
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		committed <- err
	}()
	<-gate.entered // the commit is applied; its WAL sync is blocked

	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = st.Begin(sctx, kv.TxnOptions{ReadOnly: true})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read-only Begin during an unfinished WAL sync returned %v, want it to wait", err)
	}
	// A read-write transaction may begin, but if it ends without writing
	// it must wait before reporting success.
	rw, err := st.Begin(ctx, kv.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Get(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	sctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	err = rw.Commit(sctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty read-write Commit during an unfinished WAL sync returned %v, want it to wait", err)
	}
	release()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	tx, err := st.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if v, err := tx.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("after the sync: %q, %v", v, err)
	}
}
