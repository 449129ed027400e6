package slice

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+length) of the
// file behind fd to disk without waiting (sync_file_range WRITE), so the
// fdatasync of a later Sync finds the I/O already under way: it overlaps
// the disk transfer with whatever the writer does next (more puts, the
// metadata commit). It gives no durability guarantee and is best-effort:
// errors are ignored (fdatasync reports real ones).
//
// Only whole pages are started: the last, partial page of an append is
// where the next append writes, and a page under writeback may make that
// write wait (stable pages).
func startWriteback(fd uintptr, off, length uint64) {
	const page = 4096
	end := (off + length) &^ (page - 1)
	if fd == vfs.InvalidFd || end <= off {
		return
	}
	_ = unix.SyncFileRange(int(fd), int64(off), int64(end-off), unix.SYNC_FILE_RANGE_WRITE)
}
