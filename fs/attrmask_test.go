package fs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
)

// TestGetAttrMaskReplay: a transaction that read only some attributes
// commits through a concurrent change of others (replay compares only what
// it read), but conflicts when one it read changed; a full GetAttr
// conflicts in both cases.
func TestGetAttrMaskReplay(t *testing.T) {
	ctx := context.Background()
	mtime := fs.SetAttr{Mtime: &fs.SetTime{Time: time.Unix(1_800_000_000, 0)}}
	grow := func(ctx context.Context, tx *fs.Txn, ino fs.Ino) error {
		return tx.Write(ctx, ino, 100, []byte("more"))
	}
	for _, c := range []struct {
		name   string
		mask   fs.AttrMask // 0: full GetAttr
		change func(ctx context.Context, tx *fs.Txn, ino fs.Ino) error
		want   error
	}{
		{"size-vs-mtime", fs.AttrSize, func(ctx context.Context, tx *fs.Txn, ino fs.Ino) error { return tx.SetAttrOnly(ctx, ino, mtime) }, nil},
		{"size+type-vs-mtime", fs.AttrSize | fs.AttrMode, func(ctx context.Context, tx *fs.Txn, ino fs.Ino) error { return tx.SetAttrOnly(ctx, ino, mtime) }, nil},
		{"full-vs-mtime", 0, func(ctx context.Context, tx *fs.Txn, ino fs.Ino) error { return tx.SetAttrOnly(ctx, ino, mtime) }, fs.ErrConflict},
		{"size-vs-write", fs.AttrSize, grow, fs.ErrConflict},
		{"change-vs-write", fs.AttrChange, grow, fs.ErrConflict}, // the clock is fixed: mtime does not move
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newTestFS(t, fsOpts{})
			var file, other fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				file = a.Ino
				if err != nil {
					return err
				}
				if err := tx.Write(ctx, file, 0, []byte("data")); err != nil {
					return err
				}
				b, _, err := tx.Create(ctx, fs.RootIno, "g", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				other = b.Ino
				return err
			})
			tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var a fs.Attr
			if c.mask == 0 {
				a, err = tx.GetAttr(ctx, file)
			} else {
				a, err = tx.GetAttrMask(ctx, file, c.mask)
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Ino != file || a.Type != fs.TypeRegular || a.Size != 4 && c.mask&fs.AttrSize != 0 {
				t.Fatalf("GetAttrMask(%b) = %+v", c.mask, a)
			}
			if c.mask != 0 && c.mask&fs.AttrNlink == 0 && a.Nlink != 0 {
				t.Fatalf("GetAttrMask(%b) returned nlink %d, not asked for", c.mask, a.Nlink)
			}
			if err := tx.Write(ctx, other, 0, []byte("x")); err != nil {
				t.Fatal(err)
			}
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return c.change(ctx, tx, file) })
			err = tx.Commit(ctx)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("commit after a concurrent change: %v, want %v", err, c.want)
			}
			requireCheckClean(t, f.FS)
		})
	}
}

// TestLinkOnlyReplay: a transaction that made a link with LinkOnly commits
// through a concurrent attribute change of the file; with Link, whose
// logged result holds the attributes, it conflicts.
func TestLinkOnlyReplay(t *testing.T) {
	ctx := context.Background()
	for _, only := range []bool{true, false} {
		f := newTestFS(t, fsOpts{})
		var file fs.Ino
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
			file = a.Ino
			return err
		})
		tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if only {
			err = tx.LinkOnly(ctx, file, fs.RootIno, "g")
		} else {
			_, err = tx.Link(ctx, file, fs.RootIno, "g")
		}
		if err != nil {
			t.Fatal(err)
		}
		mode := uint32(0o600)
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.SetAttrOnly(ctx, file, fs.SetAttr{Mode: &mode}) })
		err = tx.Commit(ctx)
		if only && err != nil || !only && !errors.Is(err, fs.ErrConflict) {
			t.Fatalf("LinkOnly=%v: commit after a concurrent chmod: %v", only, err)
		}
		if only {
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, err := tx.Lookup(ctx, fs.RootIno, "g")
				if err == nil && (a.Ino != file || a.Nlink != 2 || a.Mode != mode) {
					t.Errorf("after LinkOnly: %+v", a)
				}
				return err
			})
		}
		requireCheckClean(t, f.FS)
	}
}

