package vnfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/vnfs"
)

// TestTxnLargeVector: a transactional vector larger than one COMPOUND
// runs as a multi-compound transaction on txnfs (all or nothing) and is
// refused, without effect, elsewhere.
func TestTxnLargeVector(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// 300 files of 20 KiB: several COMPOUNDs by operations and bytes.
		ios := make([]vnfs.IO, 300)
		for i := range ios {
			ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%d", e.dir, i)), Data: []byte(strings.Repeat(string(rune('a'+i%26)), 20<<10)), Flags: vnfs.Create}
		}
		// The last item fails: nothing at all may remain.
		bad := append(append([]vnfs.IO(nil), ios...), vnfs.IO{File: vnfs.P(e.dir + "/missing/x"), Data: []byte("x"), Flags: vnfs.Create})
		n, err := e.fs.Txn().VWrite(ctx, bad)
		if !e.txn {
			if n != 0 || !errors.Is(err, vnfs.ErrTxnUnsupported) {
				t.Fatalf("n=%d err=%v, want ErrTxnUnsupported", n, err)
			}
		} else {
			var ve *vnfs.Error
			if n != 0 || !errors.As(err, &ve) || ve.Index != len(ios) {
				t.Fatalf("n=%d err=%v, want the last item to fail", n, err)
			}
		}
		if _, err := vnfs.Stat(ctx, e.fs, e.dir+"/f0"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("failed or refused transactional vector left f0: %v", err)
		}
		if !e.txn {
			return
		}
		before := e.stats().Compounds
		n, err = e.fs.Txn().VWrite(ctx, ios)
		mustN(t, n, err, len(ios))
		if c := e.stats().Compounds - before; c < 4 {
			t.Fatalf("%d COMPOUNDs: the vector was expected to need a multi-compound transaction (BEGIN, >= 2 joined, END)", c)
		}
		// Read them all back in one transactional (multi-compound) read.
		rd := make([]vnfs.IO, len(ios))
		for i := range rd {
			rd[i] = vnfs.IO{File: ios[i].File, Data: make([]byte, 20<<10)}
		}
		n, err = e.fs.Txn().VRead(ctx, rd)
		mustN(t, n, err, len(rd))
		for i := range rd {
			if string(rd[i].Data[:rd[i].N]) != string(ios[i].Data) {
				t.Fatalf("file %d: %d bytes differ", i, rd[i].N)
			}
		}
		// A transactional copy (reads and writes in one transaction).
		n, err = e.fs.Txn().VCopy(ctx, []vnfs.CopyItem{{Src: vnfs.P(e.dir + "/f1"), Dst: vnfs.P(e.dir + "/copy"), Length: vnfs.CopyToEnd, Flags: vnfs.Create}})
		mustN(t, n, err, 1)
		if got, err := vnfs.ReadFile(ctx, e.fs, e.dir+"/copy"); err != nil || string(got) != string(ios[1].Data) {
			t.Fatalf("copy: %d bytes, %v", len(got), err)
		}
	})
}

// TestTxBegin exercises the explicit multi-call transaction.
func TestTxBegin(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tx, err := vnfs.Begin(ctx, e.fs)
		if !e.txn {
			if !errors.Is(err, vnfs.ErrTxnUnsupported) {
				t.Fatalf("Begin: %v, want ErrTxnUnsupported", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		other, err := vnfs.Dial(ctx, vnfs.Config{Addr: e.peer.Addr, Root: e.peer.Root})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		n, err := tx.VMkdir(ctx, []vnfs.MkdirItem{{Path: e.dir + "/d"}})
		mustN(t, n, err, 1)
		n, err = tx.VWrite(ctx, []vnfs.IO{{File: vnfs.P(e.dir + "/d/f"), Data: []byte("in tx"), Flags: vnfs.Create}})
		mustN(t, n, err, 1)
		if got, err := vnfs.ReadFile(ctx, tx, e.dir+"/d/f"); err != nil || string(got) != "in tx" {
			t.Fatalf("read in tx: %q %v", got, err)
		}
		for _, f := range []vnfs.FS{other, e.fs} {
			if _, err := vnfs.Stat(ctx, f, e.dir+"/d"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("uncommitted directory visible outside the Tx: %v", err)
			}
		}
		// A failing call keeps the transaction usable.
		if _, err := tx.VMkdir(ctx, []vnfs.MkdirItem{{Path: e.dir + "/d"}}); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("mkdir existing in tx: %v", err)
		}
		if _, err := tx.Txn().VMkdir(ctx, []vnfs.MkdirItem{{Path: e.dir + "/n"}}); !errors.Is(err, vnfs.ErrTxnUnsupported) {
			t.Fatalf("nested transaction: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := vnfs.ReadFile(ctx, other, e.dir+"/d/f"); err != nil || string(got) != "in tx" {
			t.Fatalf("after commit: %q %v", got, err)
		}
		if err := tx.Commit(ctx); err == nil {
			t.Fatal("second Commit succeeded")
		}

		// Abort discards.
		tx, err = vnfs.Begin(ctx, e.fs)
		if err != nil {
			t.Fatal(err)
		}
		n, err = tx.VRemove(ctx, []string{e.dir + "/d/f"})
		mustN(t, n, err, 1)
		if err := tx.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := vnfs.Stat(ctx, other, e.dir+"/d/f"); err != nil {
			t.Fatalf("aborted remove took effect: %v", err)
		}

		// Conflict: the Tx reads the file, another client rewrites it.
		tx, err = vnfs.Begin(ctx, e.fs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := vnfs.ReadFile(ctx, tx, e.dir+"/d/f"); err != nil {
			t.Fatal(err)
		}
		n, err = tx.VWrite(ctx, []vnfs.IO{{File: vnfs.P(e.dir + "/d/g"), Data: []byte("g"), Flags: vnfs.Create}})
		mustN(t, n, err, 1)
		if err := vnfs.WriteFile(ctx, other, e.dir+"/d/f", []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(ctx)
		var ce *vnfs.TxnConflictError
		if !errors.As(err, &ce) || !strings.Contains(ce.Report, "/d/f") {
			t.Fatalf("commit after a conflicting change: %v", err)
		}
		if _, err := vnfs.Stat(ctx, other, e.dir+"/d/g"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("conflicting transaction applied a change: %v", err)
		}
		if _, err := tx.VMkdir(ctx, []vnfs.MkdirItem{{Path: e.dir + "/late"}}); !errors.Is(err, client.ErrTxnExpired) {
			t.Fatalf("call after the end: %v, want ErrTxnExpired", err)
		}
	})
}
