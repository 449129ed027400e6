// Package pebblekv is the embedded default kv.Store, on the Pebble LSM
// (github.com/cockroachdb/pebble/v2). Pebble has atomic write batches,
// snapshots and a group-committing write-ahead log, but no transactions;
// this package adds serializable optimistic concurrency control on top.
//
// # Transactions
//
// Begin takes a Pebble snapshot and remembers the commit sequence number
// start of the last commit it contains. Reads go to the snapshot, merged
// with the transaction's own buffered writes. A read-write transaction
// records every key it reads from the snapshot (hits and misses) and every
// span it scans, with the limit rule of kv.Txn.Scan.
//
// Commit builds a Pebble batch from the buffered writes, then, holding the
// store's commit mutex:
//
//  1. validates: if any transaction with sequence > start wrote a key in
//     the read set, it returns kv.ErrConflict having applied nothing;
//  2. applies the batch with DB.ApplyNoSyncWait(batch, pebble.Sync), which
//     returns once the batch is in the WAL buffer and the memtable and
//     visible to new snapshots, without waiting for the fsync;
//  3. takes the next sequence number and logs the written keys under it.
//
// It then releases the mutex and waits for the WAL fsync (Batch.SyncWait),
// so Commit returns only when the transaction is durable. While it waits,
// other transactions validate and apply theirs; Pebble's log writer covers
// all of them with the next fsync (group commit).
//
// # Why this is serializable
//
// Validation and application form one critical section, so the order of
// sequence numbers is both the validation order and Pebble's apply order,
// and there is no moment at which a transaction has validated but is not
// yet visible. A read-write Begin takes its snapshot under the same mutex,
// so the snapshot contains exactly the commits with sequence <= start: a
// prefix of the serial order. (A design that calls batch.Commit outside the mutex must
// instead advance start only over a contiguous prefix of applied commits
// and validate against everything above it; with Pebble it would also let
// the apply order differ from the validation order, which allows a
// read-only anomaly. Holding the mutex over the memtable insert but not
// over the fsync avoids both problems and keeps group commit.)
//
// A committed read-write transaction T read nothing that was overwritten
// between its snapshot and its commit, so it is equivalent to running
// atomically at its sequence number. Read-only transactions, and
// read-write ones that wrote nothing, read a prefix of the serial order and
// are equivalent to running at start; they skip validation.
//
// The commit log keeps the written keys of each commit while an open
// read-write transaction with an older start may need them, bounded by
// Options.MaxLogBytes; a transaction whose records were dropped fails
// validation (conservative).
//
// # Durability and visibility
//
// A commit is visible to transactions that begin after step 2, before its
// fsync completes (as with Pebble's own DB.Apply). A read-write transaction
// that read such data commits later in the same WAL, so it can be durable
// only if the data it read is. A read-only transaction may observe writes
// whose Commit has not yet returned and which a crash then loses. If the
// WAL write or sync fails, the outcome of that commit is unknown: Commit
// returns a non-kv error, and the store refuses further transactions.
//
// # NoSync commits and Sync
//
// A transaction begun with kv.TxnOptions.NoSync is applied with
// pebble.NoSync: Commit returns once it is visible, without a WAL fsync.
// Store.Sync writes an empty LogData record with pebble.Sync; its fsync
// covers every batch before it in the log. The store tracks the last
// applied commit that was not NoSync (lastSynced); read-only Begin, empty
// commits, rollbacks and NoSync commits wait for that one to be durable,
// never for NoSync commits, so readers never stall behind a missing Sync.
//
// # Shared read snapshots
//
// Read-only transactions that begin while no commit has been applied
// share one Pebble snapshot (reference-counted; replaced by the first
// read-only Begin after a commit). A commit's counter is stored before its
// Commit returns, so a reader still sees every commit that returned before
// it began. The current shared snapshot lives until that replacement, so
// after the last commit it may pin old versions from compaction until the
// next read-only Begin.
//
// # Concurrency
//
// The Store is safe for concurrent use. A Txn belongs to one goroutine at a
// time. Close waits for operations in progress, then finishes every open
// transaction (later calls return kv.ErrTxnDone) and closes Pebble.
//
// Lock order: closeMu (shared by every operation, exclusive in Close), then
// either mu (commit critical section, read-write Begin, finishing a
// read-write transaction) or live (the set of open transactions), never
// both. No lock is held across a WAL fsync. Read-only Begin does not take
// mu: because commits are applied one at a time in sequence order and
// Pebble publishes batches in order, every Pebble snapshot is a prefix of
// the serial order, so readers never wait behind a commit (or a write
// stall).
package pebblekv
