package fs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/txnfs/txnfs/fs"
)

// TestOrphanUnpinnedBeforeCommit: a long-lived transaction unlinks a file
// that is open (pinned); the file is closed (last Unpin) before the
// transaction commits. The commit must reclaim the orphan at once (FUSE
// ENGINE-REQUESTS 3), and one still pinned at commit must live until its
// last Unpin.
func TestOrphanUnpinnedBeforeCommit(t *testing.T) {
	ctx := context.Background()
	for _, unpinFirst := range []bool{true, false} {
		f := newTestFS(t, fsOpts{})
		var ino fs.Ino
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
			ino = a.Ino
			if err != nil {
				return err
			}
			return tx.Write(ctx, ino, 0, []byte("data"))
		})
		f.Pin(ino)
		tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Unlink(ctx, fs.RootIno, "f"); err != nil {
			t.Fatal(err)
		}
		if unpinFirst {
			if err := f.Unpin(ctx, ino); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		exists := func() bool {
			t.Helper()
			err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error { _, err := tx.GetAttr(ctx, ino); return err })
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			return err == nil
		}
		if got := exists(); got == unpinFirst {
			t.Fatalf("unpin before commit=%v: orphan exists after commit: %v", unpinFirst, got)
		}
		if !unpinFirst {
			if err := f.Unpin(ctx, ino); err != nil {
				t.Fatal(err)
			}
			if exists() {
				t.Fatal("orphan survived its last Unpin")
			}
		}
		rep, err := f.Check(ctx)
		if err != nil || !rep.OK() || rep.Orphans != 0 {
			t.Fatalf("Check: %v %+v", err, rep)
		}
	}
}
