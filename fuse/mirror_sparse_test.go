//go:build linux

package fuse

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
)

// TestMirrorHuntSparseReconcile: a passthrough writer's write far past
// the end of a small file (a sparse file) makes reconciles no slower
// than the data written: stat and close of such a file answer at once.
func TestMirrorHuntSparseReconcile(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("head"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, w := openPassthroughPair(t, m, p)
	const off = 16 << 30
	if _, err := w.WriteAt([]byte("tail"), off); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != off+4 {
		t.Errorf("size %d, want %d", fi.Size(), off+4)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stat and close of a 16 GiB sparse file written through passthrough took %v", d)
	}
	t.Logf("stat+close: %v", time.Since(start))
	// The engine has both ends and zeros between.
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off  uint64
		want string
	}{{0, "head"}, {off, "tail"}, {1 << 20, "\x00\x00\x00\x00"}, {off - 4, "\x00\x00\x00\x00"}} {
		got := make([]byte, 4)
		err := m.eng.View(m.ctx, fs.RootCred, func(tx *fs.Txn) error {
			_, _, err := tx.Read(m.ctx, fs.Ino(st.Ino), c.off, got)
			return err
		})
		if err != nil || string(got) != c.want {
			t.Errorf("engine at %d: %q, %v; want %q", c.off, got, err, c.want)
		}
	}
}

// TestMirrorHuntSparseResync: copying a sparse file's mirror again from
// the engine (here: the engine changed behind the mount while a
// passthrough reader has the file open, and another reader opens) keeps
// the engine's holes holes: it neither fills the mirrors' tmpfs with
// zeros nor fails, and the reader sees the change.
func TestMirrorHuntSparseResync(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: 64 << 20}).mount() // tmpfs cap 192 MiB
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("head"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, w := openPassthroughPair(t, m, p)
	const size = 1 << 30
	if err := w.Truncate(size); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var pst syscall.Stat_t
	if err := syscall.Stat(p, &pst); err != nil {
		t.Fatal(err)
	}
	ino := fs.Ino(pst.Ino)
	for i := 0; ; i++ { // the writer's RELEASE
		m.mirrors.mu.Lock()
		c := m.mirrors.opens[ino]
		writers := c != nil && c.ptWriters > 0
		m.mirrors.mu.Unlock()
		if !writers {
			break
		}
		if i == 500 {
			t.Fatal("the writer's close was not seen")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := m.eng.Do(m.ctx, fs.RootCred, func(tx *fs.Txn) error {
		return tx.Write(m.ctx, ino, size-4, []byte("COPY"))
	}); err != nil {
		t.Fatal(err)
	}
	r2, err := os.Open(p) // passthrough: the mirror is copied again
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	got := make([]byte, 4)
	if _, err := r.ReadAt(got, size-4); err != nil || string(got) != "COPY" {
		t.Errorf("passthrough reader after the resync: %q, %v", got, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	m.mirrors.mu.Lock()
	mr := m.mirrors.m[fs.Ino(st.Ino)]
	var blocks int64
	if mr != nil {
		if fi, err := mr.f.Stat(); err == nil {
			blocks = fi.Sys().(*syscall.Stat_t).Blocks
		}
	}
	m.mirrors.mu.Unlock()
	if mr == nil {
		t.Fatal("no mirror while passthrough opens exist")
	}
	if blocks*512 > 16<<20 {
		t.Errorf("the mirror of a 1 GiB file holding 8 bytes uses %d MiB of tmpfs", blocks*512>>20)
	}
	if st := m.MirrorStats(); st.Resynced == 0 {
		t.Errorf("no resync: %+v", st)
	}
	w.Close()
	r.Close()
}

// TestMirrorHuntSmallFilesMemory: the budget bounds the mirrors' memory,
// not only their sizes: with huge=always a small file's mirror may take
// a 2 MiB page, and many small files must not fill the tmpfs (which
// would fail passthrough writers with ENOSPC).
func TestMirrorHuntSmallFilesMemory(t *testing.T) {
	dir, m := newEnv(t, envOptions{mirror: 16 << 20}).mount() // tmpfs cap 96 MiB
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte("small"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.mirrors.mu.Lock()
	var mem int64
	for _, mr := range m.mirrors.m {
		if fi, err := mr.f.Stat(); err == nil {
			mem += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
	}
	n := len(m.mirrors.m)
	m.mirrors.mu.Unlock()
	t.Logf("%d mirrors of 5-byte files use %d KiB of tmpfs", n, mem>>10)
	if mem > 2*(16<<20) {
		t.Errorf("%d mirrors of 5-byte files use %d MiB of tmpfs, budget 16 MiB", n, mem>>20)
	}
}
