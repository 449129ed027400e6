package latencyproxy

import (
	"time"

	"golang.org/x/sys/unix"
)

// setTimerSlack sets the calling thread's timer slack (ns; 0 restores the
// default) so that nanosleep wakes close to its deadline.
func setTimerSlack(ns int) { unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0) }

// nanosleep sleeps d on the calling thread with nanosleep(2).
func nanosleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
