package fuse

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txnfs/txnfs/internal/hugepage"
)

// TestHugeReadBuffers checks that a mount's request buffers are put on
// huge pages (hugeReadBuffers): it fails when go-fuse's internals change
// so that the hook no longer finds its buffer pool, and the data written
// through such buffers reads back intact.
func TestHugeReadBuffers(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skipf("transparent huge pages are off or unknown here (%q, %v)", b, err)
	}
	before := hugeBuffers.Load()
	dir, m := newEnv(t, envOptions{}).mount()
	if !m.hugeBufs {
		t.Fatal("hugeReadBuffers found no go-fuse buffer pool to wrap (go-fuse's internals changed?)")
	}
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	p := filepath.Join(dir, "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		chunk[0] = byte(i)
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := hugeBuffers.Load() - before; n <= 0 {
		if !hugepage.Advise(make([]byte, hugepage.Size)) {
			t.Logf("MADV_COLLAPSE fails here (kernel before 6.1?): buffers stay on small pages")
		} else {
			t.Fatal("no request buffer of the mount was put on huge pages")
		}
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		chunk[0] = byte(i)
		if !bytes.Equal(got[i<<20:(i+1)<<20], chunk) {
			t.Fatalf("MiB %d read back differs", i)
		}
	}
}
