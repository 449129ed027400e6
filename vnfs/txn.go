package vnfs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/txnfs/txnfs/nfs4/client"
)

// Tx is a transaction spanning several vector calls, on a txnfs server
// (multi-compound transactions, docs/protocol.md §3). Its embedded FS runs
// every call inside the transaction: calls see the transaction's earlier
// changes, and no other client (nor this FS outside the Tx) sees any of
// them until Commit, which makes all of them visible atomically, or fails
// and applies none. Abort discards them.
//
// Inside a Tx each vector call keeps the usual failure semantics (items
// run in order and stop at the first failure; the items before it stay in
// the transaction), so a program can inspect a failure and go on, or
// Abort. The Tx's Txn view refuses every call (no nested transactions).
// Descriptors opened in a Tx are usable after Commit, and invalid after
// Abort or a failed Commit.
//
// The server aborts a transaction that stays idle too long (30 minutes by
// default), when the client's lease expires, or when it restarts; the next
// call or Commit then fails with an error wrapping client.ErrTxnExpired.
// A Tx is safe for concurrent use; the server runs its COMPOUNDs one at a
// time.
type Tx struct {
	FS
	n  *nfsFS
	id client.TxnID

	mu   sync.Mutex
	done bool
}

// TxnConflictError is returned (wrapped) by Tx.Commit, and by a Txn view's
// call that needed a multi-compound transaction, when concurrent changes by
// other clients made the commit impossible: nothing was applied. Report
// says what the transaction read and changed. Retrying the whole
// transaction may succeed.
type TxnConflictError = client.TxnConflictError

// Begin starts a multi-call transaction on f. It fails with an error
// wrapping ErrTxnUnsupported, having done nothing, when f is not an NFS
// file system whose server has the txnfs extension (the local file system,
// NFS-Ganesha, the scalar baseline), or is already the FS of a Tx.
func Begin(ctx context.Context, f FS) (*Tx, error) {
	if tx, ok := f.(*Tx); ok {
		f = tx.FS
	}
	b, ok := f.(interface {
		begin(context.Context) (*Tx, error)
	})
	if !ok {
		return nil, fmt.Errorf("vnfs: begin: %w", ErrTxnUnsupported)
	}
	return b.begin(ctx)
}

func (n *nfsFS) begin(ctx context.Context) (*Tx, error) {
	if !n.join.IsZero() {
		return nil, fmt.Errorf("vnfs: begin: %w (already in a transaction)", ErrTxnUnsupported)
	}
	id, err := n.c.TxnBegin(ctx)
	if err != nil {
		return nil, fmt.Errorf("vnfs: begin: %w", err)
	}
	j := *n
	if j.txn {
		j.txn = false // the Txn view already reserved the operation TXN_JOIN takes
	} else {
		j.maxOps--
	}
	j.join = id
	return &Tx{FS: &j, n: &j, id: id}, nil
}

// ID returns the server's id of the transaction.
func (t *Tx) ID() client.TxnID { return t.id }

// Commit makes all the transaction's changes durable and visible at once.
// On failure nothing was applied: the error wraps a *TxnConflictError
// (concurrent changes; see its Report), client.ErrTxnExpired (the server
// aborted the transaction), or another error. Transport errors
// (client.ErrUncertain, context errors) leave the outcome unknown. The Tx
// is over after Commit, whatever the result.
func (t *Tx) Commit(ctx context.Context) error { return t.end(ctx, true) }

// Abort discards the transaction's changes. The Tx is over afterwards.
func (t *Tx) Abort(ctx context.Context) error { return t.end(ctx, false) }

// Close aborts the transaction unless Commit or Abort was called; it does
// not close the FS the Tx was begun on.
func (t *Tx) Close() error {
	t.mu.Lock()
	done := t.done
	t.mu.Unlock()
	if done {
		return nil
	}
	return t.Abort(context.Background())
}

var errTxDone = errors.New("vnfs: transaction already committed or aborted")

func (t *Tx) end(ctx context.Context, commit bool) error {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return errTxDone
	}
	t.done = true
	t.mu.Unlock()
	if err := t.n.c.TxnEnd(ctx, t.id, commit); err != nil {
		op := "abort"
		if commit {
			op = "commit"
		}
		return fmt.Errorf("vnfs: %s: %w", op, err)
	}
	return nil
}
