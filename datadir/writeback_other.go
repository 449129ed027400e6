//go:build !linux

package datadir

import "github.com/cockroachdb/pebble/v2/vfs"

// writeBack: no sync_file_range here; the log's next sync writes the
// range back.
func writeBack(vfs.File, int64, int64) {}

func startWriteBack(vfs.File, int64, int64) {}
