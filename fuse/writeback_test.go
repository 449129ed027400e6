//go:build linux

package fuse

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWriteback runs the POSIX suite and the metamorphic test on a mount
// with the kernel writeback cache (Config.Writeback). The sandbox on such
// a mount: sandbox_test.go.
func TestWriteback(t *testing.T) {
	dir, _ := newEnv(t, envOptions{writeback: true}).mount()
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

// TestWritebackDirtyLimit checks the backing device settings of both
// kinds of local mount: a writeback mount's dirty page limit is raised
// to DefaultDirtyMaxRatio, with the kernel's strict per-device limit
// kept; a write-through mount (whose pages are never dirty) keeps the
// kernel's settings.
func TestWritebackDirtyLimit(t *testing.T) {
	wb, _ := newEnv(t, envOptions{writeback: true}).mount()
	wt, _ := newEnv(t, envOptions{}).mount()
	if got, want := bdiKnob(t, wb, "max_ratio"), strconv.Itoa(DefaultDirtyMaxRatio); got != want {
		t.Errorf("writeback mount: max_ratio %s, want %s", got, want)
	}
	if got := bdiKnob(t, wb, "strict_limit"); got != "1" {
		t.Errorf("writeback mount: strict_limit %s, want the kernel's 1 for FUSE", got)
	}
	if got := bdiKnob(t, wt, "max_ratio"); got == strconv.Itoa(DefaultDirtyMaxRatio) {
		t.Errorf("write-through mount: max_ratio raised to %s", got)
	}
}

// bdiKnob reads a setting of the backing device of the mount at dir.
func bdiKnob(t *testing.T, dir, name string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/%s", unix.Major(st.Dev), unix.Minor(st.Dev), name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestWritebackFsyncEach: a writer that fsyncs after every write through
// the writeback cache; the kernel sends the file's times (SETATTR) between
// each synchronous WRITE and its FSYNC, and the early Sync starts at that
// SETATTR (after the first fsync showed one), so that the FSYNC finds
// everything synced. The data is checked through a fresh descriptor.
func TestWritebackFsyncEach(t *testing.T) {
	dir, m := newEnv(t, envOptions{writeback: true}).mount()
	p := filepath.Join(dir, "fsynced")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("fsync-each "), 6000)
	const n = 10
	for i := range n {
		// Two jiffies at least between writes: the kernel's times
		// change, so its fsync sends them.
		time.Sleep(10 * time.Millisecond)
		if _, err := f.WriteAt(chunk, int64(i*len(chunk))); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	started, atTimes := m.presync.started.Load(), m.presync.atTimes.Load()
	t.Logf("%d early syncs, %d asked for at a SETATTR of times", started, atTimes)
	// The first write is queued (write-behind), the second starts its
	// early Sync itself (no SETATTR seen yet), the others at the SETATTR.
	if atTimes < n-3 {
		t.Errorf("%d early syncs asked for at a SETATTR of times for %d synchronous writes, want at least %d", atTimes, n-1, n-3)
	}
	if started > n-1 {
		t.Errorf("%d early syncs for %d synchronous writes", started, n-1)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat(chunk, n)) {
		t.Errorf("read back %d bytes, not the %d written", len(got), n*len(chunk))
	}
}
