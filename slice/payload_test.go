package slice

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// storeOnly hides every method but Store's (no PayloadPutter).
type storeOnly struct{ Store }

// checkPayloadPuts puts payloads through s with PutPayload: with the
// right CRC the slice reads back, before and after Sync; with a CRC taken
// before the buffer changed (a stale CRC: the producer's bug) the
// pointer carries the given CRC and every read of it is ErrCorrupt, never
// the changed bytes. data makes the payload of each case (its own buffer).
func checkPayloadPuts(t *testing.T, s Store, data func(i int) []byte) {
	t.Helper()
	ctx := context.Background()
	for i := range 4 {
		b := data(i)
		want := bytes.Clone(b)
		crc := Checksum(b)
		stale := i%2 == 1
		if stale {
			b[len(b)/2] ^= 1 // changed after its CRC was taken
		}
		p, err := PutPayload(ctx, s, uint64(i), NewPayload(b, crc))
		if err != nil {
			t.Fatalf("case %d: PutPayload: %v", i, err)
		}
		if p.CRC != crc || p.Length != uint32(len(b)) {
			t.Fatalf("case %d: pointer %v, want CRC %08x length %d", i, p, crc, len(b))
		}
		scribble(b) // the caller reuses its buffer
		for _, sync := range []bool{false, true} {
			if sync {
				if err := s.Sync(ctx, []Pointer{p}); err != nil {
					t.Fatalf("case %d: Sync: %v", i, err)
				}
			}
			got := make([]byte, len(want))
			err := s.ReadAt(ctx, p, 0, got)
			switch {
			case stale && !errors.Is(err, ErrCorrupt):
				t.Fatalf("case %d (stale CRC, synced %v): ReadAt: %v, want ErrCorrupt", i, sync, err)
			case !stale && err != nil:
				t.Fatalf("case %d (synced %v): ReadAt: %v", i, sync, err)
			case !stale && !bytes.Equal(got, want):
				t.Fatalf("case %d (synced %v): read back other bytes", i, sync)
			}
		}
	}
}

// TestPutPayload: PutPayload on a buffered Local (MemFS: no O_DIRECT) and
// on a Cache over it, for payloads small enough for the cache to keep on
// put and large ones, with right and stale CRCs (checkPayloadPuts: a
// stale CRC reads ErrCorrupt, also from the cache); on a Store that is no
// PayloadPutter, PutPayload hashes the data itself.
func TestPutPayload(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1000, 100 << 10, MaxSize} {
		l, err := OpenLocal(ctx, LocalOptions{FS: vfs.NewMem(), Dir: "s", Files: 1})
		if err != nil {
			t.Fatal(err)
		}
		mk := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1), 2, 3}, n/3+1)[:n] }
		checkPayloadPuts(t, l, mk)
		c := NewCache(l, 64<<20)
		checkPayloadPuts(t, c, mk)
		if l.Stats().DirectPuts != 0 {
			t.Fatal("direct puts on MemFS")
		}

		// No PayloadPutter: the CRC given is not used.
		b := mk(9)
		p, err := PutPayload(ctx, storeOnly{l}, 0, NewPayload(b, Checksum(b)+1))
		if err != nil || p.CRC != Checksum(b) {
			t.Fatalf("PutPayload on a plain Store: %v, CRC %08x, want %08x", err, p.CRC, Checksum(b))
		}
		if _, err := PutPayload(ctx, l, 0, NewPayload(nil, 0)); !errors.Is(err, ErrEmpty) {
			t.Fatalf("empty payload: %v", err)
		}
		if _, err := PutPayload(ctx, c, 0, NewPayload(make([]byte, MaxSize+1), 0)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("payload too large: %v", err)
		}
		c.Close()
	}
}

// scribble overwrites data in place, as a caller reusing its buffer does.
func scribble(data []byte) {
	for i := range data {
		data[i] ^= 0x5a
	}
}
