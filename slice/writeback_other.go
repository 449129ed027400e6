//go:build !linux

package slice

// startWriteback is a no-op off Linux (fdatasync does all the work).
func startWriteback(fd uintptr, off, length uint64) {}
