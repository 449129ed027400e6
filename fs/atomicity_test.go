package fs_test

// Atomicity tests in the style of TC-NFS §4: "We issue a compound that
// contains a sequence of NFS file operations, with a forced invalid request
// mid-way to cause an error. We expect that the partially executed compound
// is rolled back entirely (i.e., file system state is rolled back to
// exactly where it was before the compound began executing)."

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// atomBase names the inodes of the tree every atomicity case starts from:
//
//	/d/          dir
//	/d/sub/      dir
//	/d/sub/x     file, 10 bytes (inline)
//	/e/          empty dir
//	/f1          file, 5000 bytes (a slice), xattr user.k, hard link /h
//	/f2          file, 100 bytes (inline)
//	/big         file, 300 KiB
//	/s           symlink -> f1
type atomBase struct {
	d, sub, x, e, f1, f2, big, s fs.Ino
}

func setupAtomBase(t *testing.T, f *fs.FS) atomBase {
	t.Helper()
	var b atomBase
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		mk := func(dir fs.Ino, name string, typ fs.FileType, data []byte) fs.Ino {
			a, _, err := tx.Create(ctx, dir, name, fs.CreateRequest{Type: typ, Mode: 0o755, Target: "f1"})
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			if data != nil {
				if err := tx.Write(ctx, a.Ino, 0, data); err != nil {
					t.Fatalf("write %s: %v", name, err)
				}
			}
			return a.Ino
		}
		b.d = mk(fs.RootIno, "d", fs.TypeDirectory, nil)
		b.sub = mk(b.d, "sub", fs.TypeDirectory, nil)
		b.x = mk(b.sub, "x", fs.TypeRegular, pattern(1, 10))
		b.e = mk(fs.RootIno, "e", fs.TypeDirectory, nil)
		b.f1 = mk(fs.RootIno, "f1", fs.TypeRegular, pattern(2, 5000))
		b.f2 = mk(fs.RootIno, "f2", fs.TypeRegular, pattern(3, 100))
		b.big = mk(fs.RootIno, "big", fs.TypeRegular, pattern(4, 300<<10))
		b.s = mk(fs.RootIno, "s", fs.TypeSymlink, nil)
		if _, err := tx.Link(ctx, b.f1, fs.RootIno, "h"); err != nil {
			t.Fatalf("link: %v", err)
		}
		if err := tx.SetXattr(ctx, b.f1, "user.k", []byte("v"), fs.XattrFlags{}); err != nil {
			t.Fatalf("setxattr: %v", err)
		}
		return nil
	})
	return b
}

// fullState is everything observable: the tree (names, types, contents,
// links, xattrs), every attribute of every path (times, change counters,
// inode numbers) and, byte for byte, every metadata record in the kv store
// except engine bookkeeping ("m" keys: inode-number batches and secrets
// are reserved outside file-system transactions by design).
type fullState struct {
	tree  string
	attrs map[string]fs.Attr
	raw   []kv.Pair
}

func captureState(t *testing.T, f *testFS) fullState {
	t.Helper()
	ctx := context.Background()
	var st fullState
	st.attrs = map[string]fs.Attr{}
	err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		snap, err := snapshotTxn(ctx, tx)
		if err != nil {
			return err
		}
		st.tree = snapString(snap)
		for _, e := range snap {
			a, err := tx.LookupPath(ctx, e.Path)
			if err != nil {
				return err
			}
			st.attrs[e.Path] = a
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	kt, err := f.KV.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("kv.Begin: %v", err)
	}
	defer kt.Rollback()
	pairs, err := kt.Scan(ctx, []byte{0}, nil, 0)
	if err != nil {
		t.Fatalf("kv.Scan: %v", err)
	}
	misc := meta.MiscKey("")
	for _, p := range pairs {
		if !bytes.HasPrefix(p.Key, misc) {
			st.raw = append(st.raw, p)
		}
	}
	return st
}

func requireSameState(t *testing.T, before, after fullState) {
	t.Helper()
	if before.tree != after.tree {
		t.Fatalf("tree changed:\nbefore:\n%s\nafter:\n%s", before.tree, after.tree)
	}
	for p, a := range before.attrs {
		if b := after.attrs[p]; !reflect.DeepEqual(a, b) {
			t.Fatalf("attributes of %s changed:\nbefore %+v\nafter  %+v", p, a, b)
		}
	}
	if len(before.raw) != len(after.raw) {
		t.Fatalf("kv store has %d metadata records, had %d", len(after.raw), len(before.raw))
	}
	for i := range before.raw {
		a, b := before.raw[i], after.raw[i]
		if !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) {
			t.Fatalf("kv record %d changed: %q=%x -> %q=%x", i, a.Key, a.Value, b.Key, b.Value)
		}
	}
}

