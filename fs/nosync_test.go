package fs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

// TestNoSyncAPI: NoSync commits (DoOpts, Begin, AppendOpts) are visible at
// once to every later transaction, readers do not wait for them, Sync makes
// them durable (a power-loss clone after Sync holds them), and bad options
// are refused.
func TestNoSyncAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("data", 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mem, "/")
	e, err := datadir.Open(ctx, datadir.Options{Dir: "data", FS: mem, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	f := e.FS
	nosync := fs.TxnOptions{NoSync: true}
	big, small := pattern(7, 300_000), pattern(9, 100)
	var ino fs.Ino
	err = f.DoOpts(ctx, fs.RootCred, nosync, func(tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		ino = a.Ino
		return tx.Write(ctx, ino, 0, big)
	})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := f.Begin(ctx, fs.RootCred, nosync)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Write(ctx, ino, uint64(len(big)), small); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	off, err := f.AppendOpts(ctx, fs.RootCred, nosync, ino, small)
	if err != nil || off != uint64(len(big)+len(small)) {
		t.Fatalf("AppendOpts: %d, %v", off, err)
	}
	if _, err := f.AppendOpts(ctx, fs.RootCred, fs.TxnOptions{ReadOnly: true}, ino, small); !errors.Is(err, fs.ErrReadOnly) {
		t.Fatalf("read-only AppendOpts: %v, want ErrReadOnly", err)
	}
	want := append(append(bytes.Clone(big), small...), small...)
	read := func(f *fs.FS) []byte {
		t.Helper()
		var got []byte
		if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, err := tx.Lookup(ctx, fs.RootIno, "f")
			if err != nil {
				return err
			}
			got, err = readFile(ctx, tx, a.Ino)
			return err
		}); err != nil {
			t.Fatalf("reading: %v", err)
		}
		return got
	}
	if got := read(f); !bytes.Equal(got, want) {
		t.Fatalf("NoSync commits not visible: %d bytes, want %d", len(got), len(want))
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	clone := mem.CrashClone(vfs.CrashCloneCfg{})
	e.Close()
	e, err = datadir.Open(ctx, datadir.Options{Dir: "data", FS: clone, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := read(e.FS); !bytes.Equal(got, want) {
		t.Fatalf("after Sync and a power loss: %d bytes, want %d", len(got), len(want))
	}
	requireCheckClean(t, e.FS)
	cancel()
	if err := e.FS.Sync(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with a cancelled context: %v", err)
	}
}

// TestSyncFollowsInline: a NoSync commit over ordered stores puts small
// writes in slices (cheap to write; flushed with the log at the next
// Sync), but with SyncFollows — the caller syncs right after — they are
// stored inline, as in a durable commit, so that the Sync needs no slice
// flush. Both read back the same.
func TestSyncFollowsInline(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		opts     fs.TxnOptions
		wantPuts bool
		name     string
	}{
		{fs.TxnOptions{NoSync: true}, true, "nosync"},
		{fs.TxnOptions{NoSync: true, SyncFollows: true}, false, "nosync+syncfollows"},
		{fs.TxnOptions{}, false, "durable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFS(t, fsOpts{kind: storePebble, inlineMax: 8 << 10, slicesOrdered: true})
			local := f.Slices.(*slice.Local)
			before := local.Stats().Puts
			data := pattern(3, 4096)
			var ino fs.Ino
			if err := f.DoOpts(ctx, fs.RootCred, tc.opts, func(tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				if err != nil {
					return err
				}
				ino = a.Ino
				return tx.Write(ctx, ino, 0, data)
			}); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if puts := local.Stats().Puts - before; (puts > 0) != tc.wantPuts {
				t.Fatalf("%d slice puts for a 4 KiB write, want puts: %v", puts, tc.wantPuts)
			}
			var got []byte
			if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
				got, err = readFile(ctx, tx, ino)
				return err
			}); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the 4 KiB written", len(got), err)
			}
		})
	}
}
