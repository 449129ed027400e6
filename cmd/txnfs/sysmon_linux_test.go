package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func threadSlack(t *testing.T, tid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", tid))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSlowSysmon checks that slowSysmon finds a thread that sleeps like
// sysmon, gives it the slack, and leaves (or puts back) every other
// thread's.
func TestSlowSysmon(t *testing.T) {
	tid, err := sysmonThread()
	if err != nil {
		t.Fatal(err)
	}
	if tid == os.Getpid() {
		t.Fatalf("sysmonThread returned the main thread %d", tid)
	}
	def := threadSlack(t, os.Getpid())
	old := threadSlack(t, tid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := slowSysmon(ctx, 3*time.Millisecond); err != nil {
		if errors.Is(err, os.ErrPermission) {
			t.Skipf("no CAP_SYS_NICE: %v", err)
		}
		t.Fatal(err)
	}
	defer setSlack(tid, []byte(strconv.FormatInt(old, 10)))
	if got := threadSlack(t, tid); got != 3e6 {
		t.Fatalf("sysmon thread %d: slack %d, want 3ms", tid, got)
	}
	// A thread that inherited sysmon's slack gets the default back.
	other := 0
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		if n, _ := strconv.Atoi(e.Name()); n != tid && n != os.Getpid() {
			other = n
			break
		}
	}
	if other == 0 {
		t.Skip("no third thread")
	}
	if err := setSlack(other, []byte("2000000")); err != nil {
		t.Fatal(err)
	}
	resetSlack(tid, []byte(strconv.FormatInt(def, 10)))
	if got := threadSlack(t, other); got != def {
		t.Fatalf("thread %d: slack %d after resetSlack, want %d", other, got, def)
	}
	if got := threadSlack(t, tid); got != 3e6 {
		t.Fatalf("resetSlack changed sysmon's slack to %d", got)
	}
}

// TestServeProcs checks that serveProcs sets GOMAXPROCS unless the
// environment variable does, and to twice the default by default (not
// twice the current value: serve may run more than once in a process).
func TestServeProcs(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	t.Setenv("GOMAXPROCS", "5")
	serveProcs(3)
	if got := runtime.GOMAXPROCS(0); got != old {
		t.Fatalf("with GOMAXPROCS set: %d Ps, want %d (unchanged)", got, old)
	}
	t.Setenv("GOMAXPROCS", "")
	serveProcs(3)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("serveProcs(3): %d Ps", got)
	}
	for range 2 {
		serveProcs(0)
		if got := runtime.GOMAXPROCS(0); got != 2*defaultProcs {
			t.Fatalf("serveProcs(0): %d Ps, want %d", got, 2*defaultProcs)
		}
	}
}
