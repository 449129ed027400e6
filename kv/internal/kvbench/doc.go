// Package kvbench holds the benchmarks behind the choice of the embedded kv
// backend (docs/kv.md): Pebble through pebblekv, Badger v4 with its native
// serializable transactions, and bbolt, all with durable (fsynced) commits
// on the disk under the test's temporary directory.
//
// Run (about 3 minutes on 2 cores):
//
//	go test ./kv/internal/kvbench -run xxx -bench . -benchtime 2s
//
// It has no non-test code.
package kvbench
