package datadir

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// writeBack writes [off, off+n) of f back to disk and waits for it
// (sync_file_range: data only, no flush of the device cache; the log's
// own syncs flush it); best effort.
func writeBack(f vfs.File, off, n int64) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	}
}

// startWriteBack starts writing [off, off+n) of f back to disk without
// waiting (sync_file_range SYNC_FILE_RANGE_WRITE); best effort.
func startWriteBack(f vfs.File, off, n int64) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}