type atomCase struct {
	name string
	// op is the operation under test; it must succeed.
	op func(ctx context.Context, tx *fs.Txn, b atomBase) error
	// needsYank marks cases that use Yank/Paste (see TestYankPaste).
	needsYank bool
}

func u32p(v uint32) *uint32 { return &v }
func u64p(v uint64) *uint64 { return &v }

var atomCases = []atomCase{
	{name: "create", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		a, _, err := tx.Create(ctx, b.d, "new", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o600, Exclusive: true})
		if err != nil {
			return err
		}
		return tx.Write(ctx, a.Ino, 0, pattern(9, 9000))
	}},
	{name: "create-existing-opens", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, created, err := tx.Create(ctx, fs.RootIno, "f2", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o600})
		if err == nil && created {
			return errors.New("existing file created again")
		}
		if err != nil {
			return err
		}
		return tx.Write(ctx, b.f2, 0, []byte("x"))
	}},
	{name: "mkdir", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "nd", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
		if err != nil {
			return err
		}
		_, _, err = tx.Create(ctx, a.Ino, "inner", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
		return err
	}},
	{name: "write", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		if err := tx.Write(ctx, b.f1, 100, pattern(7, 7000)); err != nil {
			return err
		}
		return tx.Write(ctx, b.big, 200<<10, pattern(8, 200<<10))
	}},
	{name: "write-sparse", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Write(ctx, b.f2, 9<<20+5, []byte("far"))
	}},
	{name: "truncate", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		if _, err := tx.SetAttr(ctx, b.f1, fs.SetAttr{Size: u64p(10)}); err != nil {
			return err
		}
		_, err := tx.SetAttr(ctx, b.f2, fs.SetAttr{Size: u64p(100000)})
		return err
	}},
	{name: "remove", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Unlink(ctx, fs.RootIno, "f2")
	}},
	{name: "remove-one-of-two-links", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Remove(ctx, fs.RootIno, "h")
	}},
	{name: "remove-big", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Remove(ctx, fs.RootIno, "big")
	}},
	{name: "rmdir", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rmdir(ctx, fs.RootIno, "e")
	}},
	{name: "rename-file", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rename(ctx, fs.RootIno, "f2", b.sub, "moved", fs.RenameFlags{})
	}},
	{name: "rename-file-replace", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rename(ctx, fs.RootIno, "big", fs.RootIno, "f2", fs.RenameFlags{})
	}},
	{name: "rename-dir", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rename(ctx, b.d, "sub", b.e, "sub2", fs.RenameFlags{})
	}},
	{name: "rename-dir-over-empty-dir", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rename(ctx, fs.RootIno, "d", fs.RootIno, "e", fs.RenameFlags{})
	}},
	{name: "rename-exchange", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rename(ctx, fs.RootIno, "f1", b.d, "sub", fs.RenameFlags{Exchange: true})
	}},
	{name: "link", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, err := tx.Link(ctx, b.f2, b.sub, "l")
		return err
	}},
	{name: "symlink", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, _, err := tx.Create(ctx, b.d, "sl", fs.CreateRequest{Type: fs.TypeSymlink, Target: "../f1"})
		return err
	}},
	{name: "mknod", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, _, err := tx.Create(ctx, b.d, "fifo", fs.CreateRequest{Type: fs.TypeFIFO, Mode: 0o600})
		if err != nil {
			return err
		}
		_, _, err = tx.Create(ctx, b.d, "chr", fs.CreateRequest{Type: fs.TypeChar, Mode: 0o600, Rdev: 1<<32 | 3})
		return err
	}},
	{name: "setattr", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		if _, err := tx.SetAttr(ctx, b.f1, fs.SetAttr{Mode: u32p(0o4711), Uid: u32p(7), Gid: u32p(8)}); err != nil {
			return err
		}
		when := fs.SetTime{Time: time.Unix(12345, 678)}
		_, err := tx.SetAttr(ctx, b.d, fs.SetAttr{Atime: &when, Mtime: &fs.SetTime{Now: true}})
		return err
	}},
	{name: "xattr", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		if err := tx.SetXattr(ctx, b.f2, "user.new", []byte("nv"), fs.XattrFlags{Create: true}); err != nil {
			return err
		}
		return tx.RemoveXattr(ctx, b.f1, "user.k")
	}},
	{name: "yank-paste", needsYank: true, op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		s, err := tx.Yank(ctx, b.big, 1000, 100<<10)
		if err != nil {
			return err
		}
		return tx.Paste(ctx, b.f2, 50, s)
	}},
	{name: "punch", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Punch(ctx, b.big, 4096, 100<<10)
	}},
	{name: "append", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, err := tx.Append(ctx, b.f1, pattern(5, 3000))
		return err
	}},
	{name: "concat", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Concat(ctx, b.f2, []fs.Ino{b.f1, b.big, b.f2})
	}},
	{name: "copy", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Copy(ctx, b.big, b.f2)
	}},
	{name: "copyrange", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, err := tx.CopyRange(ctx, b.big, 10, b.f1, 4000, 50000)
		return err
	}},
	{name: "allocate", op: func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Allocate(ctx, b.f2, 0, 1<<20)
	}},
}

