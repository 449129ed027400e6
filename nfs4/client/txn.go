package client

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// Private operations of txnfs multi-compound transactions
// (docs/protocol.md §3). A server without them answers OP_ILLEGAL.
const (
	// OpTxnBegin opens a transaction on the server and returns its id.
	OpTxnBegin nfsv4.NfsOpnum4 = extxdr.OP_TXN_BEGIN
	// OpTxnJoin, sent first in a COMPOUND (before SEQUENCE), runs the
	// COMPOUND inside a transaction (see Compound.TxnID).
	OpTxnJoin nfsv4.NfsOpnum4 = extxdr.OP_TXN_JOIN
	// OpTxnEnd commits or aborts a transaction.
	OpTxnEnd nfsv4.NfsOpnum4 = extxdr.OP_TXN_END
)

// TxnID identifies a server-side multi-compound transaction (txnid4). The
// zero value means "no transaction"; servers never issue it.
type TxnID [16]byte

// IsZero reports whether id is the zero TxnID.
func (id TxnID) IsZero() bool { return id == TxnID{} }

// String returns id in hexadecimal.
func (id TxnID) String() string { return hex.EncodeToString(id[:]) }

// Errors of multi-compound transactions. They are returned wrapped
// (test with errors.Is); ErrTxnUnsupported is shared with OpTxn.
var (
	// ErrTxnExpired means the server does not know the transaction (any
	// more): it ended (committed or aborted), was aborted because the
	// client's lease expired, the client id was destroyed, it was idle
	// too long, or the server restarted. Nothing of it was committed
	// unless an earlier TxnEnd(commit) returned nil.
	ErrTxnExpired = errors.New("nfs4 client: transaction unknown or expired (not committed)")
	// ErrTxnNotOwner means the transaction belongs to another client.
	ErrTxnNotOwner = errors.New("nfs4 client: transaction belongs to another client")
	// ErrTxnLimit means the server has too many open transactions (for
	// this client or in total).
	ErrTxnLimit = errors.New("nfs4 client: too many open transactions on the server")
)

// TxnConflictError is returned by TxnEnd when the commit failed because
// concurrent changes by other clients invalidated what the transaction had
// read. Nothing of the transaction was committed, and it is over.
type TxnConflictError struct {
	ID TxnID
	// Report is the server's human-readable description: which
	// operations (and paths) the transaction read and changed.
	Report string
}

func (e *TxnConflictError) Error() string {
	return fmt.Sprintf("nfs4 client: transaction %s did not commit (conflict): %s", e.ID, e.Report)
}

// txnStatusErr maps a non-OK status of a transaction operation to the
// errors above (wrapping a *StatusError for the details).
func txnStatusErr(op nfsv4.NfsOpnum4, st nfsv4.Nfsstat4) error {
	se := &StatusError{Op: op, Status: st}
	switch st {
	case nfsv4.NFS4ERR_EXPIRED, nfsv4.NFS4ERR_STALE_CLIENTID:
		return fmt.Errorf("%w: %w", ErrTxnExpired, se)
	case nfsv4.NFS4ERR_WRONG_CRED:
		return fmt.Errorf("%w: %w", ErrTxnNotOwner, se)
	case nfsv4.NFS4ERR_RESOURCE:
		return fmt.Errorf("%w: %w", ErrTxnLimit, se)
	case nfsv4.NFS4ERR_OP_ILLEGAL:
		return fmt.Errorf("%w: %w", ErrTxnUnsupported, se)
	}
	return se
}

// TxnBegin opens a multi-compound transaction on the server (Close aborts
// the ones not ended). Until
// TxnEnd, COMPOUNDs sent with Compound.TxnID = id run inside it: they see
// its changes, and nobody else does. The transaction belongs to this
// Client's client id; it is aborted by the server if the client's lease
// expires, on DESTROY_CLIENTID (Close), after a long idle time, or when
// the server restarts. ErrTxnUnsupported means the server lacks the
// extension (nothing was done); ErrTxnLimit that it has too many open.
func (c *Client) TxnBegin(ctx context.Context) (TxnID, error) {
	var cp Compound
	cp.Add(txnBeginArg(c.ClientID()))
	rep, err := c.Do(ctx, &cp)
	if err != nil {
		return TxnID{}, err
	}
	if len(rep.Results) != 1 {
		return TxnID{}, fmt.Errorf("nfs4 client: TXN_BEGIN: %d results", len(rep.Results))
	}
	if rep.Status != nfsv4.NFS4_OK {
		return TxnID{}, txnStatusErr(rep.Results[0].GetResop(), rep.Status)
	}
	r, ok := rep.Results[0].(*extRes)
	var id TxnID
	if ok {
		id, ok = r.txnID()
	}
	if !ok {
		return TxnID{}, fmt.Errorf("nfs4 client: TXN_BEGIN: unexpected result %s", OpName(rep.Results[0].GetResop()))
	}
	c.mu.Lock()
	if c.mu.txns == nil {
		c.mu.txns = make(map[TxnID]bool)
	}
	c.mu.txns[id] = true
	c.mu.Unlock()
	return id, nil
}

// abortTxns aborts the transactions TxnBegin opened and TxnEnd did not
// end (Close: a client with open state cannot be destroyed).
func (c *Client) abortTxns(ctx context.Context) {
	c.mu.Lock()
	ids := make([]TxnID, 0, len(c.mu.txns))
	for id := range c.mu.txns {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		if err := c.TxnEnd(ctx, id, false); err != nil {
			c.cfg.Logger.Debug("nfs4 client: aborting transaction at close", "txn", id, "err", err)
		}
	}
}

// TxnEnd commits (commit = true) or aborts the transaction id. A commit
// returns nil only once all the transaction's changes are durable and
// visible; otherwise none of them is. It returns a *TxnConflictError if
// concurrent changes made the commit impossible, an error wrapping
// ErrTxnExpired if the server no longer knows the transaction, and
// another error (e.g. a *StatusError with NFS4ERR_IO) if the commit
// failed for another reason. In every case the transaction is over,
// except when the error is a transport or context error (ErrUncertain
// included: then the outcome is unknown).
func (c *Client) TxnEnd(ctx context.Context, id TxnID, commit bool) error {
	var cp Compound
	cp.Add(txnEndArg(id, c.ClientID(), commit))
	rep, err := c.Do(ctx, &cp)
	if err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.mu.txns, id)
	c.mu.Unlock()
	if rep.Status == nfsv4.NFS4_OK {
		return nil
	}
	if len(rep.Results) == 1 {
		if r, ok := rep.Results[0].(*extRes); ok {
			if report, isConflict := r.conflict(); isConflict {
				return &TxnConflictError{ID: id, Report: report}
			}
		}
		return txnStatusErr(rep.Results[0].GetResop(), rep.Status)
	}
	return txnStatusErr(OpTxnEnd, rep.Status)
}

// txnJoinErr is the error of a COMPOUND whose TXN_JOIN failed (nothing
// after SEQUENCE ran).
func txnJoinErr(st nfsv4.Nfsstat4) error { return txnStatusErr(OpTxnJoin, st) }

// isTxnOp reports the private transaction operations.
func isTxnOp(op nfsv4.NfsOpnum4) bool {
	return op == OpTxnBegin || op == OpTxnJoin || op == OpTxnEnd
}

func init() {
	opNames[OpTxnBegin], opNames[OpTxnJoin], opNames[OpTxnEnd] = "TXN_BEGIN", "TXN_JOIN", "TXN_END"
}
