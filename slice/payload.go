package slice

import (
	"context"
	"fmt"
)

// Payload is data to put together with its CRC32C (Castagnoli), computed
// earlier by whoever produced the bytes: the NFS server hashes a WRITE's
// payload while it arrives from the socket, a block at a time right after
// each read(2), while the bytes are still in the CPU cache and the rest of
// the record is still in flight (nfs4/internal/rpc Call.PayloadCRC). A
// put of a Payload then does not read the data a second time to hash it.
//
// Trust: the store records CRC as the slice's checksum without checking
// it. A CRC that does not match Data (a bug in the producer, or the buffer
// changed after it was hashed) is never silent: the stored bytes fail
// verification on every read (ErrCorrupt), as a torn write does, and the
// memory tier (Cache) caches a Payload's bytes only after checking them.
// Build one with NewPayload only where the CRC is known to cover exactly
// these bytes.
type Payload struct {
	data  []byte
	crc   uint32
	known bool // crc is set (NewPayload); Local.Put's payloads hash themselves
}

// NewPayload returns a Payload of data whose CRC32C is crc.
func NewPayload(data []byte, crc uint32) Payload { return Payload{data: data, crc: crc, known: true} }

// PayloadOf returns a Payload of data whose CRC32C the store computes. A
// put of it behaves as one of a Payload with a known CRC (a lent buffer
// is written from in the background, WithLoan), and a Local hashes the
// data of such a background write only once the write has started, off
// the critical path of a caller that waits for the write anyway
// (docs/nfs-server.md "Session 13").
func PayloadOf(data []byte) Payload { return Payload{data: data} }

// Data returns the payload's bytes.
func (p Payload) Data() []byte { return p.data }

// CRC returns the CRC32C the payload was built with.
func (p Payload) CRC() uint32 { return p.crc }

// PayloadPutter is a Store that can put a Payload without hashing it
// again (Local, and Cache over a PayloadPutter).
type PayloadPutter interface {
	// PutPayload is Put of p.Data() with p.CRC() as its checksum.
	PutPayload(ctx context.Context, hint uint64, p Payload) (Pointer, error)
}

// PutPayload puts p into s: with s.PutPayload if s is a PayloadPutter,
// else with Put (which hashes the data itself; p's CRC is then unused).
func PutPayload(ctx context.Context, s Store, hint uint64, p Payload) (Pointer, error) {
	if pp, ok := s.(PayloadPutter); ok {
		return pp.PutPayload(ctx, hint, p)
	}
	return s.Put(ctx, hint, p.data)
}

// checkPut checks the arguments common to Put and PutPayload.
func checkPut(data []byte) error {
	if len(data) == 0 {
		return ErrEmpty
	}
	if len(data) > MaxSize {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(data))
	}
	return nil
}
