package server

// OpenTxnsForTest returns the number of open multi-compound transactions.
func OpenTxnsForTest(s *Server) int {
	s.txns.mu.Lock()
	defer s.txns.mu.Unlock()
	return len(s.txns.mu.byID)
}

// DropUsedCache empties the space_used cache (usedcache.go), so that the
// next GETATTR computes space_used from the file's chunk records.
func (s *Server) DropUsedCache() {
	s.used.mu.Lock()
	s.used.m = nil
	s.used.mu.Unlock()
}
