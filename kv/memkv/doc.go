// Package memkv is the in-memory reference implementation of kv.Store.
//
// It favours being obviously correct over being fast:
//
//   - The committed state is a copy-on-write B-tree. Begin takes an O(1)
//     copy of it under the store mutex; that copy is the transaction's
//     snapshot and is never modified.
//   - A read-write transaction records every key it reads from the snapshot
//     (hits and misses) and every span it scans (with the limit rule of
//     kv.Txn.Scan). Writes are buffered in the transaction.
//   - Commit takes the store mutex, checks that no transaction which
//     committed after this one's snapshot wrote a key in the read set
//     (backward validation), applies the buffer to the tree and appends the
//     written keys to the commit log, all before releasing the mutex. The
//     commit order is therefore the serial order, and every snapshot is a
//     prefix of it.
//   - Read-only transactions and transactions that wrote nothing skip
//     validation: a consistent snapshot is serializable at its Begin.
//
// Nothing is durable: Close drops everything.
//
// Concurrency: the Store is safe for concurrent use; each Txn belongs to one
// goroutine at a time, as the kv contract says.
package memkv
