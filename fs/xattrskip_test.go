package fs_test

import (
	"context"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
)

// Deleting an inode skips the scan of its extended attributes while the
// store holds none (FS.xattrs). These tests fail if the flag is not
// probed at Open or not set by SetXattr before its commit: the
// attribute then outlives its inode, which Check reports.
func TestDeleteInodeXattrs(t *testing.T) {
	ctx := context.Background()
	create := func(tb *testing.T, f *fs.FS, name string) fs.Ino {
		var ino fs.Ino
		do(tb, f, func(ctx context.Context, tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
			ino = a.Ino
			return err
		})
		return ino
	}
	setX := func(ctx context.Context, tx *fs.Txn, ino fs.Ino) error {
		return tx.SetXattr(ctx, ino, "user.k", []byte("v"), fs.XattrFlags{})
	}
	unlink := func(ctx context.Context, tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, "f") }

	t.Run("reopen", func(t *testing.T) {
		// Attributes written by an earlier FS over the same store.
		tf := newTestFS(t, fsOpts{kind: storePebble})
		ino := create(t, tf.FS, "f")
		do(t, tf.FS, func(ctx context.Context, tx *fs.Txn) error { return setX(ctx, tx, ino) })
		f2, err := fs.Open(ctx, fs.Config{KV: tf.KV, Slices: tf.Slices, Clock: fixedClock, GCWait: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer f2.Close()
		do(t, f2, unlink)
		requireCheckClean(t, f2)
	})

	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run("concurrent/"+kind.String(), func(t *testing.T) {
			// An unlink that ran while the store had no attribute, and
			// a SetXattr on the same file that commits before it.
			tf := newTestFS(t, fsOpts{kind: kind})
			ino := create(t, tf.FS, "f")
			a, err := tf.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := unlink(ctx, a); err != nil {
				t.Fatal(err)
			}
			do(t, tf.FS, func(ctx context.Context, tx *fs.Txn) error { return setX(ctx, tx, ino) })
			if err := a.Commit(ctx); err != nil {
				t.Fatalf("unlink commit: %v", err)
			}
			requireCheckClean(t, tf.FS)
		})
	}

	t.Run("attributes-then-unlink", func(t *testing.T) {
		tf := newTestFS(t, fsOpts{kind: storePebble})
		ino := create(t, tf.FS, "f")
		do(t, tf.FS, func(ctx context.Context, tx *fs.Txn) error { return setX(ctx, tx, ino) })
		do(t, tf.FS, unlink)
		requireCheckClean(t, tf.FS)
	})
}
