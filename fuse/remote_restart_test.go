//go:build linux

package fuse

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	raw "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/internal/nfspeers"
)

// serveProcess is a `txnfs serve` process on a fixed address and data
// directory, so that it can be killed and started again as "the same
// server".
type serveProcess struct {
	t          *testing.T
	bin, addr  string
	data       string
	cmd        *exec.Cmd
	log        *syncBuffer
	extraFlags []string
}

func startServeProcess(t *testing.T, extra ...string) *serveProcess {
	t.Helper()
	bin, err := txnfsBinary()
	if err != nil {
		t.Skip(err)
	}
	port, err := nfspeers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &serveProcess{t: t, bin: bin, addr: fmt.Sprintf("127.0.0.1:%d", port),
		data: filepath.Join(t.TempDir(), "data"), log: &syncBuffer{}, extraFlags: extra}
	s.start()
	t.Cleanup(func() {
		if s.cmd != nil {
			s.cmd.Process.Signal(syscall.SIGTERM)
			s.cmd.Wait()
		}
	})
	return s
}

// start starts the server and waits until it accepts connections.
func (s *serveProcess) start() {
	s.t.Helper()
	args := append([]string{"serve", "--data", s.data, "--listen", s.addr, "--log-level", "info"}, s.extraFlags...)
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for attempt := 0; ; attempt++ {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			c.Close()
			return
		}
		if attempt == 200 {
			s.t.Fatalf("server does not listen on %s: %v\n%s", s.addr, err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill kills the server with SIGKILL (no clean shutdown).
func (s *serveProcess) kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// restartableRemote starts a `txnfs serve` process (30 s grace period)
// and a remoteEnv whose mounts use it.
func restartableRemote(t *testing.T) (*serveProcess, *remoteEnv) {
	t.Helper()
	requireFUSE(t)
	srv := startServeProcess(t, "--grace", "30s")
	e := &remoteEnv{t: t, peer: &nfspeers.Peer{Name: "txnfs serve", Addr: srv.addr}}
	t.Cleanup(func() {
		for _, m := range e.mounts {
			unmountRetry(t, m)
			m.cfg.Client.Close()
		}
	})
	return srv, e
}

// TestRemoteServerRestart: a program holding an open file and POSIX locks
// through a remote mount keeps both across a crash and restart of the
// server (kill -9, start on the same data directory and port): the mount
// reclaims its opens and locks in the server's grace period, I/O through
// the same descriptor works, and another client still cannot take a
// conflicting lock.
func TestRemoteServerRestart(t *testing.T) {
	srv, e := restartableRemote(t)
	a, _ := e.mount()
	b, _ := e.mount()

	fa, err := os.OpenFile(filepath.Join(a, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := fa.WriteAt([]byte("hello world"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	// A write lock on [0, 5) and a read lock from 100 to the end of file.
	wr := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 5}
	rd := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 100, Len: 0}
	for _, lk := range []*unix.Flock_t{&wr, &rd} {
		if err := unix.FcntlFlock(fa.Fd(), unix.F_SETLK, lk); err != nil {
			t.Fatalf("F_SETLK %+v: %v", *lk, err)
		}
	}
	fb, err := os.OpenFile(filepath.Join(b, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	conflicts := func(when string) {
		t.Helper()
		w := unix.Flock_t{Type: unix.F_WRLCK, Start: 2, Len: 1}
		wantErrno(t, when+": write lock inside the held write lock", unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &w), unix.EAGAIN)
		w = unix.Flock_t{Type: unix.F_WRLCK, Start: 150, Len: 10}
		wantErrno(t, when+": write lock inside the held read lock", unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &w), unix.EAGAIN)
		r := unix.Flock_t{Type: unix.F_RDLCK, Start: 150, Len: 10}
		if err := unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &r); err != nil {
			t.Errorf("%s: shared read lock: %v", when, err)
		}
		r.Type = unix.F_UNLCK
		if err := unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &r); err != nil {
			t.Errorf("%s: unlock: %v", when, err)
		}
	}
	conflicts("before the restart")

	srv.kill()
	srv.start()
	start := time.Now()

	// The same descriptor: write, fsync, read.
	if _, err := fa.WriteAt([]byte("HELLO"), 0); err != nil {
		t.Fatalf("write through the descriptor opened before the restart: %v\nserver: %s", err, srv.log.String())
	}
	if err := fa.Sync(); err != nil {
		t.Fatalf("fsync after the restart: %v", err)
	}
	t.Logf("first write after the restart: %v", time.Since(start))
	buf := make([]byte, 11)
	if _, err := fa.ReadAt(buf, 0); err != nil || string(buf) != "HELLO world" {
		t.Fatalf("read after the restart: %q %v", buf, err)
	}
	// The other client sees the write and still conflicts with A's locks.
	if got := readFile(t, filepath.Join(b, "f")); got != "HELLO world" {
		t.Errorf("other mount reads %q", got)
	}
	conflicts("after the restart")
	t.Logf("grace period over for both clients after %v", time.Since(start))
	// A new open (not a reclaim) works once the grace period is over.
	writeFile(t, filepath.Join(a, "g"), "new")
	// A's unlock of the reclaimed write lock lets B take it.
	un := unix.Flock_t{Type: unix.F_UNLCK, Start: 0, Len: 5}
	if err := unix.FcntlFlock(fa.Fd(), unix.F_SETLK, &un); err != nil {
		t.Fatalf("unlock of the reclaimed lock: %v", err)
	}
	w := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 5}
	if err := unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &w); err != nil {
		t.Errorf("lock after the holder's unlock: %v", err)
	}
	// The read lock is still held after the unlock of the other range.
	w = unix.Flock_t{Type: unix.F_WRLCK, Start: 100, Len: 1}
	wantErrno(t, "write lock inside the read lock after the unlock", unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &w), unix.EAGAIN)
}

