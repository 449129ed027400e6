package fs_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/txnfs/txnfs/fs"
)

// TestChunkRangeOwnWrites: operations over long sparse ranges (which find
// the span records with kv scans) see the transaction's own uncommitted
// records and deletions: Seek, Read, Yank/Paste and Punch inside one
// transaction, on a sparse file, then the committed result.
func TestChunkRangeOwnWrites(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			f := newTestFS(t, fsOpts{kind: kind})
			const far = 50 << 20 // far away: a sparse range
			var ino, copyIno fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "sparse", fs.CreateRequest{Type: fs.TypeRegular})
				if err != nil {
					return err
				}
				ino = a.Ino
				b, _, err := tx.Create(ctx, fs.RootIno, "copy", fs.CreateRequest{Type: fs.TypeRegular})
				if err != nil {
					return err
				}
				copyIno = b.Ino
				if err := tx.Write(ctx, ino, 0, []byte("head")); err != nil {
					return err
				}
				if err := tx.Write(ctx, ino, far, []byte("far data")); err != nil {
					return err
				}
				if off, eof, err := tx.Seek(ctx, ino, 10, fs.SeekData); err != nil || eof || off != far {
					t.Errorf("uncommitted: SeekData(10) = %d, %v, %v; want %d", off, eof, err, far)
				}
				s, err := tx.Yank(ctx, ino, 1, far+7)
				if err != nil {
					return err
				}
				if err := tx.Paste(ctx, copyIno, 0, s); err != nil {
					return err
				}
				buf := make([]byte, 8)
				if n, _, err := tx.Read(ctx, copyIno, far-1, buf); err != nil || !bytes.Equal(buf[:n], []byte("far data")) {
					t.Errorf("uncommitted paste: read %q, %v", buf[:n], err)
				}
				return nil
			})
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				// Punch a long range, then look in the same
				// transaction: the deleted data must not show.
				if err := tx.Punch(ctx, ino, 1, far+100); err != nil {
					return err
				}
				if off, eof, err := tx.Seek(ctx, ino, 10, fs.SeekData); err != nil || !eof {
					t.Errorf("after punch: SeekData(10) = %d, %v, %v; want EOF", off, eof, err)
				}
				buf := make([]byte, 8)
				if n, _, err := tx.Read(ctx, ino, far, buf); err != nil || !bytes.Equal(buf[:n], make([]byte, n)) || n != 8 {
					t.Errorf("after punch: read %q, %v", buf[:n], err)
				}
				return tx.Write(ctx, ino, far+(1<<20), []byte("new"))
			})
			err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				if off, eof, err := tx.Seek(ctx, ino, 10, fs.SeekData); err != nil || eof || off != far+(1<<20) {
					t.Errorf("committed: SeekData(10) = %d, %v, %v", off, eof, err)
				}
				buf := make([]byte, 4)
				if n, _, err := tx.Read(ctx, ino, 0, buf); err != nil || string(buf[:n]) != "h\x00\x00\x00" {
					t.Errorf("committed: head reads %q, %v", buf[:n], err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			requireCheckClean(t, f.FS)
		})
	}
}
