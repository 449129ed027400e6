package vnfs

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// utimensat's special times (localFS.VSetAttrs).
const (
	utimeOmit = unix.UTIME_OMIT
	utimeNow  = unix.UTIME_NOW
)

// statTimes returns a local file's access and change times.
func statTimes(st *syscall.Stat_t) (atime, ctime time.Time) {
	return time.Unix(st.Atim.Sec, st.Atim.Nsec), time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
}

// cloneRange shares n bytes of src at srcOff into dst at dstOff
// (FICLONERANGE: a reflink on XFS, Btrfs, or a txnfs FUSE mount).
func cloneRange(dst, src *os.File, srcOff, n, dstOff uint64) error {
	return unix.IoctlFileCloneRange(int(dst.Fd()), &unix.FileCloneRange{
		Src_fd: int64(src.Fd()), Src_offset: srcOff, Src_length: n, Dest_offset: dstOff})
}
