package fs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/meta"
)

// TestAppendAtEnd: a transaction appending with AppendAtEnd commits
// through a concurrent extension of the file (replay re-places its data at
// the new end, here across a region boundary), where Append, which logs
// the offset, aborts.
func TestAppendAtEnd(t *testing.T) {
	ctx := context.Background()
	for _, atEnd := range []bool{true, false} {
		name := map[bool]string{true: "AppendAtEnd", false: "Append"}[atEnd]
		t.Run(name, func(t *testing.T) {
			f := newTestFS(t, fsOpts{})
			start := uint64(meta.RegionSize - 30_000)
			var ino fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "log", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				ino = a.Ino
				if err != nil {
					return err
				}
				return tx.SetAttrOnly(ctx, ino, fs.SetAttr{Size: &start})
			})
			mine, theirs := pattern(3, 20_000), pattern(5, 20_000)
			tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if atEnd {
				err = tx.AppendAtEnd(ctx, ino, mine)
			} else {
				_, err = tx.Append(ctx, ino, mine)
			}
			if err != nil {
				t.Fatal(err)
			}
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.AppendAtEnd(ctx, ino, theirs) })
			err = tx.Commit(ctx)
			if !atEnd {
				if !errors.Is(err, fs.ErrConflict) {
					t.Fatalf("Append after a concurrent append: %v, want ErrConflict", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("AppendAtEnd after a concurrent append: %v", err)
			}
			var got []byte
			if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				got, err = readFile(ctx, tx, ino)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			want := append(append(make([]byte, start), theirs...), mine...)
			if !bytes.Equal(got, want) {
				t.Fatalf("file holds %d bytes, want %d (zeros, theirs, mine); equal prefix %d", len(got), len(want),
					commonPrefix(got, want))
			}
			requireCheckClean(t, f.FS)
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