// failingOps are forced invalid requests; each returns the error it must
// fail with.
var failingOps = []struct {
	name string
	want error
	op   func(ctx context.Context, tx *fs.Txn, b atomBase) error
}{
	{"lookup-missing", fs.ErrNotExist, func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, err := tx.Lookup(ctx, b.d, "no-such-name")
		return err
	}},
	{"write-to-dir", fs.ErrIsDir, func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Write(ctx, b.d, 0, []byte("x"))
	}},
	{"rmdir-not-empty", fs.ErrNotEmpty, func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rmdir(ctx, fs.RootIno, "d")
	}},
	{"rename-into-itself", fs.ErrInvalid, func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		return tx.Rename(ctx, b.d, "sub", b.sub, "loop", fs.RenameFlags{})
	}},
	{"create-bad-name", fs.ErrBadName, func(ctx context.Context, tx *fs.Txn, b atomBase) error {
		_, _, err := tx.Create(ctx, fs.RootIno, "a/b", fs.CreateRequest{Type: fs.TypeRegular})
		return err
	}},
}

// prefixOps are the successful operations that run before the one under
// test.
func prefixOps(ctx context.Context, tx *fs.Txn, b atomBase) error {
	a, _, err := tx.Create(ctx, fs.RootIno, "pre", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
	if err != nil {
		return err
	}
	if err := tx.Write(ctx, a.Ino, 0, pattern(6, 6000)); err != nil {
		return err
	}
	if err := tx.Write(ctx, b.x, 3, []byte("pre")); err != nil {
		return err
	}
	_, _, err = tx.Create(ctx, b.d, "pre-dir", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o700})
	return err
}

