//go:build !linux

package fuse

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Unmount unmounts the FUSE mount at dir (see umount_linux.go for Linux,
// which also recovers crashed mounts); force is a forced unmount.
func Unmount(dir string, force bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	flags := 0
	if force {
		flags = unix.MNT_FORCE
	}
	if err := unix.Unmount(filepath.Clean(dir), flags); err != nil {
		return fmt.Errorf("unmounting %s: %w", dir, err)
	}
	return nil
}

// setBDI: Linux only (the mount's backing device info in sysfs).
func (l *mountLife) setBDI(bdi bdiSettings, log *slog.Logger) {}
