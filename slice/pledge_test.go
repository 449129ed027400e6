package slice_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/txnfs/txnfs/slice"
	"github.com/txnfs/txnfs/slice/slicetest"
)

// pledgeStore is a Local with covered puts on a MemFS whose slice writes
// can be held (hold: until release is closed) or failed (fail).
type pledgeStore struct {
	*slice.Local
	hold, fail atomic.Bool
	release    chan struct{}
}

func openPledgeStore(t *testing.T) *pledgeStore {
	t.Helper()
	s := &pledgeStore{release: make(chan struct{})}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpFileWriteAt {
			return nil
		}
		if s.hold.Load() {
			<-s.release
		}
		if s.fail.Load() {
			return errInjected
		}
		return nil
	})
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: errorfs.Wrap(vfs.NewMem(), inj), Dir: "s", Files: 1,
		ReuseMin: 1, DirectMin: 4096, Covered: true, DirectVFS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s.Local = l
	return s
}

// coveredPut returns a put into reused, synced space — a covered put —
// whose write runs in the background (the store's first direct write,
// its synchronous probe, is made first). With s.hold set it is still
// running when coveredPut returns.
func (s *pledgeStore) coveredPut(t *testing.T, seed uint64) slice.Pointer {
	t.Helper()
	hold := s.hold.Swap(false)
	a := slicetest.MustPut(t, s, 0, slicetest.RandomData(seed, 1<<20))
	if err := s.Sync(ctx, []slice.Pointer{a}); err != nil {
		t.Fatal(err)
	}
	mustRecycle(t, s, nil, a.Backing, a.Offset, uint64(a.Length))
	s.hold.Store(hold)
	c := slicetest.MustPut(t, s, 0, slicetest.RandomData(seed+1, 1<<20))
	if c.Offset != a.Offset {
		t.Fatalf("put %v did not reuse %v", c, a)
	}
	if got := s.Covered([]slice.Pointer{c}); len(got) != 1 {
		t.Fatalf("put into reused space not covered: %v", got)
	}
	return c
}

// TestPledge: Pledge takes a covered put whose write is still running and
// returns the others (an append, a covered put already written) for the
// caller to wait for; SyncAllDeferred returns without waiting for the
// running write and leaves it to its Deferred if pledged, and ignores it
// if not; a pledged write that fails
// fails the store's syncs for good, an unpledged one only its own
// WaitWritten.
func TestPledge(t *testing.T) {
	s := openPledgeStore(t)
	done := s.coveredPut(t, 1) // written: its write returned before Pledge
	s.WaitWritten(ctx, []slice.Pointer{done})
	app := slicetest.MustPut(t, s, 0, slicetest.RandomData(5, 1<<20))
	s.WaitWritten(ctx, []slice.Pointer{app})
	s.hold.Store(true)
	running := s.coveredPut(t, 10)
	rest, err := s.Pledge(ctx, []slice.Pointer{app, running, done})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 2 || rest[0] != app || rest[1] != done {
		t.Fatalf("Pledge left %v, want the append and the written covered put", rest)
	}
	type res struct {
		d   *slice.Deferred
		err error
	}
	got := make(chan res, 1)
	go func() {
		d, err := s.SyncAllDeferred(ctx)
		got <- res{d, err}
	}()
	var d *slice.Deferred
	select {
	case r := <-got:
		if r.err != nil || r.d == nil || r.d.Done() {
			t.Fatalf("SyncAllDeferred with a covered write running = %v, %v; want a Deferred not done", r.d, r.err)
		}
		d = r.d
	case <-time.After(5 * time.Second):
		t.Fatal("SyncAllDeferred waited for the running covered write")
	}
	s.hold.Store(false)
	close(s.release)
	if err := d.Wait(ctx); err != nil || !d.Done() {
		t.Fatalf("Deferred.Wait = %v, done %v", err, d.Done())
	}
	if !bytes.Equal(slicetest.MustRead(t, s, running), slicetest.RandomData(11, 1<<20)) {
		t.Fatal("the pledged put reads other bytes")
	}
	if d, err := s.SyncAllDeferred(ctx); d != nil || err != nil {
		t.Fatalf("SyncAllDeferred with nothing running = %v, %v", d, err)
	}

	// An unpledged covered write that fails fails its WaitWritten only.
	s.release = make(chan struct{})
	s.hold.Store(true)
	lost := s.coveredPut(t, 20)
	// Not pledged: no commit names it yet, so a sync needs it not.
	if d, err := s.SyncAllDeferred(ctx); d != nil || err != nil {
		t.Fatalf("SyncAllDeferred with an unpledged covered write running = %v, %v; want nothing to wait for", d, err)
	}
	s.fail.Store(true)
	close(s.release)
	if err := s.WaitWritten(ctx, []slice.Pointer{lost}); !errors.Is(err, errInjected) {
		t.Fatalf("WaitWritten of a failed write = %v", err)
	}
	s.hold.Store(false)
	s.fail.Store(false)
	if err := s.SyncAll(ctx); err != nil {
		t.Fatalf("SyncAll after an unpledged write failed: %v", err)
	}

	// A pledged one fails every later sync.
	s.release = make(chan struct{})
	s.hold.Store(true)
	pledged := s.coveredPut(t, 30)
	if rest, err := s.Pledge(ctx, []slice.Pointer{pledged}); err != nil || len(rest) != 0 {
		t.Fatalf("Pledge of a running covered put = %v, %v", rest, err)
	}
	d, err = s.SyncAllDeferred(ctx)
	if err != nil || d == nil {
		t.Fatalf("SyncAllDeferred = %v, %v", d, err)
	}
	s.fail.Store(true)
	close(s.release)
	if err := d.Wait(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Deferred.Wait after a pledged write failed = %v, want the write's error", err)
	}
	s.hold.Store(false)
	s.fail.Store(false)
	if err := s.SyncAll(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("SyncAll after a pledged write failed = %v, want the write's error for good", err)
	}
}
