//go:build linux

package hugepage

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Advise advises the Size-aligned regions that b overlaps for huge pages
// (MADV_HUGEPAGE), touches b's pages (a region nothing touched yet then
// faults in as one huge page; MADV_COLLAPSE refuses a region without page
// tables) and collapses the regions (MADV_COLLAPSE, Linux 6.1), best
// effort; it reports whether every collapse succeeded. b must be a buffer
// whose contents do not matter yet (its pages are written with zeros).
// The regions lie in the Go heap's arenas, which are mapped in 64 MiB
// aligned units, so they are ordinary anonymous memory.
func Advise(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	start := addr(b)
	end := start + uintptr(len(b))
	for r := start &^ (Size - 1); r < end; r += Size {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r, Size, unix.MADV_HUGEPAGE); e != 0 {
			return false
		}
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	ok := true
	for r := start &^ (Size - 1); r < end; r += Size {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r, Size, unix.MADV_COLLAPSE); e != 0 {
			ok = false
		}
	}
	return ok
}
