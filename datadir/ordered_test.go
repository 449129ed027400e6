package datadir

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

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
	diskSize := func(name string) int64 {
		t.Helper()
		fi, err := mem.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
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
	r, err := mem.Open("000001.log")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := "aaaabbbbcccc" + string(bytes.Repeat([]byte{'d'}, 70)) + "eeee"; string(got) != want {
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
