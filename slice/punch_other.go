//go:build !linux

package slice

// punchHole is unsupported off Linux: Free falls back to writing zeros.
func punchHole(fd uintptr, off, length uint64) (bool, error) { return false, nil }

// allocated is unknown off Linux: Backings reports Size.
func allocated(fd uintptr) (uint64, bool, error) { return 0, false, nil }
