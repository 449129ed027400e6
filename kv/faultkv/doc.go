// Package faultkv wraps a kv.Store and injects faults for testing the
// layers above kv: serialization conflicts at Commit, I/O errors on Get,
// Scan and Commit, lost commit acknowledgements, and latency.
//
// Injection is seeded: a single goroutine that issues the same calls gets
// the same faults for the same Options.Seed. With concurrent callers the
// faults depend on the interleaving (the random source is shared under a
// mutex).
//
// Injected I/O errors wrap ErrInjected and none of the kv sentinels, so
// callers see them as genuine backend failures. An injected conflict is a
// kv.ErrConflict with nothing applied, exactly like a real one.
//
// Concurrency: the wrapper is as safe as the wrapped store; a wrapped Txn
// belongs to one goroutine at a time.
package faultkv
