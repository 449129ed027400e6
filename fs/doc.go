// Package fs is the txnfs storage engine: a protocol-neutral, transactional
// POSIX file system whose data lives in immutable slices (package slice) and
// whose metadata lives in a transactional key-value store (package kv, key
// schema in package meta). It is the only home of file-system semantics;
// the NFS server and the FUSE adapter translate their protocols into calls
// on a Txn and map the errors in errors.go back to status codes.
//
// # Transactions
//
// Every operation runs in a Txn. FS.Do runs a function in a transaction and
// retries it transparently on conflicts; FS.Begin returns a long-lived Txn
// whose operations may be spread over many RPCs. A Txn records each
// operation with its arguments and results; if the kv commit conflicts,
// Commit replays the log against the new state and aborts with ErrConflict
// only if some replayed operation returns a different result (WTF §2.6).
//
// # Lifecycle and concurrency
//
// A Txn is not safe for concurrent use; exactly one of Commit or Abort must
// be called (Abort after Commit is a no-op). An FS is safe for concurrent
// use. Commit is durable when it returns: slice bytes are synced before the
// metadata that references them is committed.
package fs
