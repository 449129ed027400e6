package slice

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/internal/byterange"
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

// dataRanges returns the ranges of the file behind fd below size that hold
// data: neither holes nor unwritten extents, which lseek SEEK_HOLE reports
// as holes (file systems without SEEK_DATA: an error). When fd is not an
// OS file it returns [0, size): the test models of a device have no holes
// (punch writes zeros there).
func dataRanges(fd uintptr, size uint64) (byterange.Set, error) {
	if fd == vfs.InvalidFd {
		return byterange.Of(0, size), nil
	}
	var out byterange.Set
	for off := uint64(0); off < size; {
		d, err := unix.Seek(int(fd), int64(off), unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data past off
		}
		if err != nil {
			return nil, err
		}
		if uint64(d) >= size {
			break
		}
		h, err := unix.Seek(int(fd), d, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		if h <= d {
			return nil, fmt.Errorf("lseek SEEK_HOLE from %d returned %d", d, h)
		}
		out = append(out, Range{Start: uint64(d), End: min(uint64(h), size)})
		off = uint64(h)
	}
	return out, nil
}
