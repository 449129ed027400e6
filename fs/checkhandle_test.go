package fs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// conflictCounter wraps a kv store and counts commits that failed with
// kv.ErrConflict; its transactions forward kv.UntrackedGetter.
type conflictCounter struct {
	kv.Store
	conflicts atomic.Int64
}

func (s *conflictCounter) Begin(ctx context.Context, opts kv.TxnOptions) (kv.Txn, error) {
	t, err := s.Store.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countedTxn{Txn: t, s: s}, nil
}

type countedTxn struct {
	kv.Txn
	s *conflictCounter
}

func (t *countedTxn) Commit(ctx context.Context) error {
	err := t.Txn.Commit(ctx)
	if errors.Is(err, kv.ErrConflict) {
		t.s.conflicts.Add(1)
	}
	return err
}

func (t *countedTxn) GetUntracked(ctx context.Context, key []byte) ([]byte, error) {
	return t.Txn.(kv.UntrackedGetter).GetUntracked(ctx, key)
}

// TestCheckHandle: a file handle checked with CheckHandle does not make
// the transaction conflict when the inode's attributes change meanwhile
// (HandleOf does), and a replay checks it again, so that a transaction
// whose handle's inode was removed, or replaced by another inode of the
// same number (which the allocator never does, simulated here by
// rewriting the record's generation), fails with ErrConflict instead of
// committing operations on the other inode.
func TestCheckHandle(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			var cc *conflictCounter
			f := newTestFS(t, fsOpts{kind: kind, wrapKV: func(s kv.Store) kv.Store {
				cc = &conflictCounter{Store: s}
				return cc
			}})
			mk := func(dir fs.Ino, name string, typ fs.FileType) fs.Ino {
				t.Helper()
				var a fs.Attr
				if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
					a, _, err = tx.Create(ctx, dir, name, fs.CreateRequest{Type: typ, Mode: 0o755})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				return a.Ino
			}
			d := mk(fs.RootIno, "d", fs.TypeDirectory)
			e := mk(fs.RootIno, "e", fs.TypeDirectory)
			for _, n := range []string{"x", "y", "z"} {
				mk(d, n, fs.TypeRegular)
				mk(e, n, fs.TypeRegular)
			}
			var want fs.Handle
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
				want, err = tx.HandleOf(ctx, d)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			begin := func() *fs.Txn {
				t.Helper()
				tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return tx
			}

			// 1. d changes (a name added) while a transaction that
			// checked d's handle removes a name in e: no conflict with
			// CheckHandle, one with HandleOf.
			for i, check := range []func(*fs.Txn) (fs.Handle, error){
				func(tx *fs.Txn) (fs.Handle, error) { return tx.CheckHandle(ctx, d) },
				func(tx *fs.Txn) (fs.Handle, error) { return tx.HandleOf(ctx, d) },
			} {
				tx := begin()
				h, err := check(tx)
				if err != nil || h != want {
					t.Fatalf("check %d: %+v, %v; want %+v", i, h, err, want)
				}
				if err := tx.Remove(ctx, e, []string{"x", "y"}[i]); err != nil {
					t.Fatal(err)
				}
				mk(d, []string{"new1", "new2"}[i], fs.TypeRegular)
				before := cc.conflicts.Load()
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
				got := cc.conflicts.Load() - before
				if wantC := []int64{0, 1}[i]; got != wantC {
					t.Fatalf("check %d: %d kv conflicts, want %d", i, got, wantC)
				}
			}

			// 2. d is replaced by an inode of the same number and
			// another generation while a transaction that checked the
			// old handle removes a name in d: the commit conflicts
			// (the removal read d), the replay's check sees the other
			// generation, and nothing is removed.
			tx := begin()
			if h, err := tx.CheckHandle(ctx, d); err != nil || h != want {
				t.Fatalf("CheckHandle: %+v, %v", h, err)
			}
			if err := tx.Remove(ctx, d, "x"); err != nil {
				t.Fatal(err)
			}
			rewriteGen(t, f.KV, d)
			if err := tx.Commit(ctx); !errors.Is(err, fs.ErrConflict) {
				t.Fatalf("commit after the inode's generation changed: %v, want ErrConflict", err)
			}
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				_, err := tx.Lookup(ctx, d, "x")
				return err
			}); err != nil {
				t.Fatalf("x after the failed commit: %v, want it still there", err)
			}

			// 3. e is removed (emptied first) while a transaction that
			// checked its handle creates a name in it: the commit fails.
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				return tx.Remove(ctx, e, "z")
			}); err != nil {
				t.Fatal(err)
			}
			tx = begin()
			if _, err := tx.CheckHandle(ctx, e); err != nil {
				t.Fatal(err)
			}
			if _, _, err := tx.Create(ctx, e, "late", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644}); err != nil {
				t.Fatal(err)
			}
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				return tx.Rmdir(ctx, fs.RootIno, "e")
			}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); !errors.Is(err, fs.ErrConflict) {
				t.Fatalf("commit after the directory was removed: %v, want ErrConflict", err)
			}
			tx = begin()
			defer tx.Abort()
			if _, err := tx.CheckHandle(ctx, e); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("CheckHandle of a removed directory: %v, want ErrNotExist", err)
			}
		})
	}
}

