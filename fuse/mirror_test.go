//go:build linux

package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
)

// waitClosed waits until the mount has seen the RELEASE of every open of
// the file at path (the kernel sends it asynchronously after close).
func waitClosed(t *testing.T, m *Server, path string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	ino := fs.Ino(st.Ino)
	// The RELEASE comes after close returned; the bound only turns a
	// missing one into a failure (500 polls took about a second, short
	// for a loaded machine).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		m.mirrors.mu.Lock()
		c := m.mirrors.opens[ino]
		m.mirrors.mu.Unlock()
		if c == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("%s: opens still counted 10 s after close", path)
}

// readAll reads path, returning its contents and the READ requests the
// mount served meanwhile.
func readCounted(t *testing.T, m *Server, path string) ([]byte, uint64) {
	t.Helper()
	before := m.readRequests.Load()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, m.readRequests.Load() - before
}

// TestMirrorPassthrough: a file written through the mount is read back
// by passthrough from its mirror (no READ request), a writer opening
// while such a reader is open gets passthrough too and its writes reach
// the reader and (at fsync) the engine, and a write through another path
// (an O_APPEND handle) is seen.
func TestMirrorPassthrough(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	if m.mirrors == nil {
		t.Fatal("no mirrors on a local mount")
	}
	p := filepath.Join(dir, "f")
	want := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	// Drop the FUSE page cache, so that a read through it would need
	// READ requests.
	dropPageCache(t, p)
	got, reads := readCounted(t, m, p)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not what was written", len(got))
	}
	if reads != 0 {
		t.Errorf("%d READ requests for a mirrored file (want 0: passthrough)", reads)
	}
	if st := m.MirrorStats(); st.PassthroughOpens == 0 || st.Mirrors != 1 || st.Used != int64(len(want)) {
		t.Errorf("stats %+v", st)
	}
	waitClosed(t, m, p)

	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	// A writer opening now gets passthrough too (the kernel takes
	// nothing else): its writes reach the reader through the mirror and
	// the engine at fsync.
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("writable open while a passthrough reader is open: %v", err)
	}
	if _, err := w.WriteAt([]byte("NEW"), 10); err != nil {
		t.Fatal(err)
	}
	want = append(append(append([]byte{}, want[:10]...), "NEW"...), want[13:]...)
	head := make([]byte, 16)
	if _, err := r.ReadAt(head, 0); err != nil || !bytes.Equal(head, want[:16]) {
		t.Errorf("passthrough reader after a passthrough write: %q, %v", head, err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	checkEngine(t, m, 0, "after fsync of a passthrough writer", p, want)
	w.Close()
	if st := m.MirrorStats(); st.PassthroughWriters != 1 || st.ReconciledBytes == 0 {
		t.Errorf("stats %+v", st)
	}
	// truncate(2) by path still works, and the reader sees it.
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 200)
	n, _ := r.ReadAt(buf, 0)
	if n != 100 || !bytes.Equal(buf[:n], want[:100]) {
		t.Errorf("after truncate to 100 the passthrough reader reads %d bytes", n)
	}
	r.Close()
	waitClosed(t, m, p)

	// O_APPEND writes drop the mirror; the next read goes through FUSE.
	a, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	waitClosed(t, m, p)
	got, _ = readCounted(t, m, p)
	if w := append(append([]byte{}, want[:100]...), "tail"...); !bytes.Equal(got, w) {
		t.Errorf("after append: %q...", got[min(len(got), 96):])
	}
}

// dropPageCache drops the kernel's cached pages of path.
func dropPageCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := fadviseDontNeed(f); err != nil {
		t.Fatal(err)
	}
}

