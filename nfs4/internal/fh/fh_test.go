package fh

import (
	"bytes"
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
