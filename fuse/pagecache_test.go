//go:build linux

package fuse

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
)

// TestWrittenDataStaysCached checks what issue 5's read target rests on
// (docs/fuse.md, "Kernel caching" and "Session 12: reads of recently
// written data"): data written through a local mount is read back from
// the kernel's page cache, with no READ request, after the writer's
// close, an attribute refresh (stat) and a new open — also after a
// rewrite through the mount — while a change made behind the kernel's
// back is read from the engine at the next open (close-to-open).
func TestWrittenDataStaysCached(t *testing.T) {
	e := newEnv(t, envOptions{})
	dir, m := e.mount()
	rng := rand.New(rand.NewPCG(1, 2)) // any bytes will do; fixed
	const mib = 1 << 20
	want := make([]byte, 8*mib)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	path := filepath.Join(dir, "f")

	// As fio's sequential 1 MiB write job: 1 MiB writes, fsync, close.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += mib {
		if _, err := f.Write(want[off : off+mib]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := readBack(t, m, path, want, true); n != 0 {
		t.Fatalf("reading back a file just written through the mount sent %d READ requests, want 0 (its pages were dropped)", n)
	}

	// A rewrite of part of the file through the mount (O_RDWR, no
	// truncation) keeps the pages current too.
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 3 * mib; i < 4*mib; i++ {
		want[i] = byte(rng.Uint32())
	}
	if _, err := f.WriteAt(want[3*mib:4*mib], 3*mib); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := readBack(t, m, path, want, true); n != 0 {
		t.Fatalf("reading back a file rewritten through the mount sent %d READ requests, want 0", n)
	}

	// A change the kernel did not see (written into the engine
	// directly) is read from the engine at the next open.
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fs.Ino(st.Sys().(*syscall.Stat_t).Ino)
	for i := 5 * mib; i < 5*mib+4096; i++ {
		want[i] = byte(rng.Uint32())
	}
	if err := e.engine.FS.Do(context.Background(), fs.Cred{}, func(t *fs.Txn) error {
		return t.Write(context.Background(), ino, 5*mib, want[5*mib:5*mib+4096])
	}); err != nil {
		t.Fatal(err)
	}
	// (Read once: a second read would find the new pages, rightly.)
	if n := readBack(t, m, path, want, false); n == 0 {
		t.Fatal("a change made behind the kernel's back was read from stale pages (0 READ requests)")
	}
}

// readBack stats path, opens it for reading, reads it whole, compares it
// with want and returns the READ requests m served during the read. With
// retry, a read that the system's reclaim may have disturbed (on this
// machine DAMON's proactive pageout evicts page cache seconds after it was
// written: docs/fuse.md, session 12) is repeated, up to 5 times: pages
// evicted before the read (cachestat counts them), or READs while file
// pages were refaulted (/proc/vmstat). Pages the kernel dropped because it
// was told to (invalidation, no KEEP_CACHE at open) leave no eviction
// record, so their READs are returned at once.
func readBack(t *testing.T, m *Server, path string, want []byte, retry bool) uint64 {
	t.Helper()
	// The kernel refreshes the attributes a write invalidated: with
	// AUTO_INVAL_DATA it then dropped the pages (new mtime).
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		cached, evicted, ok := pageCacheState(f, int64(len(want)))
		refaults := fileRefaults(t)
		before := m.readRequests.Load()
		got, err := io.ReadAll(f)
		n := m.readRequests.Load() - before
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(want))
		}
		if !retry || attempt == 5 {
			return n
		}
		pages := (uint64(len(want)) + 4095) / 4096
		switch {
		case ok && cached < pages && evicted > 0:
			t.Logf("attempt %d: %d of %d pages cached, %d evicted by the system; again", attempt, cached, pages, evicted)
		case n > 0 && fileRefaults(t) > refaults:
			t.Logf("attempt %d: %d READ requests while the system refaulted evicted pages; again", attempt, n)
		default:
			return n
		}
	}
}

// fileRefaults returns the system's count of file pages read again after
// their eviction (workingset_refault_file in /proc/vmstat).
func fileRefaults(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "workingset_refault_file "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no workingset_refault_file in /proc/vmstat")
	return 0
}

// pageCacheState returns how many pages of f's first size bytes are in
// the page cache and how many were evicted (cachestat(2), Linux 6.5); ok
// is false where the kernel does not have cachestat.
func pageCacheState(f *os.File, size int64) (cached, evicted uint64, ok bool) {
	var cs unix.Cachestat_t
	r := unix.CachestatRange{Off: 0, Len: uint64(size)}
	if err := unix.Cachestat(uint(f.Fd()), &r, &cs, 0); err != nil {
		return 0, 0, false
	}
	return cs.Cache, cs.Evicted, true
}
