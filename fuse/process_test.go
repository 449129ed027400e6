//go:build linux

package fuse

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as a helper process (appender).
func TestMain(m *testing.M) {
	if spec := os.Getenv("TXNFS_TEST_APPENDER"); spec != "" {
		os.Exit(appenderMain(spec))
	}
	code := m.Run()
	if txnfsBinDir != "" {
		os.RemoveAll(txnfsBinDir) // 35 MB per test run otherwise
	}
	os.Exit(code)
}

// appenderMain appends n records as writer w to path: "path,w,n".
func appenderMain(spec string) int {
	parts := strings.Split(spec, ",")
	w, _ := strconv.Atoi(parts[1])
	n, _ := strconv.Atoi(parts[2])
	f, err := os.OpenFile(parts[0], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := range n {
		if _, err := f.Write(record(w, i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// appendFromProcesses runs one appender process per path, concurrently.
func appendFromProcesses(t *testing.T, paths []string, n int) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(exe)
			cmd.Dir = "/"
			cmd.Env = append(os.Environ(), fmt.Sprintf("TXNFS_TEST_APPENDER=%s,%d,%d", p, w, n))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("appender %d: %v\n%s", w, err, out)
			}
		}()
	}
	wg.Wait()
}

// TestAppendTwoProcesses: two processes append to one file with O_APPEND,
// through one mount and through two mounts of the same file system (where
// the kernel cannot serialize them: the engine's atomic append must).
func TestAppendTwoProcesses(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, _ := e.mount()
	b, _ := e.mount()
	t.Run("OneMount", func(t *testing.T) {
		p := filepath.Join(a, "one")
		appendFromProcesses(t, []string{p, p}, 400)
		checkRecords(t, p, 2, 400)
	})
	t.Run("TwoMounts", func(t *testing.T) {
		appendFromProcesses(t, []string{filepath.Join(a, "two"), filepath.Join(b, "two")}, 400)
		c, _ := e.mount()
		checkRecords(t, filepath.Join(c, "two"), 2, 400)
		checkRecords(t, filepath.Join(a, "two"), 2, 400)
		checkRecords(t, filepath.Join(b, "two"), 2, 400)
	})
}

// TestCloseToOpen: what one mount wrote and closed, another mount of the
// same file system reads in full at its next open, including files
// replaced by rename.
func TestCloseToOpen(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, _ := e.mount()
	b, _ := e.mount()
	closeToOpenRounds(t, a, b)
	staleAfterStat(t, a, b, 0)
}

// closeToOpenRounds writes a file through mount a (in place, or a new
// file renamed over it) and reads it in full through mount b, and back,
// for 20 rounds of growing sizes.
func closeToOpenRounds(t *testing.T, a, b string) {
	t.Helper()
	p, q := filepath.Join(a, "f"), filepath.Join(b, "f")
	for i := range 20 {
		want := strings.Repeat(fmt.Sprint(i%10), 1000*(i+1))
		if i%2 == 0 {
			writeFile(t, p, want) // in place (O_TRUNC)
		} else {
			writeFile(t, p+".tmp", want)
			if err := os.Rename(p+".tmp", p); err != nil {
				t.Fatal(err)
			}
		}
		if got := readFile(t, q); got != want {
			t.Fatalf("round %d: other mount read %d bytes, want %d", i, len(got), len(want))
		}
		// And back.
		want += "!"
		writeFile(t, q, want)
		if got := readFile(t, p); got != want {
			t.Fatalf("round %d: first mount read %d bytes, want %d", i, len(got), len(want))
		}
	}
}

// staleAfterStat: mount b reads a file it wrote (its pages cached), mount
// a rewrites it in place with other bytes of the same size, b stats it
// (new attributes, old pages) and opens it: the open must drop the old
// pages. Attributes given to the kernel must not count as fresh pages.
func staleAfterStat(t *testing.T, a, b string, attrTimeout time.Duration) {
	t.Helper()
	p, q := filepath.Join(a, "g"), filepath.Join(b, "g")
	for i := range 5 {
		old, want := strings.Repeat("b", 8192+i), strings.Repeat(fmt.Sprint(i), 8192+i)
		writeFile(t, q, old)
		if got := readFile(t, q); got != old {
			t.Fatalf("round %d: own write read back wrong", i)
		}
		writeFile(t, p, want)
		time.Sleep(attrTimeout)
		if _, err := os.Stat(q); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, q); got != want {
			t.Fatalf("round %d: other mount read stale pages %q..., want %q...", i, got[:8], want[:8])
		}
	}
}

