package slice

import (
	"golang.org/x/sys/unix"
)

// openDirect opens path for O_DIRECT writes and returns the descriptor. A
// variable so tests can simulate a file system that refuses O_DIRECT.
var openDirect = func(path string) (int, error) {
	return unix.Open(path, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
}

// pwriteDirect writes buf at off through an O_DIRECT descriptor. A
// variable so tests can simulate a file system that accepts the open but
// refuses the write (EINVAL).
var pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
	return unix.Pwrite(fd, buf, off)
}

func closeDirect(fd int) error { return unix.Close(fd) }

// directRefused reports whether err means the file system does not do
// O_DIRECT writes (at all, or at this alignment): the put then falls back
// to a buffered write at the same offset.
func directRefused(err error) bool { return err == unix.EINVAL || err == unix.EOPNOTSUPP }
