//go:build linux

package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

// slowCommits makes every write-behind commit of m take d (and counts
// them), so that answered writes stay queued long enough for a missing
// wait to show.
func slowCommits(m *Server, d time.Duration, commits *atomic.Int64) {
	f := func(fs.Ino) error {
		commits.Add(1)
		time.Sleep(d)
		return nil
	}
	m.wbFault.Store(&f)
}

// TestWriteBehind checks that WRITE requests answered before they commit
// (writeBehind) cannot be observed as such: other requests of the mount
// and of the other mounts of its Group wait for them, a sandbox begun
// after them does not contain them, and a failed background write is
// reported at the handle's next write, fsync or close.
func TestWriteBehind(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mount()
	b, _ := e.mount()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB

	t.Run("Queued", func(t *testing.T) {
		// 16 writes of 1 MiB against commits of 30 ms each: answered
		// before they commit, the queue coalesces them (8 MiB bound).
		var commits atomic.Int64
		slowCommits(ma, 30*time.Millisecond, &commits)
		defer ma.wbFault.Store(nil)
		f, err := os.Create(filepath.Join(a, "queued"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for i := range 16 {
			if _, err := f.WriteAt(chunk, int64(i)<<20); err != nil {
				t.Fatal(err)
			}
		}
		// Still open: another mount's stat and read wait for the queue.
		st, err := os.Stat(filepath.Join(b, "queued"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != 16<<20 {
			t.Fatalf("other mount sees %d bytes, want %d", st.Size(), 16<<20)
		}
		got, err := os.ReadFile(filepath.Join(b, "queued"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bytes.Repeat(chunk, 16)) {
			t.Fatal("other mount read different bytes")
		}
		if n := commits.Load(); n == 0 || n >= 16 {
			t.Errorf("%d commits for 16 writes: write-behind did not coalesce (or is off)", n)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("SmallWritesMerged", func(t *testing.T) {
		var commits atomic.Int64
		slowCommits(ma, 20*time.Millisecond, &commits)
		defer ma.wbFault.Store(nil)
		p := filepath.Join(a, "small")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		for i := range 500 {
			line := fmt.Appendf(nil, "line %04d of a sequential writer\n", i)
			want.Write(line)
			if _, err := f.Write(line); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(b, "small")); got != want.String() {
			t.Fatalf("read %d bytes, want %d", len(got), want.Len())
		}
		if n := commits.Load(); n == 0 || n >= 500 {
			t.Errorf("%d commits for 500 writes", n)
		}
	})

	t.Run("FsyncEachWrite", func(t *testing.T) {
		// A writer that fsyncs after every write skips the queue after
		// its first fsync; one that stops fsyncing uses it again.
		var commits atomic.Int64
		slowCommits(ma, time.Millisecond, &commits)
		defer ma.wbFault.Store(nil)
		f, err := os.Create(filepath.Join(a, "fsynced"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for i := range 10 {
			if _, err := f.WriteAt(chunk[:4096], int64(i)*4096); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if n := commits.Load(); n != 1 {
			t.Errorf("%d queued commits for 10 writes each followed by fsync, want 1 (the first)", n)
		}
		// Each synchronous write started the Sync of the fsync after
		// it (presync), and each fsync waited for it.
		if n := ma.presync.started.Load(); n != 9 {
			t.Errorf("%d early syncs for the 9 synchronous writes, want 9", n)
		}
		for i := range 10 {
			if _, err := f.WriteAt(chunk[:4096], int64(10+i)*4096); err != nil {
				t.Fatal(err)
			}
		}
		ma.wb.wait()
		if n := commits.Load(); n < 2 {
			t.Errorf("writes without fsync were not queued again (%d queued commits)", n)
		}
	})

	t.Run("FsyncEachLargeWrite", func(t *testing.T) {
		// The 1 MiB writes of a writer that fsyncs after each are
		// queued with their request buffer lent (no staging copy):
		// answered as their O_DIRECT write starts, committed at once,
		// and the committer runs the early Sync of the fsync expected
		// next (presync.claim). Without a buffer to lend they are
		// synchronous and written straight from the request buffer
		// (slice.WithUnstaged).
		var commits atomic.Int64
		slowCommits(ma, 0, &commits)
		defer ma.wbFault.Store(nil)
		local := e.engine.Slices.(*slice.Cache).Next().(*slice.Local)
		st0, early0 := local.Stats(), ma.presync.started.Load()
		p := filepath.Join(a, "fsynced-large")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		want := make([]byte, 0, 6<<20)
		for i := range 6 {
			w := bytes.Repeat([]byte{byte('a' + i)}, len(chunk))
			want = append(want, w...)
			if _, err := f.WriteAt(w, int64(i)<<20); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		st1 := local.Stats()
		if st1.DirectPuts == st0.DirectPuts {
			t.Skip("the data directory's file system refuses O_DIRECT: no direct puts to check")
		}
		lent := ma.hugeBufs && ma.lender != nil
		unstaged, early := st1.UnstagedPuts-st0.UnstagedPuts, ma.presync.started.Load()-early0
		switch {
		case lent:
			if n := st1.LentPuts - st0.LentPuts; n != 6 {
				t.Errorf("%d lent puts for 6 fsynced 1 MiB writes, want 6", n)
			}
			if n := commits.Load(); n != 6 {
				t.Errorf("%d queued commits for 6 fsynced 1 MiB writes, want 6 (all queued)", n)
			}
			if unstaged != 0 {
				t.Errorf("%d unstaged puts, want 0 (all lent)", unstaged)
			}
		default:
			t.Log("no request buffer can be lent here: checking the synchronous path")
			if unstaged != 5 {
				t.Errorf("%d unstaged puts for 6 fsynced 1 MiB writes, want 5 (all but the first, queued)", unstaged)
			}
		}
		if early != 5 {
			t.Errorf("%d early syncs for the 5 writes after an fsync, want 5", early)
		}
		if got := readFile(t, filepath.Join(b, "fsynced-large")); got != string(want) {
			t.Fatalf("other mount read different bytes (%d, want %d)", len(got), len(want))
		}
		st2, commits2 := local.Stats(), commits.Load()
		for i := range 4 {
			if _, err := f.WriteAt(chunk, int64(6+i)<<20); err != nil {
				t.Fatal(err)
			}
		}
		ma.wb.wait()
		// The first of them is still taken for an fsync-each writer's;
		// the others are queued, answered before their data is on disk,
		// and lent or staged.
		if lent {
			if n := commits.Load() - commits2; n < 1 || n > 4 {
				t.Errorf("%d queued commits for 4 writes without fsync, want 1 to 4", n)
			}
		} else if n := local.Stats().UnstagedPuts - st2.UnstagedPuts; n != 1 {
			t.Errorf("%d unstaged puts for 4 writes without fsync, want 1 (the first)", n)
		}
	})

	t.Run("SandboxAfterQueuedWrites", func(t *testing.T) {
		var commits atomic.Int64
		slowCommits(ma, 50*time.Millisecond, &commits)
		p := filepath.Join(a, "sb")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		// Begin while the write is (very likely) queued: it must
		// commit outside the sandbox and survive the abort.
		if err := ma.Begin(); err != nil {
			t.Fatal(err)
		}
		ma.wbFault.Store(nil)
		if err := ma.Abort(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got := readFile(t, filepath.Join(b, "sb")); got != string(chunk) {
			t.Fatalf("after the sandbox abort the other mount reads %d bytes, want %d", len(got), len(chunk))
		}
	})

	t.Run("ErrorReported", func(t *testing.T) {
		errInjected := fmt.Errorf("%w: injected", fs.ErrIO)
		var fail atomic.Bool
		f := func(fs.Ino) error {
			if fail.Load() {
				return errInjected
			}
			return nil
		}
		ma.wbFault.Store(&f)
		defer ma.wbFault.Store(nil)
		p := filepath.Join(a, "err")
		fd, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fd.Write([]byte("kept")); err != nil {
			t.Fatal(err)
		}
		ma.wb.wait() // "kept" committed before the fault is armed
		fail.Store(true)
		// Answered before it commits: the failure shows at fsync.
		if _, err := fd.WriteAt([]byte("lost"), 4); err != nil {
			t.Fatalf("write: %v (want success, the failure reported later)", err)
		}
		if err := fd.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("fsync after a failed background write: %v, want EIO", err)
		}
		fail.Store(false)
		if err := fd.Sync(); err != nil {
			t.Fatalf("second fsync: %v (the failure is reported once)", err)
		}
		// At the next write. (The first write after an fsync that
		// found no write commits before it is answered: FsyncEachWrite.)
		if _, err := fd.WriteAt([]byte("kept"), 0); err != nil {
			t.Fatal(err)
		}
		fail.Store(true)
		if _, err := fd.WriteAt([]byte("lost"), 4); err != nil {
			t.Fatal(err)
		}
		ma.wb.wait()
		fail.Store(false)
		if _, err := fd.WriteAt([]byte("next"), 8); !errors.Is(err, syscall.EIO) {
			t.Fatalf("write after a failed background write: %v, want EIO", err)
		}
		// A large write (written into the queue's open transaction)
		// whose commit fails: reported to every descriptor open for
		// writing on the file, once each.
		other, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		fail.Store(true)
		if _, err := fd.WriteAt(bytes.Repeat([]byte("L"), 128<<10), 4); err != nil {
			t.Fatalf("large write: %v (want success, the failure reported later)", err)
		}
		if err := fd.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("fsync after a failed large background write: %v, want EIO", err)
		}
		fail.Store(false)
		if err := other.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("fsync of another descriptor after a failed background write: %v, want EIO", err)
		}
		if err := other.Sync(); err != nil {
			t.Fatalf("second fsync of the other descriptor: %v", err)
		}
		// At close.
		fail.Store(true)
		if _, err := fd.WriteAt([]byte("lost"), 4); err != nil {
			t.Fatal(err)
		}
		if err := fd.Close(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("close after a failed background write: %v, want EIO", err)
		}
		fail.Store(false)
		// The kernel's pages of the failed writes were dropped: both
		// mounts read what the engine has.
		for _, dir := range []string{a, b} {
			if got := readFile(t, filepath.Join(dir, "err")); got != "kept" {
				t.Errorf("%s: read %q, want %q", dir, got, "kept")
			}
		}
	})
}

// waitCount polls c until it reaches want (failing after 10 s) and
// returns its value then.
func waitCount(t *testing.T, c *atomic.Int64, want int64, what string) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d commits after 10 s, want %d", what, c.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	return c.Load()
}

// TestWriteBehindBatch checks when the queue commits (writeBehind,
// "Batches"): not at each write, but once it holds wbBatch bytes, once
// a request waits for it, or after the delay.
func TestWriteBehindBatch(t *testing.T) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	t.Run("SizeAndWaiter", func(t *testing.T) {
		// The delay never expires here: only the batch size and
		// waiters start commits.
		e := newEnv(t, envOptions{group: true, wbDelay: time.Hour})
		a, ma := e.mount()
		b, _ := e.mount()
		var commits atomic.Int64
		slowCommits(ma, 0, &commits)
		f, err := os.Create(filepath.Join(a, "f"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n := int64(wbBatch / len(chunk))
		for i := range n - 1 {
			if _, err := f.WriteAt(chunk, i<<20); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		if c := commits.Load(); c != 0 {
			t.Fatalf("%d commits of %d MiB of answered writes, below the batch size and with nobody waiting: want 0", c, n-1)
		}
		// The write that fills the batch starts the committer: one
		// commit for all of them.
		if _, err := f.WriteAt(chunk, (n-1)<<20); err != nil {
			t.Fatal(err)
		}
		if c := waitCount(t, &commits, 1, "full batch"); c != 1 {
			t.Fatalf("%d commits for one batch of %d writes, want 1", c, n)
		}
		// A request that must see the writes (another mount's stat)
		// commits what is queued.
		if _, err := f.WriteAt(chunk, n<<20); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(b, "f"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != (n+1)<<20 {
			t.Fatalf("other mount sees %d bytes, want %d", st.Size(), (n+1)<<20)
		}
		if c := commits.Load(); c != 2 {
			t.Fatalf("%d commits after a stat waited for a queued write, want 2", c)
		}
	})
	t.Run("Delay", func(t *testing.T) {
		// With nobody waiting, a write below the batch size commits
		// after the delay.
		e := newEnv(t, envOptions{wbDelay: 20 * time.Millisecond})
		a, ma := e.mount()
		var commits atomic.Int64
		slowCommits(ma, 0, &commits)
		f, err := os.Create(filepath.Join(a, "f"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, w := range [][]byte{chunk, []byte("small")} { // the open transaction, a queued copy
			before := commits.Load()
			if _, err := f.WriteAt(w, 0); err != nil {
				t.Fatal(err)
			}
			waitCount(t, &commits, before+1, fmt.Sprintf("%d-byte write", len(w)))
		}
	})
}
