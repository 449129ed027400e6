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

// mountTmpfs mounts a private tmpfs of size bytes that uses huge pages
// for every file (the mirrors; needs root) and returns its root
// directory, already detached from the file system tree: nothing is
// visible to others, files are made in it with newTmpfile, and it is
// gone when the directory is closed and its files are, or when the
// process dies.
func mountTmpfs(size int64) (*os.File, error) {
	dir, err := os.MkdirTemp("", "txnfs-mirror-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dir)
	if err := syscall.Mount("txnfs-mirror", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC,
		fmt.Sprintf("size=%d,huge=always,mode=0700", size)); err != nil {
		return nil, err
	}
	f, err := os.Open(dir)
	syscall.Unmount(dir, syscall.MNT_DETACH)
	return f, err
}

// newTmpfile makes an unnamed file in directory dir.
func newTmpfile(dir *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "mirror"), nil
}

// punchHole deallocates a range of f, keeping its size.
// fileMemory returns the memory a tmpfs file takes (its blocks: a small
// file may hold a whole 2 MiB huge page).
func fileMemory(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

func punchHole(f *os.File, off, length uint64) error {
	return syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, int64(off), int64(length))
}

// oDirect is O_DIRECT (opens with it are not given passthrough).
const oDirect = syscall.O_DIRECT

// backingFiles returns srv's FUSE passthrough backing file ioctls.
func backingFiles(srv *raw.Server) (func(*raw.BackingMap) (int32, syscall.Errno), func(int32) syscall.Errno) {
	return srv.RegisterBackingFd, srv.UnregisterBackingFd
}
