package server

// OpenTxnsForTest returns the number of open multi-compound transactions.
func OpenTxnsForTest(s *Server) int {
	s.txns.mu.Lock()
	defer s.txns.mu.Unlock()
	return len(s.txns.mu.byID)
}
