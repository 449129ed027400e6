//go:build darwin || freebsd

package vnfs

import (
	"os"
	"syscall"
	"time"
)

// utimensat's special times (<sys/stat.h> on macOS and FreeBSD).
const (
	utimeOmit = -2
	utimeNow  = -1
)

// statTimes returns a local file's access and change times.
func statTimes(st *syscall.Stat_t) (atime, ctime time.Time) {
	return time.Unix(st.Atimespec.Sec, st.Atimespec.Nsec), time.Unix(st.Ctimespec.Sec, st.Ctimespec.Nsec)
}

// cloneRange: no range clone here (macOS clonefile clones whole files
// only); the caller reports ErrNotSupported and vcopy copies instead.
func cloneRange(dst, src *os.File, srcOff, n, dstOff uint64) error {
	return syscall.EOPNOTSUPP
}
