package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// slowSysmon widens the timer slack of the Go runtime's monitor thread
// (sysmon) to slack, so that its ticks — usleep(20 µs) whenever it has
// recently retaken a P or been woken from its idle sleep by a system
// call — last about slack instead of ~90 µs on this project's VM (20 µs
// plus the default 50 µs slack plus the timer's own latency). Why
// (docs/nfs-server.md, "Session 9"): a 1 MiB durable WRITE blocks in
// pwrite and fdatasync, which keeps sysmon in its fast phase (50 ticks
// after every reset, the reset coming every few ms: a retake, or the wake
// from its idle sleep when the next request's first system call enters),
// and each tick is a context switch: 12–15 of the ~30 per WRITE, ~11% of
// the server's CPU samples. A tick of ~1 ms keeps sysmon's duties
// (retaking a P from a thread blocked in a system call, preempting a
// goroutine after 10 ms, polling the network as a backup) within about a
// millisecond, and serve runs more Ps than CPUs (serveProcs) so that a P
// blocked in a system call rarely has to be retaken at all.
//
// sysmon is the process's first thread after the main one: runtime.main
// starts it before any other (Go 1.26, proc.go), so its thread id is the
// smallest one above the process id (or, if thread ids wrapped around
// since, the smallest other one). It is only ever in nanosleep (its tick)
// or futex (its idle sleep) when not running; a thread found in another
// system call is left alone. Setting another thread's slack needs
// CAP_SYS_NICE: without it this returns the error and nothing changes.
//
// A thread inherits the slack of the thread that creates it, and sysmon
// starts threads at times (when it hands a P to a new M): until ctx ends,
// a goroutine gives threads other than sysmon whose slack differs from
// the main thread's that slack back, checking every second at first and
// less often later (the runtime keeps its threads, so new ones are rare
// once the server is warm).
func slowSysmon(ctx context.Context, slack time.Duration) error {
	tid, err := sysmonThread()
	if err != nil {
		return err
	}
	def, err := os.ReadFile("/proc/self/timerslack_ns") // the main thread's
	if err != nil {
		return err
	}
	def = bytes.TrimSpace(def)
	if err := setSlack(tid, []byte(strconv.FormatInt(slack.Nanoseconds(), 10))); err != nil {
		return fmt.Errorf("setting sysmon's timer slack: %w", err)
	}
	go func() {
		pause := time.Second
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			resetSlack(tid, def)
			pause = min(2*pause, time.Minute)
		}
	}()
	return nil
}

// setSlack sets thread tid's timer slack to the decimal nanoseconds v.
func setSlack(tid int, v []byte) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/timerslack_ns", tid), v, 0)
}

// resetSlack gives every thread of the process but sysmon the timer slack
// def (decimal nanoseconds) if it has another.
func resetSlack(sysmon int, def []byte) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == sysmon {
			continue
		}
		cur, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", tid))
		if err == nil && !bytes.Equal(bytes.TrimSpace(cur), def) {
			setSlack(tid, def) // best effort: the thread may have exited
		}
	}
}

// sysmonThread returns the thread id of the runtime's monitor thread (see
// slowSysmon), checked to be sleeping in nanosleep or futex.
func sysmonThread() (int, error) {
	pid := os.Getpid()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	var above, below []int
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		if tid > pid {
			above = append(above, tid)
		} else {
			below = append(below, tid)
		}
	}
	tids := above
	if len(tids) == 0 {
		tids = below
	}
	if len(tids) == 0 {
		return 0, errors.New("no thread besides the main one")
	}
	sort.Ints(tids)
	tid := tids[0]
	// The system call it is blocked in (first field), or "running".
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("thread %d: empty syscall file", tid)
	}
	if n, err := strconv.Atoi(f[0]); err == nil && n != syscall.SYS_NANOSLEEP && n != syscall.SYS_FUTEX {
		return 0, fmt.Errorf("thread %d is in system call %d, not nanosleep or futex: not sysmon", tid, n)
	}
	return tid, nil
}
