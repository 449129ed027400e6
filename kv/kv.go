package kv

import (
	"bytes"
	"context"
	"errors"
)

// Errors returned by every Store and Txn implementation. Callers classify
// them with errors.Is; implementations wrap them with context using %w and
// never leak a backend's own sentinel errors.
var (
	// ErrNotFound is returned by Txn.Get when the key has no value.
	ErrNotFound = errors.New("kv: key not found")
	// ErrConflict is returned by Txn.Commit when committing would violate
	// serializability. Nothing of the transaction was applied; the caller
	// may retry the whole transaction.
	ErrConflict = errors.New("kv: transaction conflict")
	// ErrTxnDone is returned by any Txn method after Commit or Rollback.
	ErrTxnDone = errors.New("kv: transaction already finished")
	// ErrReadOnly is returned by Set, Delete on a read-only transaction.
	ErrReadOnly = errors.New("kv: read-only transaction")
	// ErrClosed is returned by Begin after Close.
	ErrClosed = errors.New("kv: store closed")
	// ErrInvalid is returned for bad arguments (empty key, oversized key
	// or value).
	ErrInvalid = errors.New("kv: invalid argument")
)

// Limits every backend accepts at least.
const (
	MaxKeySize   = 4 << 10
	MaxValueSize = 8 << 20
)

// Store is a transactional, ordered key-value store.
//
// Isolation is serializable: the effect of committed transactions is that of
// some serial order, consistent with real time (a transaction that begins
// after another's Commit returned sees its writes). Reads in a transaction
// observe one consistent snapshot taken at Begin plus the transaction's own
// writes. Scans are protected against phantoms: a key inserted by another
// transaction into a range this transaction scanned makes one of them fail
// with ErrConflict.
//
// Durability: when Commit returns nil the transaction's writes survive a
// crash (kill -9, power loss for backends that fsync), unless the
// transaction was begun with TxnOptions.NoSync: then they survive once Sync
// returns or a later synced commit returns. Commits become durable in
// commit order (a crash keeps a prefix of the serial order).
//
// Begin may be called concurrently from many goroutines; a single Txn is
// not safe for concurrent use.
type Store interface {
	Begin(ctx context.Context, opts TxnOptions) (Txn, error)
	// Sync makes every commit that returned before the call durable
	// (the barrier for NoSync commits). Concurrent Syncs share flushes.
	Sync(ctx context.Context) error
	Close() error
}

// TxnOptions configures a transaction.
type TxnOptions struct {
	// ReadOnly transactions never conflict and never write.
	ReadOnly bool
	// NoSync: Commit returns once the writes are visible (and ordered in
	// the log), without waiting for them to be durable; they are durable
	// after the next Store.Sync or a later synced Commit returns. Readers
	// may observe NoSync writes that a crash then loses (that is the
	// caller's choice); they never wait for them to become durable.
	NoSync bool
}

// Pair is one key and its value.
type Pair struct {
	Key, Value []byte
}

// Txn is one transaction. Exactly one of Commit or Rollback must be called;
// Rollback after Commit is a no-op, so `defer txn.Rollback()` is safe.
//
// Ownership: byte slices passed in are copied by the implementation (the
// caller may reuse them after the call returns); byte slices returned belong
// to the caller.
type Txn interface {
	// Get returns the value of key, or ErrNotFound.
	Get(ctx context.Context, key []byte) ([]byte, error)
	// Scan returns the pairs with start <= key < end in ascending key order,
	// at most limit of them when limit > 0. A nil end means no upper bound.
	// The range read for conflict detection is [start, end) when fewer than
	// limit pairs were returned, and [start, last returned key] otherwise.
	Scan(ctx context.Context, start, end []byte, limit int) ([]Pair, error)
	// Set stores value under key.
	Set(key, value []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(key []byte) error
	// Commit applies all writes atomically and durably, or returns an error
	// (ErrConflict on a serialization conflict) having applied nothing.
	Commit(ctx context.Context) error
	// Rollback discards the transaction.
	Rollback()
}

// PrefixEnd returns the smallest key greater than every key with the given
// prefix, or nil if there is none (the prefix is all 0xff bytes).
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Versioned is implemented by stores that count the commits they apply
// (memkv, pebblekv). It lets a caller tell, without taking a snapshot,
// that nothing changed since a transaction's snapshot was taken: if
// txn.(VersionedTxn).SnapshotVersion() equals store.Version() read later,
// no commit was applied in between, so a snapshot taken then would read
// exactly what the transaction's snapshot reads (the transaction's own
// uncommitted writes aside). Unequal versions say nothing (the snapshot
// may or may not be stale).
type Versioned interface {
	// Version returns the number of commits applied so far (commits
	// that wrote nothing need not count). Every commit it counts is
	// visible to transactions begun after it returns.
	Version() uint64
}

// VersionedTxn is implemented by the transactions of a Versioned store.
type VersionedTxn interface {
	// SnapshotVersion returns the store's Version at the transaction's
	// snapshot: the snapshot sees every commit counted in it (and
	// possibly later ones).
	SnapshotVersion() uint64
}

// UntrackedGetter is implemented by transactions that can read a key
// without adding it to their read set (memkv, pebblekv): the read sees the
// transaction's snapshot and own writes like Get, but a concurrent commit
// that changes the key does not make this transaction's Commit fail.
// Such a read is not serializable with the rest of the transaction; a
// caller may use it only for a fact it can show stays true, or is checked
// again by a tracked read before anything depends on it (fs.Txn.CheckHandle
// explains its case: an inode's number and generation).
type UntrackedGetter interface {
	GetUntracked(ctx context.Context, key []byte) ([]byte, error)
}
