package fs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/faultkv"
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

// TestPinDuringRemoval: a Pin that returns while a transaction removing
// the file's last link has not committed yet must keep the inode: the
// commit makes it an orphan, never deletes it (fuse ENGINE-REQUESTS 2).
// Pins racing with the commit either wait for it (and then find the inode
// gone) or are seen by it; a pinner never holds a pin on an inode deleted
// after its Pin returned.
func TestPinDuringRemoval(t *testing.T) {
	ctx := context.Background()
	t.Run("pin-before-commit", func(t *testing.T) {
		f := newTestFS(t, fsOpts{})
		var ino fs.Ino
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
			ino = a.Ino
			return err
		})
		tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Unlink(ctx, fs.RootIno, "f"); err != nil {
			t.Fatal(err)
		}
		f.Pin(ino) // the file is opened by handle before the unlink commits
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		err = f.View(ctx, fs.RootCred, func(tx *fs.Txn) error { _, err := tx.GetAttr(ctx, ino); return err })
		if err != nil {
			t.Fatalf("BUG: pinned before the unlink committed, but the inode is gone: %v", err)
		}
		if err := f.Unpin(ctx, ino); err != nil {
			t.Fatal(err)
		}
		requireCheckClean(t, f.FS)
	})
	t.Run("racing", func(t *testing.T) {
		f := newTestFS(t, fsOpts{wrapKV: func(s kv.Store) kv.Store {
			return faultkv.Wrap(s, faultkv.Options{Latency: time.Millisecond})
		}})
		for i := 0; i < 20; i++ {
			name := fmt.Sprint("f", i)
			var ino fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				ino = a.Ino
				return err
			})
			done := make(chan struct{})
			go func() {
				defer close(done)
				do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, name) })
			}()
			time.Sleep(time.Duration(i%5) * time.Millisecond)
			f.Pin(ino)
			select {
			case <-done:
				// Pin returned after the commit, or the commit saw it.
			default:
				<-done
				err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error { _, err := tx.GetAttr(ctx, ino); return err })
				if err != nil {
					t.Fatalf("iteration %d: Pin returned before the unlink committed, then the inode was deleted: %v", i, err)
				}
			}
			if err := f.Unpin(ctx, ino); err != nil {
				t.Fatal(err)
			}
		}
		requireCheckClean(t, f.FS)
	})
}