// rewriteGen gives inode ino's record another generation, as if ino had
// been removed and its number handed out again.
func rewriteGen(t *testing.T, s kv.Store, ino fs.Ino) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Begin(ctx, kv.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	key := meta.InodeKey(uint64(ino))
	b, err := tx.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var n meta.Inode
	if err := meta.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	n.Gen++
	if b, err = meta.Marshal(&n); err != nil {
		t.Fatal(err)
	}
	if err := tx.Set(key, b); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReadDirAttrsInTxn: ReadDir's attributes (read without filling the
// transaction's inode cache) see the transaction's own changes, and the
// transaction's later reads and changes of those inodes still see and
// validate the records: a concurrent change to one of them makes the
// transaction's commit replay and fail when the result differs.
func TestReadDirAttrsInTxn(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			f := newTestFS(t, fsOpts{kind: kind})
			var a, b fs.Attr
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
				if a, _, err = tx.Create(ctx, fs.RootIno, "a", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644}); err != nil {
					return err
				}
				b, _, err = tx.Create(ctx, fs.RootIno, "b", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			modes := func(tx *fs.Txn) map[string]uint32 {
				t.Helper()
				ents, _, err := tx.ReadDir(ctx, fs.RootIno, fs.ReadDirRequest{WithAttr: true})
				if err != nil {
					t.Fatal(err)
				}
				m := map[string]uint32{}
				for _, e := range ents {
					m[e.Name] = e.Attr.Mode
				}
				return m
			}
			setMode := func(tx *fs.Txn, ino fs.Ino, mode uint32) {
				t.Helper()
				if _, err := tx.SetAttr(ctx, ino, fs.SetAttr{Mode: &mode}); err != nil {
					t.Fatal(err)
				}
			}
			tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			setMode(tx, a.Ino, 0o600)
			if m := modes(tx); m["a"] != 0o600 || m["b"] != 0o644 {
				t.Fatalf("ReadDir after own SetAttr: %v", m)
			}
			// b's record was read by ReadDir only; another transaction
			// changes it; this one then changes b from what it read.
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				setMode(tx, b.Ino, 0o640)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got, err := tx.GetAttr(ctx, b.Ino)
			if err != nil || got.Mode != 0o644 {
				t.Fatalf("GetAttr after ReadDir: mode %o, %v; want the snapshot's 644", got.Mode, err)
			}
			setMode(tx, b.Ino, 0o604)
			if m := modes(tx); m["b"] != 0o604 {
				t.Fatalf("ReadDir after own SetAttr of b: %v", m)
			}
			if err := tx.Commit(ctx); !errors.Is(err, fs.ErrConflict) {
				t.Fatalf("commit: %v, want ErrConflict (the replayed reads differ)", err)
			}
		})
	}
}
