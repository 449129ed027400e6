//go:build !linux

package hugepage

import "unsafe"

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Advise does nothing off Linux.
func Advise([]byte) bool { return false }
