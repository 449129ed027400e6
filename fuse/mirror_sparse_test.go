//go:build linux

package fuse

import (
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
	dir, m := newEnv(t, envOptions{}).mount()
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
