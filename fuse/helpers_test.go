//go:build linux

package fuse

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/datadir"
)

// requireFUSE skips the test unless it can mount: root and /dev/fuse.
func requireFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("FUSE mount tests need root (they mount with mount(2) and switch users)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("FUSE mount tests need /dev/fuse: %v", err)
	}
}

// env is an engine with one or more mounts of it.
type env struct {
	writeback bool
	wbDelay   time.Duration
	mirror    int64
	t         testing.TB
	data      string
	engine    *datadir.Engine
	group     *Group
	mounts    []*Server
}

type envOptions struct {
	writeback bool          // kernel writeback cache
	sync      bool          // durable commits (default: pebble NoSync for speed)
	group     bool          // join the mounts in a Group
	wbDelay   time.Duration // Config.WriteBehindDelay (0: the default)
	mirror    int64         // Config.MirrorBytes (0: no mirrors)
}

// newEnv opens an engine in a temporary directory.
func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	requireFUSE(t)
	e := &env{t: t, data: filepath.Join(t.TempDir(), "data"), writeback: o.writeback, wbDelay: o.wbDelay, mirror: o.mirror}
	eng, err := datadir.Open(context.Background(), datadir.Options{Dir: e.data, NoSync: !o.sync})
	if err != nil {
		t.Fatal(err)
	}
	e.engine = eng
	if o.group {
		e.group = NewGroup()
	}
	t.Cleanup(func() {
		for _, m := range e.mounts {
			unmountRetry(t, m)
		}
		if err := eng.Close(); err != nil {
			t.Errorf("closing engine: %v", err)
		}
	})
	return e
}

// mount mounts the engine on a new temporary directory.
func (e *env) mount() (string, *Server) {
	e.t.Helper()
	return e.mountWriteback(e.writeback)
}

// mountWriteback is mount with or without the kernel writeback cache,
// whatever the env's default.
func (e *env) mountWriteback(writeback bool) (string, *Server) {
	e.t.Helper()
	dir := filepath.Join(e.t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	// Let other users reach the mount (tests switch users).
	for p := filepath.Dir(dir); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	m, err := Mount(context.Background(), dir, Config{
		FS:          e.engine.FS,
		AllowOther:  true,
		DirectMount: true,
		Group:       e.group,
		Writeback:   writeback,
		Logger:      testLogger(e.t),

		WriteBehindDelay: e.wbDelay,
		MirrorBytes:      e.mirror,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.mounts = append(e.mounts, m)
	return dir, m
}

func unmountRetry(t testing.TB, m interface {
	Unmount() error
	Dir() string
}) {
	var err error
	for range 50 {
		if err = m.Unmount(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("unmount %s: %v; detaching", m.Dir(), err)
	Unmount(m.Dir(), true)
}

// mountOne is newEnv + mount for the common case.
func mountOne(t testing.TB) string {
	dir, _ := newEnv(t, envOptions{}).mount()
	return dir
}

// command returns a command that runs name with args in dir through
// /bin/sh. A test process serves its own mounts, so it must never make a
// forked child touch the mount before exec (golang/go#21014: the vfork'd
// child would block in the kernel on this very process, which cannot stop
// the world for GC while that thread sits in clone): the shell, not the
// child, changes into dir and execs the program.
func command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", append([]string{"-c", `cd "$0" && exec "$@"`, dir, name}, args...)...)
	cmd.Dir = "/"
	return cmd
}

// run runs a command in dir and returns its combined output.
func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := command(dir, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func writeFile(t testing.TB, path string, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testLogger logs warnings and errors to stderr (not t.Log: the mount may
// log after the test has finished).
func testLogger(testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// names lists a directory's entry names, sorted.
func names(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// syncBuffer is a goroutine-safe bytes.Buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// asUser runs a command as uid:gid (with no supplementary groups unless
// given) and returns its combined output.
func asUserErr(uid, gid uint32, groups []uint32, name string, args ...string) (string, error) {
	cmd := command("/", name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func asUser(t testing.TB, uid, gid uint32, name string, args ...string) string {
	t.Helper()
	out, err := asUserErr(uid, gid, []uint32{}, name, args...)
	if err != nil {
		t.Fatalf("as %d:%d: %s %v: %v\n%s", uid, gid, name, args, err, out)
	}
	return out
}
