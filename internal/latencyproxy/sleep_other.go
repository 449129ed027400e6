//go:build !linux

package latencyproxy

import "time"

// setTimerSlack: Linux only; elsewhere sub-millisecond delays are as
// precise as the Go timer.
func setTimerSlack(ns int) {}

func nanosleep(d time.Duration) { time.Sleep(d) }
