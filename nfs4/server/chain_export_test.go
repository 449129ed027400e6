package server

import (
	"context"
	"time"
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
