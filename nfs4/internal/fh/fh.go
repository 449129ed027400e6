// Package fh encodes and verifies txnfs NFSv4 file handles.
//
// # Format
//
// A handle is exactly Size (32) bytes, opaque to clients:
//
//	0        8        16                       32
//	+--------+--------+------------------------+
//	|  ino   |  gen   | HMAC-SHA256(key, ino|gen)[:16] |
//	+--------+--------+------------------------+
//
// ino and gen are big-endian. The MAC key is a persistent per-data-directory
// secret, so handles survive restarts but cannot be forged or modified: a
// handle of the wrong size or with a bad MAC is NFS4ERR_BADHANDLE. Inode
// numbers are never reused and gen is random per inode, so a valid handle
// whose inode no longer exists (or has another gen) is NFS4ERR_STALE.
package fh

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// Size is the length of every handle in bytes.
const Size = 32

// ErrBadHandle reports a malformed or forged handle.
var ErrBadHandle = errors.New("fh: bad file handle")

// Handle is a decoded file handle.
type Handle struct {
	Ino uint64
	Gen uint64
}

// Codec encodes and verifies handles with one key. It is safe for
// concurrent use.
type Codec struct {
	key  []byte
	macs sync.Pool // hash.Hash: HMAC-SHA256 keyed with key, reset
}

// NewCodec returns a codec for key (at least 16 bytes).
func NewCodec(key []byte) (*Codec, error) {
	if len(key) < 16 {
		return nil, errors.New("fh: key shorter than 16 bytes")
	}
	return &Codec{key: append([]byte(nil), key...)}, nil
}

func (c *Codec) mac(dst, body []byte) {
	m, ok := c.macs.Get().(hash.Hash)
	if !ok {
		m = hmac.New(sha256.New, c.key)
	}
	m.Write(body)
	var sum [sha256.Size]byte
	copy(dst, m.Sum(sum[:0])[:Size-16])
	m.Reset()
	c.macs.Put(m)
}

// Encode returns the handle bytes for h (a new slice owned by the caller).
func (c *Codec) Encode(h Handle) []byte {
	b := make([]byte, Size)
	binary.BigEndian.PutUint64(b[0:], h.Ino)
	binary.BigEndian.PutUint64(b[8:], h.Gen)
	c.mac(b[16:], b[:16])
	return b
}

// Decode verifies b and returns the handle, or ErrBadHandle.
func (c *Codec) Decode(b []byte) (Handle, error) {
	if len(b) != Size {
		return Handle{}, ErrBadHandle
	}
	var want [Size - 16]byte
	c.mac(want[:], b[:16])
	if !hmac.Equal(want[:], b[16:]) {
		return Handle{}, ErrBadHandle
	}
	return Handle{Ino: binary.BigEndian.Uint64(b[0:]), Gen: binary.BigEndian.Uint64(b[8:])}, nil
}
