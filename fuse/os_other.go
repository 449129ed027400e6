//go:build !linux

package fuse

import (
	"errors"
	"os"
	"syscall"

	raw "github.com/hanwen/go-fuse/v2/fuse"
)

// What differs between the systems go-fuse serves (see os_linux.go). The
// mount is built and tested on Linux only; elsewhere it compiles so that
// the rest of txnfs (client, tools, server) does.
const (
	errNoAttr     = syscall.ENOATTR
	oDSync        = 0 // no O_DSYNC everywhere: O_SYNC handles still write through
	capKillPrivV2 = 0
)

var errNoMirror = errors.New("memory mirrors need Linux")

func mountTmpfs(int64) (*os.File, error)       { return nil, errNoMirror }
func newTmpfile(*os.File) (*os.File, error)    { return nil, errNoMirror }
func punchHole(*os.File, uint64, uint64) error { return errNoMirror }
func fileMemory(fi os.FileInfo) int64          { return fi.Size() }

const oDirect = 0

func backingFiles(*raw.Server) (func(*raw.BackingMap) (int32, syscall.Errno), func(int32) syscall.Errno) {
	return nil, nil
}
