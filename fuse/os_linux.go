package fuse

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

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

// tmpfileFlag opens an unnamed file in a directory (a mirror: nothing
// is left behind when the mount process dies).
const tmpfileFlag = unix.O_TMPFILE

// mountTmpfs mounts a private tmpfs of size bytes on dir that uses huge
// pages for every file (the mirrors; needs root).
func mountTmpfs(dir string, size int64) error {
	return syscall.Mount("txnfs-mirror", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC,
		fmt.Sprintf("size=%d,huge=always,mode=0700", size))
}

// unmountTmpfs detaches the mirrors' tmpfs.
func unmountTmpfs(dir string) { syscall.Unmount(dir, syscall.MNT_DETACH) }

// punchHole deallocates a range of f, keeping its size.
func punchHole(f *os.File, off, length uint64) error {
	return syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, int64(off), int64(length))
}
