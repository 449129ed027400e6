//go:build !linux

package rpc

import "syscall"

// socketUnread: unknown here (a caller then assumes bytes wait).
func socketUnread(syscall.RawConn) (int, bool) { return 0, false }
