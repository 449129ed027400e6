//go:build !linux

package fuse

import (
	"log/slog"

	raw "github.com/hanwen/go-fuse/v2/fuse"
)

// hugeReadBuffers does nothing off Linux (see hugebuf_linux.go).
func hugeReadBuffers(*raw.Server, *slog.Logger) bool { return false }
