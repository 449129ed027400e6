package vnfs_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/txnfs/txnfs/vnfs"
)

// TestLocalCopyNamesSource: a local copy whose source could not be opened
// (missing, unreadable) reported the destination's path, so `txnfs cp
// unreadable dst` blamed dst.
func TestLocalCopyNamesSource(t *testing.T) {
	ctx := context.Background()
	l := vnfs.Local(t.TempDir())
	defer l.Close()
	if err := vnfs.WriteFile(ctx, l, "ok", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	items := []vnfs.CopyItem{
		{Src: vnfs.P("ok"), Dst: vnfs.P("c1"), Length: vnfs.CopyToEnd, Flags: vnfs.Create},
		{Src: vnfs.P("missing"), Dst: vnfs.P("c2"), Length: vnfs.CopyToEnd, Flags: vnfs.Create},
	}
	k, err := l.VCopy(ctx, items)
	var ve *vnfs.Error
	if k != 1 || !errors.As(err, &ve) || ve.Index != 1 || ve.Path != "missing" || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("k %d, err %#v", k, err)
	}
}