// TestHeldRanges: the lock ranges a mount remembers for reclaim follow
// POSIX lock and unlock semantics (a lock replaces what the owner held in
// its range; an unlock can split a range).
func TestHeldRanges(t *testing.T) {
	const (
		r = nfsv4.READ_LT
		w = nfsv4.WRITE_LT
	)
	eof := uint64(math.MaxUint64)
	var rs []heldRange
	rs = held(rs, 0, 10, w)
	rs = held(rs, 10, 20, nfsv4.WRITEW_LT) // merges with [0, 10)
	rs = held(rs, 100, eof, r)
	rs = held(rs, 5, 8, r) // splits the write lock
	want := []heldRange{{0, 5, w}, {5, 8, r}, {8, 20, w}, {100, eof, r}}
	if fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Fatalf("after locks: %v, want %v", rs, want)
	}
	rs = unheld(rs, 3, 150)
	want = []heldRange{{0, 3, w}, {150, eof, r}}
	if fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Fatalf("after unlock: %v, want %v", rs, want)
	}
	if off, n := rs[1].nfs(); off != 150 || n != nfsv4.NFS4_UINT64_MAX {
		t.Errorf("to end of file: %d %d", off, n)
	}
	if end := rangeEnd(1<<63, 1<<63+5); end != eof {
		t.Errorf("overflowing range end %d", end)
	}
	if rs = unheld(rs, 0, eof); len(rs) != 0 {
		t.Errorf("unlock of everything leaves %v", rs)
	}
}

