// Package occ holds the pieces of optimistic concurrency control shared by
// the kv backends that do not have serializable transactions of their own
// (memkv, pebblekv): a transaction's write buffer, its read set of keys and
// spans, the merge of pending writes over a snapshot scan, and the log of
// recent commits used for backward validation.
//
// Nothing here is safe for concurrent use: a Buffer and a ReadSet belong to
// one transaction, and a Log is guarded by its store's commit mutex.
package occ
