//go:build linux

package datadir

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

func TestDefaultMemTable(t *testing.T) {
	for _, c := range []struct {
		total uint64
		want  int64
	}{
		{0, 0},
		{64 << 20, 0},
		{BigMemTableMinTotal - 1, 0},
		{BigMemTableMinTotal, BigMemTable},
		{1 << 40, BigMemTable},
	} {
		if got := DefaultMemTable(c.total); got != c.want {
			t.Errorf("DefaultMemTable(%d) = %d, want %d", c.total, got, c.want)
		}
	}
	// The rule's premise: from the threshold, the reserve kept for the
	// metadata store holds two preallocated WALs (1.1x the memtable each).
	if r := DefaultReserve(BigMemTableMinTotal); r < 2*BigMemTable*11/10 {
		t.Errorf("DefaultReserve(%d) = %d: less than two WALs of a %d-byte memtable", uint64(BigMemTableMinTotal), r, BigMemTable)
	}
}

// TestOpenMemTable checks the memtable size Open chooses: from the size of
// the directory's file system, Pebble's default on a small one, with a
// disk seam (size unknown) or when asked, and an explicit size as given.
func TestOpenMemTable(t *testing.T) {
	ctx := context.Background()
	open := func(o Options) int64 {
		t.Helper()
		e, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := e.Close(); err != nil {
				t.Error(err)
			}
		}()
		return e.memTable
	}
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	total := st.Blocks * uint64(st.Bsize)
	if got, want := open(Options{Dir: dir, NoSync: true}), DefaultMemTable(total); got != want {
		t.Errorf("file system of %d bytes: memtable %d, want %d", total, got, want)
	}
	if got := open(Options{Dir: t.TempDir(), NoSync: true, MemTableBytes: -1}); got != 0 {
		t.Errorf("MemTableBytes -1: memtable %d, want 0 (Pebble's default)", got)
	}
	if got := open(Options{Dir: t.TempDir(), NoSync: true, MemTableBytes: 2 << 20}); got != 2<<20 {
		t.Errorf("MemTableBytes 2 MiB: memtable %d", got)
	}
	if got := open(Options{Dir: "data", FS: vfs.NewMem(), NoSync: true}); got != 0 {
		t.Errorf("disk seam: memtable %d, want 0", got)
	}
	if _, err := Open(ctx, Options{Dir: t.TempDir(), NoSync: true, MemTableBytes: 1 << 10}); err == nil {
		t.Error("MemTableBytes 1 KiB: no error")
	}
	if got := open(Options{Dir: smallDisk(t, 64<<20), NoSync: true}); got != 0 {
		t.Errorf("64 MiB file system: memtable %d, want 0", got)
	}
}
