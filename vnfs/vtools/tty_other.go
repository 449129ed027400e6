//go:build !linux && !darwin && !freebsd

package vtools

import "os"

// isatty approximates: a character device.
func isatty(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
