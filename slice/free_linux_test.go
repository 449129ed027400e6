package slice_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
	"golang.org/x/sys/unix"
)

// canPunch reports whether the file system under dir supports
// FALLOC_FL_PUNCH_HOLE.
func canPunch(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	f.Write(make([]byte, 1<<16))
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 1<<16) == nil
}

// TestFreeReleasesSpace (WTF §2.9, with hole punching): freeing half the
// slices of a backing file on a real directory lowers its Allocated by
// about their size, keeps Size, and the freed slices read as ErrCorrupt.
func TestFreeReleasesSpace(t *testing.T) {
	dir := t.TempDir()
	if !canPunch(t, dir) {
		t.Skipf("file system under %s cannot punch holes", dir)
	}
	l := openLocal(t, vfs.Default, dir)
	s := slice.NewCache(l, 16<<20)
	var ptrs []slice.Pointer
	for i := range 24 {
		// Odd sizes: slice boundaries fall inside file system blocks.
		ptrs = append(ptrs, slicetest.MustPut(t, s, 0, slicetest.RandomData(uint64(i), 1<<20-7*i-1)))
	}
	if err := s.Sync(ctx, ptrs); err != nil {
		t.Fatal(err)
	}
	before := backing(t, s, ptrs[0].Backing)
	var freed uint64
	for i, p := range ptrs {
		if i%2 == 0 {
			if err := s.Free(ctx, p.Backing, p.Offset, uint64(p.Length)); err != nil {
				t.Fatal(err)
			}
			freed += uint64(p.Length)
		}
	}
	after := backing(t, s, ptrs[0].Backing)
	t.Logf("before %+v, after %+v, freed %d bytes", before, after, freed)
	if after.Size != before.Size {
		t.Errorf("Size changed from %d to %d", before.Size, after.Size)
	}
	// Each freed slice keeps at most two partial blocks.
	if drop := before.Allocated - after.Allocated; drop < freed-uint64(len(ptrs))*8192 {
		t.Fatalf("Allocated dropped by %d bytes, want about %d", drop, freed)
	}
	check := func(s slice.Store) {
		for i, p := range ptrs {
			buf := make([]byte, p.Length)
			err := s.ReadAt(ctx, p, 0, buf)
			if i%2 == 0 {
				if !errors.Is(err, slice.ErrCorrupt) {
					t.Fatalf("freed %v: %v, want ErrCorrupt", p, err)
				}
			} else if err != nil || !bytes.Equal(buf, slicetest.RandomData(uint64(i), 1<<20-7*i-1)) {
				t.Fatalf("kept %v: %v or wrong data", p, err)
			}
		}
	}
	check(s)
	s.Close()
	l = openLocal(t, vfs.Default, dir)
	defer l.Close()
	check(l)
	if st, err := os.Stat(filepath.Join(dir, slice.BackingName(ptrs[0].Backing))); err != nil || uint64(st.Size()) != after.Size {
		t.Fatalf("backing file after reopen: %v %v", st, err)
	}
}