// txnfsBinDir holds the binary txnfsBinary built (removed by TestMain).
var txnfsBinDir string

// txnfsBinary builds cmd/txnfs once per test binary.
var txnfsBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "txnfs-bin")
	if err != nil {
		return "", err
	}
	txnfsBinDir = dir
	bin := filepath.Join(dir, "txnfs")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/txnfs").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// daemon is a "txnfs mount" process.
type daemon struct {
	cmd *exec.Cmd
	log *syncBuffer
}

func startDaemon(t *testing.T, data, mnt string, flags ...string) *daemon {
	t.Helper()
	bin, err := txnfsBinary()
	if err != nil {
		t.Skip(err)
	}
	d := &daemon{log: &syncBuffer{}}
	d.cmd = exec.Command(bin, append(append([]string{"mount"}, flags...), "--data", data, mnt)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
			Unmount(mnt, true)
		}
	})
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if mi, err := findMount(mnt); err == nil && mi.fstype == "fuse.txnfs" {
			return d
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("mount did not appear:\n%s", d.log.String())
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFsyncDurableAcrossKill9: data fsynced (and every reply, since each
// request commits durably) survives kill -9 of the mount process; "txnfs
// umount" recovers the dead mount and a new mount sees the data.
func TestFsyncDurableAcrossKill9(t *testing.T) {
	requireFUSE(t)
	root := t.TempDir()
	data, mnt := filepath.Join(root, "data"), filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	d := startDaemon(t, data, mnt)

	want := map[string][]byte{}
	for i := range 20 {
		name := fmt.Sprintf("f%02d", i)
		b := bytes.Repeat([]byte{byte('a' + i)}, 5000*(i+1))
		want[name] = b
		f, err := os.Create(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		f.Write(b)
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync: %v", err)
		}
		f.Close()
	}
	// A writer that fsyncs after every write and is killed with the file
	// open: its writes after the first fsync are synchronous and start
	// the fsync's Sync early (presync); the fsyncs alone make them durable.
	each, err := os.Create(filepath.Join(mnt, "each"))
	if err != nil {
		t.Fatal(err)
	}
	var eachData []byte
	for i := range 8 {
		b := bytes.Repeat([]byte{byte('A' + i)}, 64<<10+i)
		if _, err := each.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := each.Sync(); err != nil {
			t.Fatalf("fsync %d: %v", i, err)
		}
		eachData = append(eachData, b...)
	}
	want["each"] = eachData
	// 1 MiB writes of such a writer are answered before their commit
	// (queued with their request buffer lent, committed at once, the
	// early Sync run by whoever commits them): the fsync still makes
	// each durable.
	big, err := os.Create(filepath.Join(mnt, "each-1m"))
	if err != nil {
		t.Fatal(err)
	}
	var bigData []byte
	for i := range 6 {
		b := bytes.Repeat([]byte{byte('a' + i)}, 1<<20)
		if _, err := big.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := big.Sync(); err != nil {
			t.Fatalf("fsync of 1 MiB write %d: %v", i, err)
		}
		bigData = append(bigData, b...)
	}
	want["each-1m"] = bigData
	os.Mkdir(filepath.Join(mnt, "dir"), 0o700)
	os.Rename(filepath.Join(mnt, "f00"), filepath.Join(mnt, "dir", "renamed"))
	want["dir/renamed"] = want["f00"]
	delete(want, "f00")
	dirfd, _ := unix.Open(filepath.Join(mnt, "dir"), unix.O_RDONLY, 0)
	unix.Fsync(dirfd)
	unix.Close(dirfd)

	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	each.Close() // fails (the mount is dead); an open file would keep it busy
	big.Close()
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != unix.ENOTCONN {
		t.Logf("stat of the dead mount: %v (want ENOTCONN)", err)
	}
	bin, _ := txnfsBinary()
	if out, err := exec.Command(bin, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("txnfs umount of a dead mount: %v\n%s", err, out)
	}
	if _, err := findMount(mnt); err == nil {
		t.Fatal("dead mount still mounted")
	}

	d2 := startDaemon(t, data, mnt)
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s after kill -9: %d bytes, %v", name, len(got), err)
		}
	}
	if st, err := os.Stat(filepath.Join(mnt, "dir")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir after kill -9: %v", err)
	}

	// SIGTERM unmounts cleanly and the process exits 0.
	d2.cmd.Process.Signal(syscall.SIGTERM)
	if err := d2.cmd.Wait(); err != nil {
		t.Errorf("txnfs mount after SIGTERM: %v\n%s", err, d2.log.String())
	}
	if _, err := findMount(mnt); err == nil {
		t.Error("still mounted after SIGTERM")
		Unmount(mnt, true)
	}
}

