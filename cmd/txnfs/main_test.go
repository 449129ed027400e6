package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
)

func runCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), args, &out, &out)
	return code, out.String()
}

// populate writes a file big enough to live in a slice, then removes
// another one so the collector has garbage to find.
func populate(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	e, err := datadir.Open(ctx, datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	data := bytes.Repeat([]byte("txnfs"), 100000)
	err = e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		for _, name := range []string{"keep", "drop"} {
			a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
			if err != nil {
				return err
			}
			if err := tx.Write(ctx, a.Ino, 0, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, "drop") })
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestFsckOnNewDirectoryIsClean(t *testing.T) {
	// A new data directory, as serve or mount creates it (fsck refuses
	// to create one: TestBadInput).
	dir := filepath.Join(t.TempDir(), "new")
	e, err := datadir.Open(context.Background(), datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	code, out := runCmd(t, "fsck", "--data", dir)
	if code != 0 || !strings.Contains(out, "no problems") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestGCFreesDeletedFileAndFsckStaysClean(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	code, out := runCmd(t, "gc", "--data", dir)
	// The dropped file's 500000 bytes, plus the alignment padding next to
	// it when the slice store wrote the puts with O_DIRECT (at most one
	// page on each side of each of the two puts).
	var freed int
	if i := strings.Index(out, "freed "); i >= 0 {
		fmt.Sscanf(out[i:], "freed %d bytes", &freed)
	}
	if code != 0 || freed < 500000 || freed > 500000+4*4096 {
		t.Fatalf("gc exit %d, freed %d bytes, want 500000 (+ padding): %s", code, freed, out)
	}
	if code, out := runCmd(t, "fsck", "--data", dir); code != 0 {
		t.Fatalf("fsck after gc, exit %d: %s", code, out)
	}
}

func TestFsckReportsCorruptSlice(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	// Flip one byte in every backing file that holds data.
	files, _ := filepath.Glob(filepath.Join(dir, "slices", "*"))
	flipped := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		flipped++
	}
	if flipped == 0 {
		t.Fatal("no backing file with data found")
	}
	code, out := runCmd(t, "fsck", "--data", dir)
	if code != 1 || !strings.Contains(out, "problem:") || !strings.Contains(out, "corrupt") {
		t.Fatalf("fsck of a corrupt slice: exit %d: %s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nosuch"}, {"fsck"}, {"gc", "--data"}, {"fsck", "--data", "x", "extra"},
		{"mount", "--dirty-max-ratio", "5", "--data", "x", "mnt"}} {
		if code, out := runCmd(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2: %s", args, code, out)
		}
	}
}

func TestServeStopsCleanlyOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, &out, &out)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "serving") {
		if time.Now().After(deadline) {
			t.Fatalf("server did not log readiness: %s", out.String())
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited early with %d: %s", code, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d: %s", code, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop after cancellation")
	}
}

// TestDataDirInUse: a second process on a data directory is refused (the
// slice store's lock); the message said only "resource temporarily
// unavailable". The lock is held by a child process (this test binary
// running TestHoldDataDir): the lock is per process.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldDataDir$")
	cmd.Env = append(os.Environ(), "TXNFS_TEST_HOLD="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("helper: %q %v", line, err)
	}
	for _, args := range [][]string{{"fsck", "--data", dir}, {"gc", "--data", dir}, {"mount", "--data", dir, t.TempDir()}} {
		code, out := runCmd(t, args...)
		if code != 1 || strings.Count(out, "the data directory is in use by another txnfs") != 1 {
			t.Errorf("%q: exit %d: %s", args, code, out)
		}
	}
}

// TestHoldDataDir is TestDataDirInUse's child: it opens the data
// directory TXNFS_TEST_HOLD, says "held" and waits for stdin to close.
func TestHoldDataDir(t *testing.T) {
	dir := os.Getenv("TXNFS_TEST_HOLD")
	if dir == "" {
		t.Skip("TestDataDirInUse's helper")
	}
	e, err := datadir.Open(context.Background(), datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fmt.Println("held")
	io.Copy(io.Discard, os.Stdin)
}
