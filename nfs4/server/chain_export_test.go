package server

import "time"

// SetChainWaitForTest sets how long a chained COMPOUND waits for the
// previous one and returns the old value.
func SetChainWaitForTest(d time.Duration) time.Duration {
	old := chainWait
	chainWait = d
	return old
}

// ChainsForTest returns the number of live chains.
func ChainsForTest(s *Server) int { return s.chains.len() }
