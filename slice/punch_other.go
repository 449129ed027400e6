//go:build !linux

package slice

import "github.com/txnfs/txnfs/internal/byterange"

// punchHole is unsupported off Linux: Free falls back to writing zeros.
func punchHole(fd uintptr, off, length uint64) (bool, error) { return false, nil }

// allocated is unknown off Linux: Backings reports Size.
func allocated(fd uintptr) (uint64, bool, error) { return 0, false, nil }

// dataRanges is unknown off Linux: none (no put there is covered).
func dataRanges(fd uintptr, size uint64) (byterange.Set, error) { return nil, nil }
