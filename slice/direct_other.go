//go:build !linux

package slice

import "errors"

var errNoDirect = errors.New("slice: O_DIRECT is not supported on this platform")

// openDirect always fails off Linux: every put is buffered.
var openDirect = func(path string) (int, error) { return -1, errNoDirect }

var pwriteDirect = func(fd int, buf []byte, off int64) (int, error) { return 0, errNoDirect }

func closeDirect(fd int) error { return nil }

func directRefused(err error) bool { return true }
