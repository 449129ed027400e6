package fh

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"testing/quick"
)

func TestRoundTripAndForgery(t *testing.T) {
	c, err := NewCodec(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCodec(bytes.Repeat([]byte{8}, 32))
	f := func(ino, gen uint64, flip uint16) bool {
		b := c.Encode(Handle{ino, gen})
		h, err := c.Decode(b)
		if err != nil || h != (Handle{ino, gen}) || len(b) != Size {
			return false
		}
		bad := append([]byte(nil), b...)
		bad[int(flip)%Size] ^= 1 << (flip % 8)
		if _, err := c.Decode(bad); err != ErrBadHandle {
			return false
		}
		if _, err := other.Decode(b); err != ErrBadHandle {
			return false
		}
		_, err = c.Decode(b[:Size-1])
		return err == ErrBadHandle
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCodec([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}

// TestTagCache checks the MAC cache against fresh codecs with the same
// key: handles whose inode numbers share a cache slot (and one inode with
// two generations) keep encoding to the same bytes and verifying, a
// forged MAC of a cached handle is rejected, and concurrent use agrees
// (run with -race).
func TestTagCache(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	c, _ := NewCodec(key)
	fresh := func(h Handle) []byte {
		f, _ := NewCodec(key)
		return f.Encode(h)
	}
	hs := []Handle{{1, 1}, {1 + tagSlots, 1}, {1, 2}, {1 + 2*tagSlots, 7}, {1, 1}}
	for round := 0; round < 3; round++ {
		for _, h := range hs {
			b := c.Encode(h)
			if !bytes.Equal(b, fresh(h)) {
				t.Fatalf("round %d: Encode(%v) differs from an uncached codec's", round, h)
			}
			if got, err := c.Decode(b); err != nil || got != h {
				t.Fatalf("round %d: Decode(Encode(%v)) = %v, %v", round, h, got, err)
			}
			bad := append([]byte(nil), b...)
			bad[Size-1] ^= 0x80
			if _, err := c.Decode(bad); err != ErrBadHandle {
				t.Fatalf("round %d: forged MAC of cached %v accepted", round, h)
			}
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				h := Handle{Ino: uint64(i%7) * tagSlots, Gen: uint64(w + i%3)}
				if got, err := c.Decode(c.Encode(h)); err != nil || got != h {
					t.Errorf("concurrent round trip of %v: %v, %v", h, got, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
}

// BenchmarkDecode verifies one handle repeatedly (a cached MAC) and, for
// comparison, handles of inodes that miss the cache every time.
func BenchmarkDecode(b *testing.B) {
	c, _ := NewCodec(bytes.Repeat([]byte{9}, 32))
	b.Run("cached", func(b *testing.B) {
		h := c.Encode(Handle{42, 1})
		for i := 0; i < b.N; i++ {
			if _, err := c.Decode(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		hs := [][]byte{c.Encode(Handle{5, 1}), c.Encode(Handle{5 + tagSlots, 1})}
		for i := 0; i < b.N; i++ {
			if _, err := c.Decode(hs[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecode: whatever the bytes, a codec whose MAC cache is warm (it
// encoded the handle the input names, and others in the same slot) agrees
// with an uncached codec with the same key, and a handle it accepts is
// exactly the encoding of what it returns: no forged or malformed handle
// passes through the cache. Run with -fuzz=FuzzDecode.
func FuzzDecode(f *testing.F) {
	key := bytes.Repeat([]byte{5}, 32)
	c, _ := NewCodec(key)
	good := c.Encode(Handle{3, 4})
	f.Add(good)
	f.Add(good[:Size-1])
	f.Add(append(append([]byte(nil), good...), 0))
	bad := append([]byte(nil), good...)
	bad[20] ^= 1
	f.Add(bad)
	f.Add(make([]byte, Size))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 16 {
			// Warm the slot of the inode b names with its real MAC and
			// with a neighbour's.
			var h Handle
			h.Ino, h.Gen = binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint64(b[8:])
			c.Encode(h)
			c.Encode(Handle{h.Ino + tagSlots, h.Gen})
			c.Encode(h)
		}
		fresh, _ := NewCodec(key)
		got, err := c.Decode(b)
		want, werr := fresh.Decode(b)
		if (err == nil) != (werr == nil) || got != want {
			t.Fatalf("cached Decode = %v, %v; uncached = %v, %v", got, err, want, werr)
		}
		if err != nil {
			if err != ErrBadHandle {
				t.Fatalf("Decode error %v, want ErrBadHandle", err)
			}
			return
		}
		if !bytes.Equal(c.Encode(got), b) {
			t.Fatalf("accepted %x, which is not the encoding of %v", b, got)
		}
	})
}
