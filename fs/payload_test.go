package fs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/txnfs/txnfs/fs"
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
	var ino fs.Ino
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular})
		ino = a.Ino
		return err
	})
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
