// Package kv defines the transactional key-value interface that all txnfs
// metadata lives in, and the errors every backend reports.
//
// The contract is in the doc comments of Store and Txn: serializable
// transactions with snapshot reads, phantom protection for scans, durable
// commits, ErrConflict meaning "nothing applied, retry the whole
// transaction".
//
// Backends live in sub-packages: memkv (the in-memory reference) and
// pebblekv (the embedded default). faultkv wraps any backend to inject
// conflicts, I/O errors and latency for tests of the layers above. The
// conformance suite kvtest is run against every backend. docs/kv.md
// records the concurrency-control design and why the default backend was
// chosen.
package kv
