package rpc

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// socketUnread returns how many received bytes wait in the socket's
// receive queue (SIOCINQ, alias FIONREAD); ok is false if that is unknown.
func socketUnread(raw syscall.RawConn) (n int, ok bool) {
	var err error
	if cerr := raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}