func fadviseDontNeed(f *os.File) error {
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// TestMirrorBudget: mirrors beyond the budget are dropped least recently
// used first, except those with passthrough opens; a file without a
// mirror is read through FUSE, correctly.
func TestMirrorBudget(t *testing.T) {
	const budget = 3 << 20
	dir, m := newEnv(t, envOptions{mirror: budget}).mount()
	data := func(c byte) []byte { return bytes.Repeat([]byte{c}, 2<<20) }
	write := func(name string, c byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data(c), 0o644); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, m, p)
		return p
	}
	a := write("a", 'a')
	b := write("b", 'b') // a is evicted
	if st := m.MirrorStats(); st.Mirrors != 1 || st.Evicted != 1 || st.Used != 2<<20 {
		t.Fatalf("after two 2 MiB files with a 3 MiB budget: %+v", st)
	}
	dropPageCache(t, a)
	if got, reads := readCounted(t, m, a); !bytes.Equal(got, data('a')) || reads == 0 {
		t.Errorf("evicted a: equal %v, %d READs (want > 0)", bytes.Equal(got, data('a')), reads)
	}
	waitClosed(t, m, a)
	r, err := os.Open(b) // passthrough: b's mirror must stay
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := m.readRequests.Load()
	c := write("c", 'c') // over budget: c goes, b stays
	if st := m.MirrorStats(); st.Mirrors != 1 || st.Evicted != 2 {
		t.Errorf("after c: %+v", st)
	}
	got := make([]byte, 3<<20)
	if n, _ := r.ReadAt(got, 0); n != 2<<20 || !bytes.Equal(got[:n], data('b')) || m.readRequests.Load() != before {
		t.Errorf("passthrough reader of b: %d bytes, %d READs", n, m.readRequests.Load()-before)
	}
	if got, _ := readCounted(t, m, c); !bytes.Equal(got, data('c')) {
		t.Error("c read wrong")
	}
}

