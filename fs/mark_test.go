package fs_test

import (
	"context"
	"testing"

	"github.com/txnfs/txnfs/fs"
)

// TestUnchangedSince checks Txn.Mark and FS.UnchangedSince on both stores:
// a mark is unchanged until a commit that wrote something, and the zero
// mark (nothing read yet) never is.
func TestUnchangedSince(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			tf := newTestFS(t, fsOpts{kind: kind})
			ctx := context.Background()
			for _, ro := range []bool{true, false} {
				tx, err := tf.Begin(ctx, fs.RootCred, fs.TxnOptions{ReadOnly: ro})
				if err != nil {
					t.Fatal(err)
				}
				if tf.UnchangedSince(tx.Mark()) {
					t.Fatalf("ro=%v: the mark of a transaction that read nothing is unchanged", ro)
				}
				if _, err := tx.GetAttr(ctx, fs.RootIno); err != nil {
					t.Fatal(err)
				}
				m := tx.Mark()
				if !tf.UnchangedSince(m) {
					t.Fatalf("ro=%v: no commit since the snapshot, but UnchangedSince is false", ro)
				}
				// A read-only view changes nothing.
				if err := tf.View(ctx, fs.RootCred, func(v *fs.Txn) error {
					_, err := v.GetAttr(ctx, fs.RootIno)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if !tf.UnchangedSince(m) {
					t.Fatalf("ro=%v: a read-only transaction moved the version", ro)
				}
				do(t, tf.FS, func(ctx context.Context, w *fs.Txn) error {
					_, _, err := w.Create(ctx, fs.RootIno, "f"+kind.String()+map[bool]string{true: "ro", false: "rw"}[ro],
						fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
					return err
				})
				if tf.UnchangedSince(m) {
					t.Fatalf("ro=%v: a commit was applied since the snapshot, but UnchangedSince is true", ro)
				}
				tx.Abort()
			}
		})
	}
}
