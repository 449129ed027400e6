package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/slice"
)

// hookStore is a slice store whose Recycle runs a hook first (once), to
// act at the moment the collector frees. It forwards the optional
// interfaces the engine uses.
type hookStore struct {
	slice.Store
	beforeRecycle func()
}

func (h *hookStore) WaitWritten(ctx context.Context, ptrs []slice.Pointer) error {
	return slice.WaitWritten(ctx, h.Store, ptrs)
}

func (h *hookStore) WatchReuse() *slice.ReuseWatch { return slice.WatchReuse(h.Store) }

func (h *hookStore) Recycle(ctx context.Context, w *slice.ReuseWatch, id uint32, off, length uint64) ([]slice.Range, error) {
	if fn := h.beforeRecycle; fn != nil {
		h.beforeRecycle = nil
		fn()
	}
	return slice.Recycle(ctx, h.Store, w, id, off, length)
}

// TestGCReuseKeepsRunningWrites: a transaction that begins after a
// collection's scan (so the collector does not wait for it) and writes a
// slice into space the collector recycled earlier, while the collector is
// about to recycle that same space again (it is still unreferenced in the
// scan), keeps its data: the range was handed out after the collection's
// reuse watch began, so the collector leaves it alone. Without that
// exclusion the range goes back to the pool, the next large put takes it,
// and the first transaction's file reads corrupt.
func TestGCReuseKeepsRunningWrites(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	local, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "s", Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	hs := &hookStore{Store: local}
	f, err := fs.Open(ctx, fs.Config{KV: memkv.New(), Slices: hs, Clock: fixedClock, GCWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 1 << 20
	create := func(name string, data []byte) fs.Ino {
		var ino fs.Ino
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular})
			ino = a.Ino
			if err != nil {
				return err
			}
			return tx.Write(ctx, ino, 0, data)
		})
		return ino
	}
	gc := func() fs.GCReport {
		t.Helper()
		rep, err := f.CollectGarbage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	a := create("a", pattern(1, size))
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return overwrite(ctx, tx, a, pattern(2, size)) })
	gc()
	if rep := gc(); rep.FreedBytes < size || local.Stats().PoolBytes < size {
		t.Fatalf("the overwritten slice was not recycled: %+v, pool %d bytes", rep, local.Stats().PoolBytes)
	}
	gc() // the pooled range is a candidate again

	bData := pattern(3, size)
	var b fs.Ino
	var writer *fs.Txn
	hs.beforeRecycle = func() {
		// The collection has scanned and waited; this transaction
		// begins after its epoch began and takes the pooled range.
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, "b", fs.CreateRequest{Type: fs.TypeRegular})
			b = a.Ino
			return err
		})
		var err error
		if writer, err = f.Begin(ctx, fs.RootCred, fs.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
		reuses := local.Stats().ReusePuts
		if err := writer.Write(ctx, b, 0, bData); err != nil {
			t.Fatal(err)
		}
		if local.Stats().ReusePuts != reuses+1 {
			t.Fatal("the write did not reuse the pooled range")
		}
	}
	gc()
	if writer == nil {
		t.Fatal("the collection recycled nothing")
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// More large writes: they would take the range if it had gone back
	// to the pool.
	for i := range 3 {
		create(fmt.Sprintf("c%d", i), pattern(byte(10+i), size))
	}
	for range 3 {
		gc()
	}
	for i := range 3 {
		create(fmt.Sprintf("d%d", i), pattern(byte(20+i), size))
	}
	err = f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		got, err := readAll(ctx, tx, b, size)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, bData) {
			return fmt.Errorf("contents differ")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("BUG: data written into reused space during a collection: %v", err)
	}
}

// TestRunCollectorPacedByGarbage: commits count the slice bytes they make
// unreachable (FS.Garbage), and RunCollector collects once enough
// accumulated, long before its interval: a workload overwriting one file
// soon writes into recycled space, and the backing file stops growing.
func TestRunCollectorPacedByGarbage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := vfs.NewMem()
	local, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "s", Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	f, err := fs.Open(ctx, fs.Config{KV: memkv.New(), Slices: local, Clock: fixedClock, GCWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 1 << 20
	ino := newFile(t, f, "f", pattern(0, size))
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return overwrite(ctx, tx, ino, pattern(1, size)) })
	if g := f.Garbage(); g < size {
		t.Fatalf("Garbage() = %d after overwriting a %d-byte file", g, size)
	}
	var runs atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.RunCollector(ctx, fs.GCSchedule{Interval: time.Hour, GarbageBytes: 4 * size, DutyCycle: 2,
			OnReport: func(_ fs.GCReport, err error) {
				if err != nil {
					t.Errorf("collection: %v", err)
				}
				runs.Add(1)
			}})
	}()
	var last []byte
	for i := 2; i < 400 && local.Stats().ReusePuts < 20; i++ {
		last = pattern(byte(i), size)
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return overwrite(ctx, tx, ino, last) })
		time.Sleep(time.Millisecond) // let the collector run on a loaded machine
	}
	cancel()
	<-done
	st := local.Stats()
	b, err := local.Backings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d collections, stats %+v, backing size %d", runs.Load(), st, b[0].Size)
	if st.ReusePuts < 20 {
		t.Fatalf("only %d puts reused recycled space", st.ReusePuts)
	}
	if b[0].Size > st.PutBytes/2 {
		t.Errorf("backing file grew to %d bytes for %d bytes put: recycled space not reused", b[0].Size, st.PutBytes)
	}
	err = f.View(context.Background(), fs.RootCred, func(tx *fs.Txn) error {
		got, err := readAll(context.Background(), tx, ino, size)
		if err == nil && !bytes.Equal(got, last) {
			err = fmt.Errorf("contents differ")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRunCollectorDutyCycle: garbage-triggered collections start no sooner
// than DutyCycle times the last one's duration after it ended. With a
// huge duty cycle only the first runs while garbage keeps piling up; with
// a duty cycle of 1 the collector keeps up.
func TestRunCollectorDutyCycle(t *testing.T) {
	for _, tc := range []struct {
		duty            int
		minRuns, maxRun int64
	}{{duty: 1 << 30, minRuns: 1, maxRun: 1}, {duty: 1, minRuns: 3, maxRun: 1 << 30}} {
		t.Run(fmt.Sprint("duty=", tc.duty), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			local, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.NewMem(), Dir: "s", Files: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()
			f, err := fs.Open(ctx, fs.Config{KV: memkv.New(), Slices: local, Clock: fixedClock, GCWait: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			const size = 256 << 10
			ino := newFile(t, f, "f", pattern(0, size))
			var runs atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				f.RunCollector(ctx, fs.GCSchedule{Interval: time.Hour, GarbageBytes: size, DutyCycle: tc.duty,
					OnReport: func(fs.GCReport, error) { runs.Add(1) }})
			}()
			// Every overwrite passes the garbage threshold on its own.
			for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
				do(t, f, func(ctx context.Context, tx *fs.Txn) error { return overwrite(ctx, tx, ino, pattern(1, size)) })
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-done
			if n := runs.Load(); n < tc.minRuns || n > tc.maxRun {
				t.Fatalf("%d collections in 0.5 s of garbage with duty cycle %d, want %d..%d", n, tc.duty, tc.minRuns, tc.maxRun)
			}
		})
	}
}
