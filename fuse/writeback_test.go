//go:build linux

package fuse

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteback runs the POSIX suite and the metamorphic test on a mount
// with the kernel writeback cache (Config.Writeback), and checks that the
// sandbox refuses it.
func TestWriteback(t *testing.T) {
	dir, m := newEnv(t, envOptions{writeback: true}).mount()
	if err := m.Begin(); err == nil {
		t.Error("sandbox began on a writeback mount")
		m.Abort()
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, dir string)
	}{
		{"CreateFlags", testCreateFlags},
		{"PwriteSparse", testPwriteSparse},
		{"Truncate", testTruncate},
		{"UnlinkWhileOpen", testUnlinkWhileOpen},
		{"RenameAtomicUnderReaders", testRenameAtomicUnderReaders},
		{"AppendTwoFDs", testAppendTwoFDs},
		{"Fallocate", testFallocate},
		{"CopyFileRange", testCopyFileRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(dir, tc.name)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.fn(t, d)
		})
	}
	t.Run("Metamorphic", func(t *testing.T) {
		d := filepath.Join(dir, "meta")
		os.Mkdir(d, 0o755)
		metamorphic(t, d)
	})
}
