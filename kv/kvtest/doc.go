// Package kvtest is the conformance suite that every kv.Store backend must
// pass, in the manner of testing/fstest: a backend's own test calls
//
//	kvtest.Run(t, func(t *testing.T) kv.Store { ... })
//
// and gets one subtest per property of the kv contract: basic operations,
// scan bounds and limits, read-your-writes, snapshot isolation, real-time
// order, read-write and phantom conflicts, write-skew prevention, blind
// writes that do not conflict, error values, large values, context
// cancellation, concurrent stress (counter, bank transfers with auditors)
// and a model-based randomized test against a plain map (pgregory.net/rapid;
// a failure prints the seed and a shrunk operation sequence).
//
// Backends that persist data also run RunDurability with a function that
// can reopen the store, cleanly or after a simulated crash.
//
// Randomized tests log their seed on failure; set KVTEST_SEED to replay it.
// Set KVTEST_LONG=1 (without -short) for longer stress runs.
package kvtest