// TestChangeMarkReplay: change marks around a create are not compared on
// replay, so a transaction creating in a directory where another create
// committed meanwhile still commits, and the marks then hold the values
// of the execution that committed (atomic before/after); reading the
// directory's attributes instead makes it conflict.
func TestChangeMarkReplay(t *testing.T) {
	ctx := context.Background()
	for _, marks := range []bool{true, false} {
		f := newTestFS(t, fsOpts{})
		var before0 uint64
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			a, err := tx.GetAttr(ctx, fs.RootIno)
			before0 = a.Change
			return err
		})
		tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var before, after uint64
		mark := func(dst *uint64) {
			t.Helper()
			if marks {
				err = tx.ChangeMark(ctx, fs.RootIno, dst)
			} else {
				var a fs.Attr
				a, err = tx.GetAttr(ctx, fs.RootIno)
				*dst = a.Change
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		mark(&before)
		if _, _, err := tx.Create(ctx, fs.RootIno, "a", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
		mark(&after)
		if before != before0 || after <= before {
			t.Fatalf("first execution: before %d after %d (dir was at %d)", before, after, before0)
		}
		var other uint64
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			if _, _, err := tx.Create(ctx, fs.RootIno, "b", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644}); err != nil {
				return err
			}
			a, err := tx.GetAttr(ctx, fs.RootIno)
			other = a.Change
			return err
		})
		err = tx.Commit(ctx)
		if !marks {
			if !errors.Is(err, fs.ErrConflict) {
				t.Fatalf("GetAttr marks: commit after a concurrent create: %v, want ErrConflict", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ChangeMark: commit after a concurrent create: %v", err)
		}
		var final uint64
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			a, err := tx.GetAttr(ctx, fs.RootIno)
			final = a.Change
			return err
		})
		if before != other || after != final {
			t.Fatalf("marks after commit: before %d after %d, want %d and %d (the committed execution's)", before, after, other, final)
		}
	}
}

// TestAttrUsed: GetAttr's Used counts the data a file references, not its
// size: holes, punched ranges and never-written ranges are excluded,
// including the transaction's own uncommitted writes.
func TestAttrUsed(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	used := func(tx *fs.Txn, ino fs.Ino) uint64 {
		t.Helper()
		a, err := tx.GetAttr(ctx, ino)
		if err != nil {
			t.Fatal(err)
		}
		m, err := tx.GetAttrMask(ctx, ino, fs.AttrUsed)
		if err != nil || m.Used != a.Used {
			t.Fatalf("GetAttrMask(AttrUsed) = %d, %v; GetAttr says %d", m.Used, err, a.Used)
		}
		return a.Used
	}
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "sparse", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		if got := used(tx, a.Ino); got != 0 {
			t.Errorf("empty file: Used %d", got)
		}
		if err := tx.Write(ctx, a.Ino, 0, pattern(1, 100_000)); err != nil { // a slice
			return err
		}
		if err := tx.Write(ctx, a.Ino, 3<<30, pattern(2, 100)); err != nil { // inline, far away
			return err
		}
		if got, want := used(tx, a.Ino), uint64(100_000+4095)&^4095+4096; got != want {
			t.Errorf("in the writing transaction: Used %d, want %d", got, want)
		}
		return nil
	})
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, err := tx.Lookup(ctx, fs.RootIno, "sparse")
		if err != nil {
			return err
		}
		if got, want := used(tx, a.Ino), uint64(100_000+4095)&^4095+4096; got != want {
			t.Errorf("committed: Used %d, want %d (size %d)", got, want, a.Size)
		}
		if err := tx.Punch(ctx, a.Ino, 0, 65536); err != nil {
			return err
		}
		if got, want := used(tx, a.Ino), uint64(100_000-65536+4095)&^4095+4096; got != want {
			t.Errorf("after punching 64 KiB: Used %d, want %d", got, want)
		}
		return nil
	})
}
