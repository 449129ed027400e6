//go:build !linux

package client

// setQuickAck does nothing where TCP_QUICKACK does not exist: such
// systems' delayed ACKs are left as they are.
func setQuickAck(fd uintptr) {}