// TestRemoteLockAfterCloseRace replays, request by request, what the
// kernel sends when a process closes one descriptor of a file and locks
// through another before the first one's (asynchronous) RELEASE arrives:
// the lock goes through the lock state of the first descriptor's open,
// and that RELEASE must not close the open (the server would free the
// lock with it). TestRemoteLocks hit this rarely.
func TestRemoteLockAfterCloseRace(t *testing.T) {
	e := newRemoteEnv(t)
	a, m := e.mount()
	b, _ := e.mount()
	writeFile(t, filepath.Join(a, "lock"), "0123456789")
	hdr := raw.InHeader{NodeId: 1}
	var entry raw.EntryOut
	if st := m.Lookup(nil, &hdr, "lock", &entry); st != raw.OK {
		t.Fatalf("lookup: %v", st)
	}
	defer m.Forget(entry.NodeId, 1)
	open := func() uint64 {
		var out raw.OpenOut
		if st := m.Open(nil, &raw.OpenIn{InHeader: raw.InHeader{NodeId: entry.NodeId}, Flags: syscall.O_RDWR}, &out); st != raw.OK {
			t.Fatalf("open: %v", st)
		}
		return out.Fh
	}
	const owner = 7
	lk := func(fh uint64, typ uint32) raw.Status {
		return m.SetLk(nil, &raw.LkIn{InHeader: raw.InHeader{NodeId: entry.NodeId}, Fh: fh, Owner: owner,
			Lk: raw.FileLock{Start: 0, End: 4, Typ: typ}})
	}
	fh1, fh2 := open(), open()
	if st := lk(fh1, syscall.F_WRLCK); st != raw.OK {
		t.Fatalf("lock through the first descriptor: %v", st)
	}
	if st := lk(fh1, syscall.F_UNLCK); st != raw.OK { // close(fd1): the kernel unlocks
		t.Fatalf("unlock: %v", st)
	}
	if st := lk(fh2, syscall.F_WRLCK); st != raw.OK { // lock through fd2, RELEASE of fd1 not yet there
		t.Fatalf("lock through the second descriptor: %v", st)
	}
	m.Release(nil, &raw.ReleaseIn{InHeader: raw.InHeader{NodeId: entry.NodeId}, Fh: fh1, LockOwner: owner})
	fb, err := os.OpenFile(filepath.Join(b, "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	w := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 5}
	wantErrno(t, "lock held through the second descriptor, from the other mount", unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &w), unix.EAGAIN)
	// The unlock through fd2 closes the first open (it lingered).
	if st := lk(fh2, syscall.F_UNLCK); st != raw.OK {
		t.Fatalf("unlock through the second descriptor: %v", st)
	}
	m.locks.mu.Lock()
	lingering := len(m.locks.lingering)
	m.locks.mu.Unlock()
	if lingering != 0 {
		t.Errorf("%d open states still kept after the unlock", lingering)
	}
	if err := unix.FcntlFlock(fb.Fd(), unix.F_SETLK, &w); err != nil {
		t.Errorf("lock from the other mount after the unlock: %v", err)
	}
	m.Release(nil, &raw.ReleaseIn{InHeader: raw.InHeader{NodeId: entry.NodeId}, Fh: fh2, LockOwner: owner})
}

// TestRemoteLockWaitWakes: a blocked flock (F_SETLKW-like) on a remote
// mount gets the lock as soon as another descriptor of the same mount
// unlocks, not at its next poll (which is up to 1 s away after a long
// wait).
func TestRemoteLockWaitWakes(t *testing.T) {
	mnt := mountRemoteOne(t)
	p := filepath.Join(mnt, "lock")
	writeFile(t, p, "x")
	f1, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if err := unix.Flock(int(f2.Fd()), unix.LOCK_EX); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	// Long enough for the poll interval to reach 1 s (10 ms doubling).
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("second flock returned while the first held the lock")
	default:
	}
	unlocked := time.Now()
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		lat := at.Sub(unlocked)
		t.Logf("waiter got the lock %v after the unlock", lat)
		if lat > 700*time.Millisecond {
			t.Errorf("waiter got the lock %v after the unlock: it polled instead of being woken", lat)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter still blocked 10 s after the unlock")
	}
}

// TestRemoteUnstableResend: writes the server answered UNSTABLE and then
// lost in a crash (the data directory set back to a copy taken before
// them, as a power failure would) are written again at fsync, because
// the COMMIT's write verifier is not theirs; the fsync succeeds and
// another mount reads the new data. Without the copies the fsync would
// succeed over the old data.
func TestRemoteUnstableResend(t *testing.T) {
	srv, e := restartableRemote(t)
	a, ma := e.mount()
	old := bytes.Repeat([]byte("old data "), 300_000) // 2.7 MB: several WRITEs
	f, err := os.OpenFile(filepath.Join(a, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(old, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// A crash-consistent copy of the server's state with the old data.
	srv.kill()
	snap := filepath.Join(t.TempDir(), "snap")
	if out, err := exec.Command("cp", "-a", srv.data, snap).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	srv.start()

	fresh := bytes.Repeat([]byte("NEW DATA "), 300_000)
	if _, err := f.WriteAt(fresh, 0); err != nil {
		t.Fatalf("write after the first restart: %v\n%s", err, srv.log.String())
	}
	// The server loses those writes: it restarts from the copy.
	srv.kill()
	if err := os.RemoveAll(srv.data); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(snap, srv.data); err != nil {
		t.Fatal(err)
	}
	srv.start()

	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the server lost the writes: %v\n%s", err, srv.log.String())
	}
	if ma.rewrites.Load() == 0 {
		t.Errorf("no write was sent again")
	}
	b, _ := e.mount()
	got, err := os.ReadFile(filepath.Join(b, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fresh) {
		t.Fatalf("other mount reads %d bytes starting %q, want the rewritten data", len(got), got[:min(len(got), 18)])
	}
}
