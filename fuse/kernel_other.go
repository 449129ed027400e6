//go:build !linux

package fuse

import (
	"syscall"

	raw "github.com/hanwen/go-fuse/v2/fuse"
)

// incEpoch is Linux's (see kernel_linux.go).
func incEpoch(*raw.Server) error { return syscall.ENOSYS }

// syncMount is Linux's (see kernel_linux.go).
func syncMount(string) error { return syscall.ENOSYS }
