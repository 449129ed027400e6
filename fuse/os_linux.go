package fuse

import (
	"syscall"

	raw "github.com/hanwen/go-fuse/v2/fuse"
)

// What differs between the systems go-fuse serves (here Linux; see
// os_other.go).
const (
	errNoAttr = syscall.ENODATA // getxattr of a name a file does not have
	oDSync    = syscall.O_DSYNC
	// capKillPrivV2: see Mount (FUSE_HANDLE_KILLPRIV_V2, Linux 5.12).
	capKillPrivV2 = raw.CAP_HANDLE_KILLPRIV_V2
)
