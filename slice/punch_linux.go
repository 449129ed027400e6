package slice

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// punchHole deallocates [off, off+length) of the file behind fd, keeping its
// size. It reports false (and no error) when fd is not an OS file or the
// file system cannot punch holes; the caller then writes zeros.
func punchHole(fd uintptr, off, length uint64) (bool, error) {
	if fd == vfs.InvalidFd {
		return false, nil
	}
	err := unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(length))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
		return false, nil
	default:
		return false, err
	}
}

// allocated returns the bytes the file behind fd occupies on disk
// (st_blocks*512), or false when fd is not an OS file.
func allocated(fd uintptr) (uint64, bool, error) {
	if fd == vfs.InvalidFd {
		return 0, false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return 0, false, err
	}
	return uint64(st.Blocks) * 512, true, nil
}
