package fs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/slice"
)

func newSmokeFS(t testing.TB) *fs.FS {
	t.Helper()
	ctx := context.Background()
	st, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.NewMem(), Dir: "slices"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f, err := fs.Open(ctx, fs.Config{KV: memkv.New(), Slices: st})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestEngineSmoke(t *testing.T) {
	ctx := context.Background()
	f := newSmokeFS(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB: slices
	var fileIno fs.Ino
	err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		d, _, err := tx.Create(ctx, fs.RootIno, "a", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
		if err != nil {
			return err
		}
		a, _, err := tx.Create(ctx, d.Ino, "b", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		fileIno = a.Ino
		if err := tx.Write(ctx, a.Ino, 0, []byte("hello")); err != nil {
			return err
		}
		return tx.Write(ctx, a.Ino, 100, big)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, err := tx.LookupPath(ctx, "/a/b")
		if err != nil {
			return err
		}
		if a.Size != 100+uint64(len(big)) {
			t.Errorf("size %d", a.Size)
		}
		buf := make([]byte, a.Size+10)
		n, eof, err := tx.Read(ctx, a.Ino, 0, buf)
		if err != nil {
			return err
		}
		if n != int(a.Size) || !eof {
			t.Errorf("read n=%d eof=%v", n, eof)
		}
		want := append(append([]byte("hello"), make([]byte, 95)...), big...)
		if !bytes.Equal(buf[:n], want) {
			t.Errorf("content differs")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Slicing: copy, concat, punch.
	err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		c, _, err := tx.Create(ctx, fs.RootIno, "c", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		if err := tx.Concat(ctx, c.Ino, []fs.Ino{fileIno, fileIno}); err != nil {
			return err
		}
		if err := tx.Punch(ctx, c.Ino, 0, 3); err != nil {
			return err
		}
		a, _ := tx.GetAttr(ctx, c.Ino)
		buf := make([]byte, 8)
		if _, _, err := tx.Read(ctx, c.Ino, 0, buf); err != nil {
			return err
		}
		if a.Size != 2*(100+uint64(len(big))) || !bytes.Equal(buf, []byte("\x00\x00\x00lo\x00\x00\x00")) {
			t.Errorf("concat size %d head %q", a.Size, buf)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.Check(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %v", err, rep.Problems)
	}
	// Rename loop and removal.
	err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, _ := tx.LookupPath(ctx, "/a")
		if err := tx.Rename(ctx, fs.RootIno, "a", a.Ino, "x", fs.RenameFlags{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("rename into itself: %v", err)
		}
		if err := tx.Rmdir(ctx, fs.RootIno, "a"); !errors.Is(err, fs.ErrNotEmpty) {
			t.Errorf("rmdir nonempty: %v", err)
		}
		if err := tx.Unlink(ctx, a.Ino, "b"); err != nil {
			return err
		}
		return tx.Rmdir(ctx, fs.RootIno, "a")
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := f.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = f.Check(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("check after gc: %v %v", err, rep.Problems)
	}
}
