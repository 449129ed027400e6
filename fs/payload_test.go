package fs_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// TestWritePayload: Txn.WritePayload stores a payload with the CRC the
// caller gives when it goes to the slice store as one slice: with the
// right CRC the data reads back (after the commit, through a fresh
// transaction); with a stale one (the buffer changed after it was hashed)
// reading the range fails with ErrCorrupt instead of returning the changed
// bytes. A payload that is split (across a region boundary) or stored
// inline does not use the CRC: it reads back even when the CRC is wrong.
func TestWritePayload(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{kind: storePebble, inlineMax: 4096})
	ino := newFile(t, f.FS, "f", nil)
	cases := []struct {
		name    string
		off     uint64
		n       int
		stale   bool
		corrupt bool // reading must fail
	}{
		{"one slice", 0, slice.MaxSize, false, false},
		{"one slice, stale CRC", 4 << 20, slice.MaxSize, true, true},
		{"split at a region boundary, stale CRC", meta.RegionSize - 100<<10, 300 << 10, true, false},
		{"inline, stale CRC", 8 << 20, 1000, true, false},
		{"small slice", 12 << 20, 64 << 10, false, false},
	}
	for i, c := range cases {
		data := pattern(byte(i+1), c.n)
		want := bytes.Clone(data)
		crc := slice.Checksum(data)
		if c.stale {
			data[c.n/2] ^= 0xff // changed after its CRC was taken
		}
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
			return tx.WritePayload(ctx, ino, c.off, slice.NewPayload(data, crc))
		})
		got := make([]byte, c.n)
		err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			_, _, err := tx.Read(ctx, ino, c.off, got)
			return err
		})
		switch {
		case c.corrupt && !errors.Is(err, fs.ErrCorrupt):
			t.Errorf("%s: read: %v, want ErrCorrupt", c.name, err)
		case !c.corrupt && err != nil:
			t.Errorf("%s: read: %v", c.name, err)
		case !c.corrupt && !c.stale && !bytes.Equal(got, want):
			t.Errorf("%s: read back other bytes", c.name)
		case !c.corrupt && c.stale && !bytes.Equal(got, data):
			t.Errorf("%s: read back other bytes than written", c.name)
		}
	}
}

// waitRecorder is a slice store recording the pointers WaitWritten was
// asked to wait for.
type waitRecorder struct {
	slice.Store
	mu     sync.Mutex
	waited []slice.Pointer
}

func (w *waitRecorder) PutPayload(ctx context.Context, hint uint64, p slice.Payload) (slice.Pointer, error) {
	return slice.PutPayload(ctx, w.Store, hint, p)
}

func (w *waitRecorder) WaitWritten(ctx context.Context, ptrs []slice.Pointer) error {
	w.mu.Lock()
	w.waited = append(w.waited, ptrs...)
	w.mu.Unlock()
	return slice.WaitWritten(ctx, w.Store, ptrs)
}

func (w *waitRecorder) take() []slice.Pointer {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.waited
	w.waited = nil
	return p
}

// TestWritePayloadWaits: a transaction that wrote a payload (which the
// slice store may still be writing from the caller's buffer) waits for
// its slice writes when it ends, by Abort as well as by Commit (and by a
// Do whose function fails), so the caller may reuse the buffer once they
// return.
func TestWritePayloadWaits(t *testing.T) {
	ctx := context.Background()
	sl, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.NewMem(), Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	rec := &waitRecorder{Store: sl}
	f, err := fs.Open(ctx, fs.Config{KV: memkv.New(), Slices: rec, Clock: fixedClock, InlineMax: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := newFile(t, f, "f", nil)
	data := pattern(1, 256<<10)
	pl := slice.NewPayload(data, slice.Checksum(data))
	for _, end := range []string{"commit", "abort", "do-fails"} {
		rec.take()
		var err error
		if end == "do-fails" {
			err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				if err := tx.WritePayload(ctx, ino, 0, pl); err != nil {
					return err
				}
				return errTestAbort
			})
		} else {
			var tx *fs.Txn
			tx, err = f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.WritePayload(ctx, ino, 0, pl); err != nil {
				t.Fatal(err)
			}
			if end == "commit" {
				err = tx.Commit(ctx)
			} else {
				tx.Abort()
			}
		}
		if (err != nil) != (end == "do-fails") {
			t.Fatalf("%s: %v", end, err)
		}
		if got := rec.take(); len(got) != 1 || got[0].Length != uint32(len(data)) {
			t.Fatalf("%s: WaitWritten asked for %v, want the payload's slice", end, got)
		}
	}
}
