//go:build linux

package fuse

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/txnfs/txnfs/internal/latencyproxy"
	"github.com/txnfs/txnfs/nfs4/client"
)

// TestRemoteHardOutage: a remote mount over a hard client (the default of
// `txnfs mount --server`) while its server is unreachable (a proxy that
// resets every connection): a create waits and succeeds once the server
// is back; a caller killed while waiting, and one released by a forced
// unmount, end their requests, so the mount process ends while the
// server is still down.
func TestRemoteHardOutage(t *testing.T) {
	e := newRemoteEnv(t)
	px, err := latencyproxy.New(e.peer.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	c, err := client.Dial(context.Background(), client.Config{Addr: px.Addr(), Hard: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := MountRemote(context.Background(), dir, Config{Client: c, AllowOther: true, DirectMount: true,
		Logger: testLogger(t), EntryTimeout: -1, AttrTimeout: -1, NegativeTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { m.Wait(); close(ended) }()
	defer func() {
		px.SetDown(false)
		select {
		case <-ended:
		default:
			unmountRetry(t, m)
		}
	}()
	writeFile(t, filepath.Join(dir, "a"), "before")

	// A create during the outage waits for the server.
	px.SetDown(true)
	created := make(chan error, 1)
	go func() { created <- os.WriteFile(filepath.Join(dir, "b"), []byte("during"), 0o644) }()
	select {
	case err := <-created:
		t.Fatalf("create returned during the outage: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	px.SetDown(false)
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("create after the outage: %v", err)
		}
	case <-time.After(3 * client.HardRetryMax):
		t.Fatal("create did not complete after the server came back")
	}
	if got := readFile(t, filepath.Join(dir, "b")); got != "during" {
		t.Fatalf("b holds %q", got)
	}

	// Callers that stop waiting: one killed, one released by a forced
	// unmount. Their requests must end, or the mount cannot.
	px.SetDown(true)
	blocked := func(name string) *exec.Cmd {
		cmd := exec.Command("touch", filepath.Join(dir, name))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	killed, released := blocked("c"), blocked("d")
	exited := make(chan error, 2)
	for _, cmd := range []*exec.Cmd{killed, released} {
		go func() { exited <- cmd.Wait() }()
	}
	select {
	case err := <-exited:
		t.Fatalf("touch returned during the outage: %v", err)
	case <-time.After(time.Second):
	}
	killed.Process.Kill()
	select {
	case err := <-exited:
		if err == nil {
			t.Fatal("killed touch succeeded")
		}
	case <-time.After(5 * time.Second):
		// The kernel waits for the answer to a request the mount has
		// read, even for a killed caller.
		t.Fatal("killed touch still blocked: its request was not ended")
	}
	if err := Unmount(dir, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatal("touch released by the forced unmount succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("touch still blocked after a forced unmount")
	}
	select {
	case <-ended:
	case <-time.After(shutdownTimeout / 2):
		t.Fatal("the mount did not end after a forced unmount while the server is down")
	}
}