// TestBackgroundMountAndUmount: --background returns once mounted, and
// "txnfs umount" ends the background process.
func TestBackgroundMountAndUmount(t *testing.T) {
	requireFUSE(t)
	bin, err := txnfsBinary()
	if err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	data, mnt := filepath.Join(root, "data"), filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command(bin, "mount", "--background", "--log", filepath.Join(root, "log"), "--data", data, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount --background: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(mnt, "x"), "hello")
	out, err := exec.Command(bin, "tx", "status", mnt).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "no sandbox") {
		t.Errorf("tx status: %v %s", err, out)
	}
	for _, op := range []string{"begin", "status", "abort"} {
		out, err := exec.Command(bin, "tx", op, mnt).CombinedOutput()
		if err != nil {
			t.Errorf("tx %s: %v %s", op, err, out)
		}
	}
	if out, err := exec.Command(bin, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	if _, err := findMount(mnt); err == nil {
		t.Fatal("still mounted")
	}
	// Remount: the data is there. (The old process may still be closing
	// the data directory, whose lock it holds, for a moment after the
	// unmount.)
	for attempt := 0; ; attempt++ {
		out, err := exec.Command(bin, "mount", "--background", "--data", data, mnt).CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 50 {
			t.Fatalf("mount --background: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer exec.Command(bin, "umount", "--force", mnt).Run()
	if got := readFile(t, filepath.Join(mnt, "x")); got != "hello" {
		t.Errorf("after remount: %q", got)
	}
}

// TestUmountForceHungServer: "txnfs umount --force" detaches a mount whose
// serving process hangs (stopped with SIGSTOP) instead of hanging itself
// (it stat'ed the mount point first, which waited for the hung server).
func TestUmountForceHungServer(t *testing.T) {
	requireFUSE(t)
	bin, err := txnfsBinary()
	if err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	data, mnt := filepath.Join(root, "data"), filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	// No attribute caching: the stat of the mount point reaches the
	// hung server.
	d := startDaemon(t, data, mnt, "--attr-timeout", "0", "--entry-timeout", "0")
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "umount", "--force", mnt).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("umount --force of a hung mount still running after 10 s")
	}
	if err != nil {
		t.Fatalf("umount --force: %v\n%s", err, out)
	}
	if _, err := findMount(mnt); err == nil {
		t.Fatal("still mounted after umount --force")
	}
}
