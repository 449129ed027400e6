package fuse

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/nfs4/client"
)

// remoteEnv is a txnfs NFS server (in this process, on loopback) with
// remote FUSE mounts of it, each through its own NFS client.
type remoteEnv struct {
	t      testing.TB
	peer   *nfspeers.Peer
	mounts []*RemoteServer
}

func newRemoteEnv(t testing.TB) *remoteEnv {
	t.Helper()
	requireFUSE(t)
	p, err := nfspeers.StartTxnfs(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &remoteEnv{t: t, peer: p}
	t.Cleanup(func() {
		for _, m := range e.mounts {
			unmountRetry(t, m)
			m.cfg.Client.Close()
		}
		if err := p.Stop(); err != nil {
			t.Errorf("stopping the server: %v", err)
		}
	})
	return e
}

// mount mounts the server on a new temporary directory.
func (e *remoteEnv) mount() (string, *RemoteServer) { return e.mountWith(Config{}) }

// mountUncached mounts the server with the kernel's caches off: an
// observer that sees the server's state at once.
func (e *remoteEnv) mountUncached() (string, *RemoteServer) {
	return e.mountWith(Config{EntryTimeout: -1, AttrTimeout: -1, NegativeTimeout: -1})
}

func (e *remoteEnv) mountWith(cfg Config) (string, *RemoteServer) {
	e.t.Helper()
	dir := filepath.Join(e.t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for p := filepath.Dir(dir); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	c, err := client.Dial(context.Background(), client.Config{Addr: e.peer.Addr})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Client, cfg.AllowOther, cfg.DirectMount, cfg.Logger = c, true, true, testLogger(e.t)
	m, err := MountRemote(context.Background(), dir, cfg)
	if err != nil {
		c.Close()
		e.t.Fatal(err)
	}
	e.mounts = append(e.mounts, m)
	return dir, m
}

// mountRemoteOne is newRemoteEnv + mount.
func mountRemoteOne(t testing.TB) string {
	dir, _ := newRemoteEnv(t).mount()
	return dir
}

func TestRemoteSmoke(t *testing.T) {
	mnt := mountRemoteOne(t)
	writeFile(t, filepath.Join(mnt, "a"), "hello")
	if got := readFile(t, filepath.Join(mnt, "a")); got != "hello" {
		t.Fatalf("read %q", got)
	}
	if err := os.MkdirAll(filepath.Join(mnt, "d/e/f"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "d/e/b")); err != nil {
		t.Fatal(err)
	}
	t.Log(names(t, filepath.Join(mnt, "d/e")))
	t.Log(run(t, mnt, "ls", "-laR"))
}

// remotePOSIXSkips are POSIX suite cases a remote mount does not pass,
// with the reason.
var remotePOSIXSkips = map[string]string{
	"RenameAtomicUnderReaders": "flaky on the txnfs NFS server: a READ through an open state sometimes gets NFS4ERR_STALE " +
		"when a rename replaces the file right after the OPEN (engine request 2, the pin/removal race, in nfs4/server)",
	"Xattr": "extended attributes are not served over NFS (the server has no NFSv4.2 xattr operations)",
}

// TestRemotePOSIX runs the POSIX suite on a remote mount.
func TestRemotePOSIX(t *testing.T) { posixSuite(t, mountRemoteOne(t), remotePOSIXSkips) }

// TestRemotePjdfstest runs pjdfstest on a remote mount
// (testdata/pjdfstest-remote.exclude lists the allowed failures).
func TestRemotePjdfstest(t *testing.T) {
	pjdfstest(t, func() string { return mountRemoteOne(t) }, "testdata/pjdfstest-remote.exclude")
}

// TestRemoteFsx runs fsx on a remote mount: -fsx.remote-ops operations
// with seed 1 (20,000 by default; 100,000 with -fsx.remote-ops=100000)
// and -fsx.random-ops with a random seed.
func TestRemoteFsx(t *testing.T) { fsx(t, func() string { return mountRemoteOne(t) }, *fsxRemoteOps) }

// TestRemoteSandboxFig8 is WTF's Fig. 8 on a remote mount (a server-side
// multi-compound transaction), observed through a second remote mount
// without kernel caches (a cached one would see the commit only when its
// caches expire).
func TestRemoteSandboxFig8(t *testing.T) {
	e := newRemoteEnv(t)
	a, ma := e.mount()
	b, _ := e.mountUncached()
	sandboxFig8(t, a, b, ma.Status)
}
