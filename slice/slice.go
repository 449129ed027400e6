package slice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors reported by every Store. Classify with errors.Is.
var (
	// ErrCorrupt means stored bytes do not match the pointer's checksum,
	// or the pointer names bytes that are not there (truncated backing
	// file). Corrupt data is never returned as if it were good.
	ErrCorrupt = errors.New("slice: corrupt slice")
	// ErrBadPointer means a pointer is malformed or names a backing file
	// this store does not have.
	ErrBadPointer = errors.New("slice: bad pointer")
	// ErrTooLarge is returned by Put for data longer than MaxSize.
	ErrTooLarge = errors.New("slice: slice too large")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("slice: store closed")
)

// MaxSize is the largest slice a Store accepts. Writers split larger data.
const MaxSize = 1 << 20

// Pointer names one immutable slice: Length bytes at Offset in backing
// file Backing, whose CRC32C (Castagnoli) is CRC. A pointer is
// self-contained: nothing else is needed to find and verify the bytes.
type Pointer struct {
	Backing uint32
	Offset  uint64
	Length  uint32
	CRC     uint32
}

// PointerSize is the length of an encoded Pointer.
const PointerSize = 20

// String formats p for logs and fsck reports.
func (p Pointer) String() string {
	return fmt.Sprintf("b%d@%d+%d/crc=%08x", p.Backing, p.Offset, p.Length, p.CRC)
}

// End returns the offset just past the slice in its backing file.
func (p Pointer) End() uint64 { return p.Offset + uint64(p.Length) }

// AppendBinary appends the fixed-size encoding of p to b:
//
//	backing u32 | offset u64 | length u32 | crc u32   (big endian)
func (p Pointer) AppendBinary(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, p.Backing)
	b = binary.BigEndian.AppendUint64(b, p.Offset)
	b = binary.BigEndian.AppendUint32(b, p.Length)
	return binary.BigEndian.AppendUint32(b, p.CRC)
}

// DecodePointer decodes an encoding made by AppendBinary.
func DecodePointer(b []byte) (Pointer, error) {
	if len(b) != PointerSize {
		return Pointer{}, fmt.Errorf("%w: encoded length %d, want %d", ErrBadPointer, len(b), PointerSize)
	}
	p := Pointer{
		Backing: binary.BigEndian.Uint32(b[0:]),
		Offset:  binary.BigEndian.Uint64(b[4:]),
		Length:  binary.BigEndian.Uint32(b[12:]),
		CRC:     binary.BigEndian.Uint32(b[16:]),
	}
	if p.Length == 0 || p.Length > MaxSize {
		return Pointer{}, fmt.Errorf("%w: length %d", ErrBadPointer, p.Length)
	}
	return p, nil
}

// WrittenWaiter is a Store whose Put may return before the data is
// written (slice.Local's asynchronous direct writes).
type WrittenWaiter interface {
	// WaitWritten waits until the slices named by ptrs are written
	// (not necessarily durable) and fails if a write failed.
	WaitWritten(ctx context.Context, ptrs []Pointer) error
}

// WaitWritten waits for the writes of ptrs if s is a WrittenWaiter; other
// stores have written a slice when Put returns.
func WaitWritten(ctx context.Context, s Store, ptrs []Pointer) error {
	if w, ok := s.(WrittenWaiter); ok {
		return w.WaitWritten(ctx, ptrs)
	}
	return nil
}

// A Pledger lets a commit name slices whose writes are still running
// (Local.Pledge): for callers whose log write is ordered after the slice
// data and waits for those writes (datadir).
type Pledger interface {
	// Pledge returns the pointers among ptrs it did not pledge, which the
	// caller waits for or syncs as usual.
	Pledge(ctx context.Context, ptrs []Pointer) ([]Pointer, error)
}

// Pledge pledges what it can of ptrs if s is a Pledger and returns the
// rest (all of ptrs for other stores).
func Pledge(ctx context.Context, s Store, ptrs []Pointer) ([]Pointer, error) {
	if p, ok := s.(Pledger); ok {
		return p.Pledge(ctx, ptrs)
	}
	return ptrs, nil
}

// CoveredReporter is implemented by stores that may leave some slices to
// a device flush the caller issues (Local with LocalOptions.Covered, and
// Cache in front of one).
type CoveredReporter interface {
	// Covered returns the pointers among ptrs that Sync and SyncAll may
	// not fdatasync for (see Local.Covered).
	Covered(ptrs []Pointer) []Pointer
}

// Covered returns s's covered pointers among ptrs (none if s is not a
// CoveredReporter).
func Covered(s Store, ptrs []Pointer) []Pointer {
	if c, ok := s.(CoveredReporter); ok {
		return c.Covered(ptrs)
	}
	return nil
}

// Store keeps immutable slices. All methods are safe for concurrent use.
type Store interface {
	// Put stores data (1..MaxSize bytes) as a new slice and returns its
	// pointer. The bytes are not necessarily durable until Sync returns.
	// Hint groups related slices: puts with the same hint go to the same
	// backing file so consecutive writes of one file region end up
	// adjacent on disk (WTF §2.7). The store does not retain data.
	Put(ctx context.Context, hint uint64, data []byte) (Pointer, error)
	// Sync makes the slices named by ptrs durable. Concurrent Syncs share
	// fsyncs (group commit).
	Sync(ctx context.Context, ptrs []Pointer) error
	// ReadAt fills buf with the slice's bytes starting at off within the
	// slice. off+len(buf) must not exceed p.Length. The whole slice's
	// checksum is verified before any byte is returned (verified slices may
	// be cached); a mismatch is ErrCorrupt.
	ReadAt(ctx context.Context, p Pointer, off uint32, buf []byte) error
	// Backings lists the backing files with their current sizes, for
	// garbage collection and fsck.
	Backings(ctx context.Context) ([]Backing, error)
	// Free releases the storage of [off, off+length) in backing file id.
	// The caller guarantees no live pointer refers to that range; freed
	// ranges read back as zeros (and so fail verification).
	Free(ctx context.Context, id uint32, off, length uint64) error
	// Close releases resources. Pending un-synced data may be lost.
	Close() error
}

// Backing describes one backing file.
type Backing struct {
	ID   uint32
	Size uint64 // bytes appended so far (the next slice's offset)
	// Allocated is the space the file occupies on disk, which is smaller
	// than Size once ranges have been freed.
	Allocated uint64
}
