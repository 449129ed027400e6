//go:build !linux

package fuse

import (
	"errors"
	"os"
	"syscall"
)

// What differs between the systems go-fuse serves (see os_linux.go). The
// mount is built and tested on Linux only; elsewhere it compiles so that
// the rest of txnfs (client, tools, server) does.
const (
	errNoAttr     = syscall.ENOATTR
	oDSync        = 0 // no O_DSYNC everywhere: O_SYNC handles still write through
	capKillPrivV2 = 0
)

const tmpfileFlag = 0

var errNoMirror = errors.New("memory mirrors need Linux")

func mountTmpfs(string, int64) error           { return errNoMirror }
func unmountTmpfs(string)                      {}
func punchHole(*os.File, uint64, uint64) error { return errNoMirror }
