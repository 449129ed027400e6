package server

// AddPayloadWritesForTest adds n to the count of compounds running with a
// large WRITE (Server.payloadWrites), as if n more ran.
func AddPayloadWritesForTest(s *Server, n int64) { s.payloadWrites.Add(n) }
