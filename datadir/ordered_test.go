package datadir

import (
	"context"
	"errors"
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
