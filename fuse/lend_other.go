//go:build !linux

package fuse

import (
	"log/slog"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/slice"
)

// bufLender takes nothing off Linux (see lend_linux.go).
type bufLender struct{}

func newBufLender(*raw.Server, *slog.Logger) *bufLender { return nil }

func (*bufLender) lend(<-chan struct{}, *raw.WriteIn, []byte) *slice.Loan { return nil }
