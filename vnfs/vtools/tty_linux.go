//go:build linux

package vtools

import (
	"os"

	"golang.org/x/sys/unix"
)

func isatty(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
