//go:build !linux

package fuse

import "syscall"

// What differs between the systems go-fuse serves (see os_linux.go). The
// mount is built and tested on Linux only; elsewhere it compiles so that
// the rest of txnfs (client, tools, server) does.
const (
	errNoAttr     = syscall.ENOATTR
	oDSync        = 0 // no O_DSYNC everywhere: O_SYNC handles still write through
	capKillPrivV2 = 0
)
