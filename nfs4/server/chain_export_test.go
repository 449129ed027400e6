package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// SetChainWaitForTest sets how long a chained COMPOUND waits for the
// previous one and returns the old value.
func SetChainWaitForTest(d time.Duration) time.Duration {
	old := chainWait
	chainWait = d
	return old
}

// ChainsForTest returns the number of live chains.
func ChainsForTest(s *Server) int { return s.chains.len() }

// SetSyncForTest replaces the FS.Sync that compounds wait for before
// their replies with fn(ctx, sync), sync being the real one.
func SetSyncForTest(s *Server, fn func(ctx context.Context, sync func(context.Context) error) error) {
	real := *s.sync.Load()
	hook := func(ctx context.Context) error { return fn(ctx, real) }
	s.sync.Store(&hook)
}

// SetChainEnterHookForTest sets a function called when a chained
// COMPOUND may run, in its turn or speculatively (turn false); nil
// removes it.
func SetChainEnterHookForTest(fn func(seq uint32, turn bool)) {
	if fn == nil {
		chainEnterHook.Store(nil)
		return
	}
	chainEnterHook.Store(&fn)
}

// ChainSpecForTest returns how many speculative runs of chained
// COMPOUNDs ended with outcome (committed, conflict, failed, void, turn).
func ChainSpecForTest(s *Server, outcome string) float64 {
	return testutil.ToFloat64(s.met.chainSpec.WithLabelValues(outcome))
}

// SetSpecAheadForTest sets how far ahead of a chain's next COMPOUND one
// may run speculatively (0: one per CPU but one) and returns the old value.
func SetSpecAheadForTest(n uint32) uint32 {
	return specAheadForTest.Swap(n)
}
