//go:build !linux

package main

import (
	"context"
	"errors"
	"time"
)

// slowSysmon is Linux-only (it sets a thread's timer slack through /proc).
func slowSysmon(ctx context.Context, slack time.Duration) error {
	return errors.New("not supported on this system")
}
