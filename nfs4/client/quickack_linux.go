package client

import "syscall"

// setQuickAck turns on TCP_QUICKACK for the socket fd (see quickAckReader).
func setQuickAck(fd uintptr) {
	syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
}
