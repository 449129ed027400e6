package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

// TestOrderedFS: every write to a metadata file first makes the slices put
// before it durable, and fails if that fails; a write with nothing new to
// flush costs no fsync.
func TestOrderedFS(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	local, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "s", Files: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	var failWith error
	o := &orderedFS{FS: mem, before: func() error {
		if failWith != nil {
			return failWith
		}
		return local.SyncAll(ctx)
	}}
	f, err := o.Create("meta", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, hint := range []uint64{0, 1} {
		if _, err := local.Put(ctx, hint, []byte("slice data")); err != nil {
			t.Fatal(err)
		}
	}
	before := local.Stats().Fsyncs
	if _, err := f.Write([]byte("log record")); err != nil {
		t.Fatal(err)
	}
	if got := local.Stats().Fsyncs - before; got != 2 {
		t.Fatalf("a metadata write after puts to 2 backing files did %d slice fsyncs, want 2", got)
	}
	if _, err := f.WriteAt([]byte("again"), 100); err != nil {
		t.Fatal(err)
	}
	if got := local.Stats().Fsyncs - before; got != 2 {
		t.Fatalf("a metadata write with nothing new put did %d more slice fsyncs, want 0", got-2)
	}
	failWith = errors.New("disk on fire")
	if _, err := f.Write([]byte("x")); !errors.Is(err, failWith) {
		t.Fatalf("write when the slice flush fails: %v, want the flush's error", err)
	}
	r, err := o.ReuseForWrite("meta", "meta2", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Write([]byte("x")); !errors.Is(err, failWith) {
		t.Fatalf("write to a reused file when the slice flush fails: %v, want the flush's error", err)
	}
}

// TestOrderedFSLogBuffer: write-ahead-log bytes stay in memory (no slice
// flush, nothing on disk) until the log is synced, a non-log file is
// written, the buffer passes its limit, or the log is closed; each time the
// slices are made durable before the first buffered byte reaches the OS,
// and the bytes arrive in order.
func TestOrderedFSLogBuffer(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	local, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "s", Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	// The log bytes on disk: the file is kept zero-filled ahead of the
	// log (TestOrderedFSLogZeroedAhead) and these logs hold no zeros.
	onDisk := func(name string) []byte {
		t.Helper()
		r, err := mem.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.TrimRight(b, "\x00")
	}
	diskSize := func(name string) int64 { return int64(len(onDisk(name))) }
	var failWith error
	var sizeAtBefore []int64 // size of the log on disk at each before call
	o := &orderedFS{FS: mem, limit: 64, before: func() error {
		if failWith != nil {
			return failWith
		}
		sizeAtBefore = append(sizeAtBefore, diskSize("000001.log"))
		return local.SyncAll(ctx)
	}}
	wal, err := o.Create("000001.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	put := func() {
		t.Helper()
		if _, err := local.Put(ctx, 0, []byte("slice data")); err != nil {
			t.Fatal(err)
		}
	}
	write := func(f vfs.File, s string) {
		t.Helper()
		if n, err := f.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("write %q: %d, %v", s, n, err)
		}
	}
	fsyncs := func() uint64 { return local.Stats().Fsyncs }

	put()
	f0 := fsyncs()
	write(wal, "aaaa")
	write(wal, "bbbb")
	if got := diskSize("000001.log"); got != 0 || fsyncs() != f0 {
		t.Fatalf("NoSync log writes reached the disk (%d bytes) or flushed slices (%d)", got, fsyncs()-f0)
	}
	if err := wal.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := diskSize("000001.log"); got != 8 || fsyncs() != f0+1 || sizeAtBefore[len(sizeAtBefore)-1] != 0 {
		t.Fatalf("after Sync: %d bytes on disk, %d slice fsyncs, log size at the slice flush %v; want 8, 1, 0",
			got, fsyncs()-f0, sizeAtBefore)
	}

	// A write to any other pebble file writes the log buffer out first.
	put()
	write(wal, "cccc")
	other, err := o.Create("MANIFEST-000002", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	write(other, "manifest")
	if got := diskSize("000001.log"); got != 12 {
		t.Fatalf("a manifest write left the log at %d bytes on disk, want 12", got)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}

	// Passing the limit writes the buffer out.
	write(wal, string(bytes.Repeat([]byte{'d'}, 70)))
	if got := diskSize("000001.log"); got != 82 {
		t.Fatalf("past the limit the log is %d bytes on disk, want 82", got)
	}

	// Close writes out the rest; the content is every write, in order.
	write(wal, "eeee")
	if err := wal.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := onDisk("000001.log"), "aaaabbbbcccc" + string(bytes.Repeat([]byte{'d'}, 70)) + "eeee"; string(got) != want {
		t.Fatalf("log content %q, want %q", got, want)
	}

	// A failed slice flush fails the Sync, leaves nothing on disk and the
	// log refuses further writes.
	wal2, err := o.Create("000003.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	write(wal2, "ffff")
	failWith = errors.New("disk on fire")
	if err := wal2.Sync(); !errors.Is(err, failWith) {
		t.Fatalf("Sync when the slice flush fails: %v, want the flush's error", err)
	}
	if got := diskSize("000003.log"); got != 0 {
		t.Fatalf("log bytes reached the disk although the slice flush failed: %d", got)
	}
	failWith = nil
	if _, err := wal2.Write([]byte("g")); err == nil {
		t.Fatal("a log whose flush failed accepted a write")
	}
	wal2.Close()
}

// TestOrderedFSLogZeroedAhead: a log file is kept written (zeros) at least
// walAhead past the log's end, in whole walZeroChunks, so that its syncs
// do not grow it; the log's bytes are intact, the rest zeros, with and
// without the log buffer, for a new and a recycled log. Then pebble reads
// such a log back: a data directory reopened after durable commits has
// them all.
func TestOrderedFSLogZeroedAhead(t *testing.T) {
	for _, limit := range []int{0, 64 << 10} {
		mem := vfs.NewMem()
		o := &orderedFS{FS: mem, limit: limit, before: func() error { return nil }}
		sizes := map[int64]bool{} // the sizes the log file had at its checks
		check := func(name string, want []byte, oldSize int64) {
			t.Helper()
			fi, err := mem.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			n := int64(len(want))
			if n > oldSize && (fi.Size()%walZeroChunk != 0 || fi.Size() < n || fi.Size() > n+walAhead+walZeroChunk) {
				t.Fatalf("limit %d: %s is %d bytes for %d log bytes, want a multiple of %d from %d to %d", limit, name, fi.Size(), n, walZeroChunk, n, n+walAhead+walZeroChunk)
			}
			if n <= oldSize && fi.Size() != oldSize {
				t.Fatalf("limit %d: recycled %s is %d bytes, want its old size %d", limit, name, fi.Size(), oldSize)
			}
			sizes[fi.Size()] = true
			f, err := mem.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:n], want) {
				t.Fatalf("limit %d: %s does not start with the log bytes", limit, name)
			}
			if oldSize == 0 && !bytes.Equal(got[n:], make([]byte, len(got)-int(n))) {
				t.Fatalf("limit %d: %s is not zeros after the log bytes", limit, name)
			}
		}
		var log []byte
		f, err := o.Create("000001.log", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		rec := bytes.Repeat([]byte("record-"), 9000) // 63 KiB
		for i := 0; i < 100; i++ {
			// A copy: pebble's MemFS scribbles over what it was given
			// to write when built with invariants (-race, -tags invariants).
			if _, err := f.Write(bytes.Clone(rec)); err != nil {
				t.Fatal(err)
			}
			log = append(log, rec...)
			if i%7 == 0 {
				if err := f.SyncData(); err != nil {
					t.Fatal(err)
				}
				check("000001.log", log, 0)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		check("000001.log", log, 0)
		if max := len(log)/walAhead + 1; len(sizes) > max {
			t.Fatalf("limit %d: the log file grew at %d of its syncs, want at most %d for %d bytes", limit, len(sizes), max, len(log))
		}
		old, _ := mem.Stat("000001.log")
		// A recycled log is overwritten from its start and grows only past its old size.
		r, err := o.ReuseForWrite("000001.log", "000002.log", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Write([]byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := r.Sync(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		check("000002.log", append([]byte("new"), log[3:]...), old.Size())
	}

	ctx := context.Background()
	dir := t.TempDir()
	e, err := Open(ctx, Options{Dir: dir, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	const files = 300
	for i := 0; i < files; i++ {
		if err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprintf("f%d", i), fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644, Exclusive: true})
			if err != nil {
				return err
			}
			return tx.Write(ctx, a.Ino, 0, bytes.Repeat([]byte{byte(i)}, 5000))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(ctx, Options{Dir: dir, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i := 0; i < files; i++ {
		err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, err := tx.Lookup(ctx, fs.RootIno, fmt.Sprintf("f%d", i))
			if err != nil {
				return err
			}
			buf := make([]byte, 6000)
			n, _, err := tx.Read(ctx, a.Ino, 0, buf)
			if err != nil {
				return err
			}
			if !bytes.Equal(buf[:n], bytes.Repeat([]byte{byte(i)}, 5000)) {
				return fmt.Errorf("f%d: %d bytes, not its data", i, n)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after reopening: %v", err)
		}
	}
}