// TestMirrorSandbox: a sandbox cannot begin while passthrough opens
// exist (their reads would bypass its transaction); inside it nothing is
// mirrored and reads go through the sandbox; afterwards files are
// mirrored again.
func TestMirrorSandbox(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("committed"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.MirrorStats().PassthroughOpens != 1 {
		t.Fatalf("no passthrough open: %+v", m.MirrorStats())
	}
	if _, err := Control(dir, OpBegin); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("begin with a passthrough reader open: %v, want EBUSY", err)
	}
	r.Close()
	waitClosed(t, m, p)
	if _, err := Control(dir, OpBegin); err != nil {
		t.Fatal(err)
	}
	if st := m.MirrorStats(); st.Mirrors != 0 {
		t.Errorf("mirrors inside a sandbox: %+v", st)
	}
	if err := os.WriteFile(p, []byte("sandboxed"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	pt := m.MirrorStats().PassthroughOpens
	if got, err := os.ReadFile(p); err != nil || string(got) != "sandboxed" {
		t.Errorf("read in the sandbox: %q, %v", got, err)
	}
	if st := m.MirrorStats(); st.PassthroughOpens != pt || st.Mirrors != 0 {
		t.Errorf("passthrough inside a sandbox: %+v", st)
	}
	if _, err := Control(dir, OpAbort); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	if got, err := os.ReadFile(p); err != nil || string(got) != "committed" {
		t.Errorf("after abort: %q, %v", got, err)
	}
	if err := os.WriteFile(p, []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	if got, reads := readCounted(t, m, p); string(got) != "again" || reads != 0 || m.MirrorStats().PassthroughOpens != pt+1 {
		t.Errorf("after the sandbox: %q, %d READs, %+v", got, reads, m.MirrorStats())
	}
}

// TestMirrorKill9: the mirror is only a cache: kill -9 of a mount with
// mirrored files (one open for passthrough reads, one being written)
// leaves the engine with what was written, and no tmpfs behind.
func TestMirrorKill9(t *testing.T) {
	requireFUSE(t)
	root := t.TempDir()
	data, mnt := filepath.Join(root, "data"), filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")
	d := startDaemon(t, data, mnt)
	want := bytes.Repeat([]byte("mirrored data "), 100_000)
	p := filepath.Join(mnt, "read")
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the RELEASE
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read before kill: %d bytes, %v", len(got), err)
	}
	w, err := os.Create(filepath.Join(mnt, "written"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	r.Close()
	w.Close()
	bin, _ := txnfsBinary()
	if out, err := exec.Command(bin, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("txnfs umount of a dead mount: %v\n%s", err, out)
	}
	if mountsAfter, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Count(mountsAfter, []byte("txnfs-mirror")) > bytes.Count(mountsBefore, []byte("txnfs-mirror")) {
		t.Error("a mirror tmpfs is left mounted")
	}
	d2 := startDaemon(t, data, mnt)
	for _, name := range []string{"read", "written"} {
		if got, err := os.ReadFile(filepath.Join(mnt, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after kill -9: %d bytes, %v", name, len(got), err)
		}
	}
	d2.cmd.Process.Signal(syscall.SIGTERM)
	d2.cmd.Wait()
}

// TestMirrorExecWhileRead: a program written through the mount runs
// while a passthrough reader has it open (the exec's open is then
// passthrough too and maps the mirror), and after.
func TestMirrorExecWhileRead(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	prog, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	p := filepath.Join(dir, "true")
	if err := os.WriteFile(p, prog, 0o755); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.MirrorStats().PassthroughOpens != 1 {
		t.Fatalf("reader not passthrough: %+v", m.MirrorStats())
	}
	if out, err := exec.Command(p).CombinedOutput(); err != nil {
		t.Errorf("exec while a passthrough reader is open: %v %s", err, out)
	}
	if n := m.MirrorStats().PassthroughOpens; n != 2 {
		t.Errorf("the exec's open was not passthrough (%d passthrough opens)", n)
	}
	r.Close()
	waitClosed(t, m, p)
	if out, err := exec.Command(p).CombinedOutput(); err != nil {
		t.Errorf("exec: %v %s", err, out)
	}
}

// TestMirrorMmapWriter: stores through a shared mapping of a passthrough
// writer (opened while a passthrough reader is open) land in the mirror,
// which the reader sees at once, and in the engine at the last close.
func TestMirrorMmapWriter(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	p := filepath.Join(dir, "f")
	want := bytes.Repeat([]byte("x"), 1<<20)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.MirrorStats().PassthroughWriters != 1 {
		t.Fatalf("writer not passthrough: %+v", m.MirrorStats())
	}
	b, err := unix.Mmap(int(w.Fd()), 0, len(want), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[4096:], "mapped")
	copy(want[4096:], "mapped")
	got := make([]byte, 6)
	if _, err := r.ReadAt(got, 4096); err != nil || string(got) != "mapped" {
		t.Errorf("reader sees %q, %v", got, err)
	}
	unix.Munmap(b)
	w.Close()
	r.Close()
	waitClosed(t, m, p)
	checkEngine(t, m, 0, "after the mapping's last close", p, want)
}

// TestMirrorConcurrentOpens: readers and writers open and close one file
// concurrently, so opens arrive in every mode mix (passthrough readers,
// passthrough or cached writers, cached readers): no open may fail (the
// kernel answers EIO to a mode it refuses), every byte read is one a
// writer wrote, and at the end the mount and the engine hold the last
// version.
func TestMirrorConcurrentOpens(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	p := filepath.Join(dir, "f")
	const size = 256 << 10
	if err := os.WriteFile(p, bytes.Repeat([]byte{1}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var version atomic.Int32
	version.Store(1)
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for {
				select {
				case <-stop:
					return
				default:
				}
				f, err := os.Open(p)
				if err != nil {
					errs <- fmt.Errorf("reader open: %w", err)
					return
				}
				n, err := f.ReadAt(buf, 0)
				f.Close()
				if n != size {
					errs <- fmt.Errorf("read %d bytes: %v", n, err)
					return
				}
				hi := byte(version.Load())
				for i, c := range buf {
					if c == 0 || c > hi {
						errs <- fmt.Errorf("byte %d is %d, versions 1..%d were written", i, c, hi)
						return
					}
				}
			}
		}()
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for v := 2; v < 120; v++ {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				errs <- fmt.Errorf("writer open: %w", err)
				return
			}
			version.Store(int32(v))
			if _, err := f.WriteAt(bytes.Repeat([]byte{byte(v)}, size), 0); err != nil {
				errs <- fmt.Errorf("write: %w", err)
			}
			if v%10 == 0 {
				f.Sync()
			}
			f.Close()
			time.Sleep(time.Millisecond)
		}
	}()
	<-writerDone
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	waitClosed(t, m, p)
	want := bytes.Repeat([]byte{119}, size)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Errorf("final read: %v", err)
	}
	checkEngine(t, m, 0, "at the end", p, want)
	st := m.MirrorStats()
	t.Logf("passthrough opens %d (writers %d), reconciled %d", st.PassthroughOpens, st.PassthroughWriters, st.Reconciled)
}

// TestMirrorReaddirplusSize: a directory listing with attributes
// (READDIRPLUS) reports the size a passthrough writer gave the file.
func TestMirrorReaddirplusSize(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m, p)
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	// Drop the kernel's entry and attributes, so that the listing's
	// attributes are taken.
	m.srv.EntryNotify(1, "f")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("readdir: %v %v", entries, err)
	}
	if st, err := os.Stat(p); err != nil || st.Size() != 1<<20 {
		t.Errorf("size after a listing: %v, %v (want %d)", st.Size(), err, 1<<20)
	}
}
