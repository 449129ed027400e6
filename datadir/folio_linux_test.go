package datadir

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

var pageSink byte

// largeFolioPages returns how many of the first n bytes' pages of the file
// at path the page cache holds in folios larger than a page (compound
// pages, read from /proc/self/pagemap and /proc/kpageflags); ok is false
// where those cannot be read (not root).
func largeFolioPages(t *testing.T, path string, n int) (large int, ok bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	for i := 0; i < n; i += page {
		pageSink += m[i] // fault each page in
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, false
	}
	defer pagemap.Close()
	kflags, err := os.Open("/proc/kpageflags")
	if err != nil {
		return 0, false
	}
	defer kflags.Close()
	const (
		present      = 1 << 63
		pfnMask      = 1<<55 - 1
		compoundHead = 1 << 15
		compoundTail = 1 << 16
	)
	var b [8]byte
	base := uintptr(unsafe.Pointer(&m[0]))
	for i := 0; i < n; i += page {
		if _, err := pagemap.ReadAt(b[:], int64((base+uintptr(i))/uintptr(page))*8); err != nil {
			return 0, false
		}
		e := binary.LittleEndian.Uint64(b[:])
		pfn := e & pfnMask
		if e&present == 0 || pfn == 0 {
			return 0, false // PFNs hidden without CAP_SYS_ADMIN
		}
		if _, err := kflags.ReadAt(b[:], int64(pfn)*8); err != nil {
			return 0, false
		}
		if fl := binary.LittleEndian.Uint64(b[:]); fl&(compoundHead|compoundTail) != 0 {
			large++
		}
	}
	return large, true
}

// TestOrderedFSLogZerosSmallFolios: the zeros ahead of a log are written a
// page at a time, so the page cache holds them in page-sized folios and a
// log record later written over them does not walk a large folio's buffer
// heads (walZeroWrite). Checked against a control file written with one
// 1 MiB write: where the kernel does not make large folios of that (or the
// page flags cannot be read), the test skips.
func TestOrderedFSLogZerosSmallFolios(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(dir, "control")
	if err := os.WriteFile(control, make([]byte, walZeroChunk), 0o644); err != nil {
		t.Fatal(err)
	}
	if large, ok := largeFolioPages(t, control, walZeroChunk); !ok || large == 0 {
		t.Skipf("no large folios to compare with here (page flags readable: %v)", ok)
	}
	o := &orderedFS{FS: vfs.Default, limit: 64 << 10, before: func() error { return nil }}
	name := filepath.Join(dir, "000001.log")
	f, err := o.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("record")); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	f.(*orderedFile).waitZeros()
	defer f.Close()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < walAhead {
		t.Fatalf("log file is %d bytes, want at least %d of zeros", fi.Size(), walAhead)
	}
	if large, _ := largeFolioPages(t, name, int(fi.Size())); large > 0 {
		t.Fatalf("%d of the log's %d pages are in large folios, want none", large, fi.Size()/int64(os.Getpagesize()))
	}
}
