package server

// OpenTxnsForTest returns the number of open multi-compound transactions.
func OpenTxnsForTest(s *Server) int {
	s.txns.mu.Lock()
	defer s.txns.mu.Unlock()
	return len(s.txns.mu.byID)
}

// AddPayloadWritesForTest adds n to the count of compounds running with a
// large WRITE (Server.payloadWrites), as if n more ran.
func AddPayloadWritesForTest(s *Server, n int64) { s.payloadWrites.Add(n) }
