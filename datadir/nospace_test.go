//go:build linux

package datadir

// A data directory on a small file system (a tmpfs of a few MiB, mounted
// by the test; needs root): writes past the reserve fail with ENOSPC
// (fs.ErrNoSpace) and leave no trace, acknowledged data stays intact,
// removing files and collecting garbage makes room again, and a file
// system filled by someone else gives a clear error, at run time and at
// Open, instead of a hang.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
)

// smallDisk mounts a tmpfs of size bytes on a fresh directory and
// unmounts it when the test ends; it skips when mounting is not allowed.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// nospaceFiles writes and checks whole files through the engine.
type nospaceFiles struct {
	t     *testing.T
	rng   *rand.Rand
	acked map[string][]byte
}

// write creates name holding size random bytes in one transaction.
func (w *nospaceFiles) write(e *Engine, name string, size int) error {
	ctx := context.Background()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(w.rng.Uint32())
	}
	err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		return tx.Write(ctx, a.Ino, 0, data)
	})
	if err == nil {
		w.acked[name] = data
	}
	return err
}

// fill writes files of size bytes until one fails, which must be with
// ENOSPC; it returns how many were written.
func (w *nospaceFiles) fill(e *Engine, prefix string, size, limit int) int {
	w.t.Helper()
	for i := 0; i < limit; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		err := w.write(e, name, size)
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrNoSpace) {
			w.t.Fatalf("%s: want ENOSPC, got %v", name, err)
		}
		w.t.Logf("%s: %v", name, err)
		// The failed transaction left no trace.
		err = e.FS.Do(context.Background(), fs.RootCred, func(tx *fs.Txn) error {
			_, err := tx.Lookup(context.Background(), fs.RootIno, name)
			return err
		})
		if !errors.Is(err, fs.ErrNotExist) {
			w.t.Fatalf("%s: failed create+write left the file behind (lookup: %v)", name, err)
		}
		return i
	}
	w.t.Fatalf("%d files of %d bytes fit on a small file system: no ENOSPC", limit, size)
	return 0
}

// check reads back every acknowledged file.
func (w *nospaceFiles) check(e *Engine) {
	w.t.Helper()
	ctx := context.Background()
	for name, want := range w.acked {
		var got []byte
		err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, err := tx.Lookup(ctx, fs.RootIno, name)
			if err != nil {
				return err
			}
			got = make([]byte, a.Size)
			_, _, err = tx.Read(ctx, a.Ino, 0, got)
			return err
		})
		if err != nil || !bytes.Equal(got, want) {
			w.t.Fatalf("%s: acknowledged file lost or changed (err %v, %d of %d bytes)", name, err, len(got), len(want))
		}
	}
	rep, err := e.FS.Check(ctx)
	if err != nil || !rep.OK() {
		w.t.Fatalf("fsck: %v %+v", err, rep)
	}
}

func (w *nospaceFiles) remove(e *Engine, name string) {
	w.t.Helper()
	ctx := context.Background()
	if err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, name) }); err != nil {
		w.t.Fatalf("unlink %s on a full file system: %v", name, err)
	}
	delete(w.acked, name)
}

func TestNoSpace(t *testing.T) {
	ctx := context.Background()
	const size = 64 << 20
	dir := smallDisk(t, size)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	w := &nospaceFiles{t: t, rng: rand.New(rand.NewPCG(seed, 1)), acked: map[string][]byte{}}
	// Freed space goes to the reuse pool first, which the guard must give
	// back: keep a big pool.
	e, err := Open(ctx, Options{Dir: dir, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()

	// Large writes until ENOSPC, then small ones: both stop at the
	// reserve (DefaultReserve: a quarter of 64 MiB).
	n := w.fill(e, "big", 1<<20, 64)
	if n < 30 {
		t.Fatalf("only %d MiB written of 64 MiB with a 16 MiB reserve", n)
	}
	w.fill(e, "small", 3000, 10000)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < DefaultReserve(size)/2 {
		t.Fatalf("writes ate into the reserve: %d bytes free", free)
	}
	w.check(e)

	// Remove half of the large files: once collected, their space takes
	// new writes again.
	for i := 0; i < n; i += 2 {
		w.remove(e, fmt.Sprintf("big%d", i))
	}
	for i := 0; i < 3; i++ {
		if _, err := e.FS.CollectGarbage(ctx); err != nil {
			t.Fatalf("collect garbage on a full file system: %v", err)
		}
	}
	if again := w.fill(e, "again", 1<<20, 64); again < n/3 {
		t.Fatalf("after removing %d MiB only %d MiB could be written again", n/2, again)
	}
	w.check(e)

	// Someone else fills the file system: writes get ENOSPC, not EIO
	// (the guard's reading may be stale; the slice store's own ENOSPC
	// must be classified as such too).
	hog := filepath.Join(dir, "hog")
	fillUp(t, hog)
	for i := 0; i < 3; i++ {
		err := w.write(e, fmt.Sprintf("late%d", i), 1<<20)
		if !errors.Is(err, fs.ErrNoSpace) {
			t.Fatalf("write on a file system filled by another process: want ENOSPC, got %v", err)
		}
	}
	if err := e.Close(); err != nil {
		t.Logf("close on a full file system: %v", err)
	}
	// Opening a full data directory fails clearly instead of hanging in
	// the metadata store's recovery.
	done := make(chan error, 1)
	go func() {
		e2, err := Open(ctx, Options{Dir: dir})
		if err == nil {
			e2.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Open of a full data directory succeeded")
		}
		t.Logf("open when full: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Open of a full data directory hangs")
	}
	if err := os.Remove(hog); err != nil {
		t.Fatal(err)
	}
	e, err = Open(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatalf("reopen after freeing space: %v", err)
	}
	w.check(e)
	if err := w.write(e, "last", 1<<20); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
}

// fillUp writes path until the file system has no free space left.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for i := 0; i < 4096; i++ {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the file system did not fill up")
}
