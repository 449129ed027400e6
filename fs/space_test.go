package fs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/slice"
)

// TestSpaceReserve: with Config.Reserve, growth that would leave less than
// the reserve free fails with ErrNoSpace without poisoning the
// transaction, while removal, truncation and rename still work. (The
// datadir package's TestNoSpace does the same on a real, small file
// system.)
func TestSpaceReserve(t *testing.T) {
	ctx := context.Background()
	f, free := openSpaceFS(t, fs.Config{})
	// statfs: the reserve is free but not available.
	if st, err := f.StatFS(ctx); err != nil || st.BlocksFree*uint64(st.BlockSize) != 100<<20 || st.BlocksAvail*uint64(st.BlockSize) != 90<<20 {
		t.Fatalf("StatFS = %+v, %v; want 100 MiB free, 90 MiB available", st, err)
	}
	var ino fs.Ino
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "a", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		ino = a.Ino
		if err != nil {
			return err
		}
		// 89 MiB fits: 100 free less 10 reserved, less the create's
		// record.
		return tx.Write(ctx, ino, 0, make([]byte, 89<<20))
	})
	// The disk filled up: the next MiB would enter the reserve.
	free.Store(10 << 20)
	err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		if err := tx.Write(ctx, ino, 0, make([]byte, 1<<20)); !errors.Is(err, fs.ErrNoSpace) {
			t.Errorf("write into the reserve: %v, want ErrNoSpace", err)
		}
		// Refused growth does not poison the transaction: what
		// shrinks or moves still runs in it.
		if err := tx.Rename(ctx, fs.RootIno, "a", fs.RootIno, "b", fs.RenameFlags{}); err != nil {
			return err
		}
		_, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: new(uint64)})
		return err
	})
	if err != nil {
		t.Fatalf("rename and truncate after a refused write: %v", err)
	}
	err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		_, _, err := tx.Create(ctx, fs.RootIno, "c", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		return err
	})
	if !errors.Is(err, fs.ErrNoSpace) {
		t.Fatalf("create with the reserve reached: %v, want ErrNoSpace", err)
	}
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, "b") })
	free.Store(50 << 20) // space came back (collected)
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "d", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		return tx.Write(ctx, a.Ino, 0, make([]byte, 30<<20))
	})
}

// TestSpaceShortWakesCollector: a write refused for want of space while
// removed files' garbage is pending wakes RunCollector at once (with its
// follow-up), whatever its garbage threshold, so the space comes back.
func TestSpaceShortWakesCollector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, free := openSpaceFS(t, fs.Config{GCWait: time.Millisecond})
	reports := make(chan fs.GCReport, 16)
	go f.RunCollector(ctx, fs.GCSchedule{GarbageBytes: 1 << 40, Interval: time.Hour,
		OnReport: func(r fs.GCReport, err error) {
			if err == nil {
				reports <- r
			}
		}})
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "a", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		return tx.Write(ctx, a.Ino, 0, make([]byte, 4<<20))
	})
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, "a") })
	free.Store(10 << 20)
	err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "b", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		// Beyond the last reading: taken again, and short.
		return tx.Write(ctx, a.Ino, 0, make([]byte, 90<<20))
	})
	if !errors.Is(err, fs.ErrNoSpace) {
		t.Fatalf("write on a full file system: %v, want ErrNoSpace", err)
	}
	var freed uint64
	for i := 0; i < 2; i++ {
		select {
		case r := <-reports:
			freed += r.FreedBytes
		case <-time.After(10 * time.Second):
			t.Fatalf("collection %d did not run after a refused write", i+1)
		}
	}
	if freed < 4<<20 {
		t.Fatalf("the two collections freed %d bytes, want the removed file's 4 MiB", freed)
	}
}

// openSpaceFS opens cfg over a fresh in-memory slice store on a 1 GiB
// file system with a 10 MiB reserve, whose free space the test sets
// through free (100 MiB to start). The store and the FS close with t.
func openSpaceFS(t *testing.T, cfg fs.Config) (*fs.FS, *atomic.Uint64) {
	t.Helper()
	ctx := context.Background()
	st, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.NewMem(), Dir: "slices"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	free := new(atomic.Uint64)
	free.Store(100 << 20)
	cfg.KV, cfg.Slices, cfg.Reserve = memkv.New(), st, 10<<20
	cfg.Capacity = func() (uint64, uint64, error) { return 1 << 30, free.Load(), nil }
	f, err := fs.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, free
}