// TestAtomicity runs, for every operation kind, a transaction of several
// successful operations, then that operation, then a forced invalid
// request (and one more successful operation, to show the failure did not
// poison the transaction), and aborts it: the file system must be exactly
// as before, down to attributes and kv records. The Do variant returns the
// failing operation's error from the closure instead.
func TestAtomicity(t *testing.T) {
	for ci, c := range atomCases {
		fo := failingOps[ci%len(failingOps)]
		for _, variant := range []string{"abort", "do-error", "do-error-after-op"} {
			t.Run(fmt.Sprintf("%s/%s/%s", c.name, fo.name, variant), func(t *testing.T) {
				if c.needsYank {
					if ok, _ := yankWorks(); !ok {
						t.Skip("BUG: Yank crashes the process (see TestYankPaste)")
					}
				}
				ctx := context.Background()
				f := newTestFS(t, fsOpts{})
				b := setupAtomBase(t, f.FS)
				before := captureState(t, f)

				// body runs the transaction's operations and returns
				// the forced failure.
				body := func(tx *fs.Txn) error {
					if err := prefixOps(ctx, tx, b); err != nil {
						t.Fatalf("prefix ops: %v", err)
					}
					if err := c.op(ctx, tx, b); err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					// The changes are visible inside the transaction.
					snap, err := snapshotTxn(ctx, tx)
					if err != nil {
						t.Fatalf("snapshot in transaction: %v", err)
					}
					if snapString(snap) == before.tree && c.name != "setattr" {
						t.Fatalf("%s changed nothing inside the transaction", c.name)
					}
					ferr := fo.op(ctx, tx, b)
					if !errors.Is(ferr, fo.want) {
						t.Fatalf("forced failure %s: got %v, want %v", fo.name, ferr, fo.want)
					}
					return ferr
				}
				switch variant {
				case "abort":
					tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
					if err != nil {
						t.Fatal(err)
					}
					body(tx)
					// A validation error does not poison the transaction.
					if _, _, err := tx.Create(ctx, fs.RootIno, "post", fs.CreateRequest{Type: fs.TypeRegular}); err != nil {
						t.Fatalf("operation after a failed one: %v", err)
					}
					tx.Abort()
					if err := tx.Commit(ctx); !errors.Is(err, fs.ErrTxnDone) {
						t.Fatalf("Commit after Abort: %v", err)
					}
				case "do-error":
					err := f.Do(ctx, fs.RootCred, body)
					if !errors.Is(err, fo.want) {
						t.Fatalf("Do: got %v, want %v", err, fo.want)
					}
				case "do-error-after-op":
					// The closure fails with an error of its own after
					// the operation succeeded.
					errMine := errors.New("caller gives up")
					err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
						if err := prefixOps(ctx, tx, b); err != nil {
							return err
						}
						if err := c.op(ctx, tx, b); err != nil {
							t.Fatalf("%s: %v", c.name, err)
						}
						return errMine
					})
					if err != errMine {
						t.Fatalf("Do: got %v, want the closure's own error", err)
					}
				}
				requireSameState(t, before, captureState(t, f))
				requireCheckClean(t, f.FS)

				// And the same operation commits for real afterwards.
				do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
					if err := prefixOps(ctx, tx, b); err != nil {
						return err
					}
					return c.op(ctx, tx, b)
				})
				requireCheckClean(t, f.FS)
				if after := captureState(t, f); after.tree == before.tree && c.name != "setattr" {
					t.Fatalf("committed %s changed nothing", c.name)
				}
			})
		}
	}
}

// TestAtomicityCommitAfterFailure: committing after a failed (validation)
// operation commits exactly the successful ones.
func TestAtomicityCommitAfterFailure(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	b := setupAtomBase(t, f.FS)
	want := newTestFS(t, fsOpts{})
	wb := setupAtomBase(t, want.FS)
	do(t, want.FS, func(ctx context.Context, tx *fs.Txn) error { return prefixOps(ctx, tx, wb) })

	tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := prefixOps(ctx, tx, b); err != nil {
		t.Fatal(err)
	}
	for _, fo := range failingOps {
		if err := fo.op(ctx, tx, b); !errors.Is(err, fo.want) {
			t.Fatalf("%s: got %v, want %v", fo.name, err, fo.want)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	requireSameTree(t, mustSnapshot(t, want.FS), mustSnapshot(t, f.FS))
	requireCheckClean(t, f.FS)
}

// TestTxnDone: every operation after Commit or Abort fails with ErrTxnDone
// and changes nothing.
func TestTxnDone(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	b := setupAtomBase(t, f.FS)
	for _, end := range []string{"commit", "abort"} {
		tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if end == "commit" {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			tx.Abort()
		}
		before := captureState(t, f)
		for _, c := range atomCases {
			if c.needsYank {
				continue
			}
			if err := c.op(ctx, tx, b); !errors.Is(err, fs.ErrTxnDone) {
				t.Errorf("%s after %s: %v, want ErrTxnDone", c.name, end, err)
			}
		}
		if err := tx.Commit(ctx); !errors.Is(err, fs.ErrTxnDone) {
			t.Errorf("second Commit after %s: %v", end, err)
		}
		tx.Abort()
		requireSameState(t, before, captureState(t, f))
	}
}

// TestReadOnlyTxn: writes in a read-only transaction fail with ErrReadOnly
// and leave no trace; reads work.
func TestReadOnlyTxn(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	b := setupAtomBase(t, f.FS)
	before := captureState(t, f)
	for _, c := range atomCases {
		if c.needsYank {
			continue
		}
		err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			if _, err := tx.GetAttr(ctx, b.f1); err != nil {
				return err
			}
			return c.op(ctx, tx, b)
		})
		if !errors.Is(err, fs.ErrReadOnly) {
			t.Errorf("%s in a read-only transaction: %v, want ErrReadOnly", c.name, err)
		}
	}
	requireSameState(t, before, captureState(t, f))
}
