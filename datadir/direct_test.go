package datadir

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
)

// TestDirectWritesEndToEnd: on the real disk, file writes of every size
// (large ones go to slices with O_DIRECT, asynchronously) in durable and
// NoSync transactions read back through the engine without the memory
// tier, pass fsck, and read back and pass fsck again after a reopen.
func TestDirectWritesEndToEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	open := func() *Engine {
		e, err := Open(ctx, Options{Dir: dir, CacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	type file struct {
		ino  fs.Ino
		data []byte
	}
	var files []file
	sizes := []int{1 << 20, 3 << 20, 256 << 10, 300_001, 5000, 1<<20 + 7}
	for i, n := range sizes {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		var ino fs.Ino
		err := e.FS.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: i%2 == 1}, func(tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprintf("f%d", i), fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644, Exclusive: true})
			if err != nil {
				return err
			}
			ino = a.Ino
			// Two writes: the second half first, so slices land out of
			// file order.
			h := n / 2
			if err := tx.Write(ctx, ino, uint64(h), data[h:]); err != nil {
				return err
			}
			return tx.Write(ctx, ino, 0, data[:h])
		})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{ino, data})
	}
	check := func(e *Engine, when string) {
		t.Helper()
		for i, f := range files {
			got := make([]byte, len(f.data)+10)
			err := e.FS.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				n, _, err := tx.Read(ctx, f.ino, 0, got)
				got = got[:n]
				return err
			})
			if err != nil || !bytes.Equal(got, f.data) {
				t.Fatalf("%s: file %d (%d bytes): read %d bytes, err %v, equal %v", when, i, len(f.data), len(got), err, bytes.Equal(got, f.data))
			}
		}
		rep, err := e.FS.Check(ctx)
		if err != nil || !rep.OK() {
			t.Fatalf("%s: Check: %v %v", when, err, rep.Problems)
		}
		if rep.Slices == 0 {
			t.Fatalf("%s: Check verified no slices", when)
		}
	}
	check(e, "before reopen")
	if err := e.FS.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st := e.local.Stats()
	t.Logf("%d puts, %d direct", st.Puts, st.DirectPuts)
	if st.DirectPuts == 0 {
		t.Logf("no direct puts (file system under %s refuses O_DIRECT?)", dir)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open()
	defer e.Close()
	check(e, "after reopen")
}
