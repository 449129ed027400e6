package runtime

import (
	"fmt"
	"io"
	"slices"
)

func readPadding(r io.Reader, nTotal int64) (int64, error) {
	paddingToSkip := nTotal % 4
	if paddingToSkip == 0 {
		return nTotal, nil
	}

	// Read as an integer of 4 bytes whose first ones are data: from an
	// io.ByteReader without a heap-allocated array (see readUint).
	var padding [4]byte
	if br, ok := r.(io.ByteReader); ok {
		for i := paddingToSkip; i < 4; i++ {
			c, err := br.ReadByte()
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nTotal, err
			}
			nTotal++
			padding[i] = c
		}
	} else {
		nPadding, err := io.ReadFull(r, padding[paddingToSkip:])
		nTotal += int64(nPadding)
		if err != nil {
			if err == io.EOF {
				return nTotal, io.ErrUnexpectedEOF
			}
			return nTotal, err
		}
	}
	if padding != [4]byte{} {
		return nTotal, fmt.Errorf("padding contains non-zero values %v", padding[paddingToSkip:])
	}
	return nTotal, nil
}

var zeroPadding [4]byte

func writePadding(w io.Writer, n int64) (int64, error) {
	paddingToSkip := n % 4
	if paddingToSkip == 0 {
		return n, nil
	}
	nPadding, err := w.Write(zeroPadding[paddingToSkip:])
	return n + int64(nPadding), err
}

// ReadFixedLengthOpaque reads an XDR encoded fixed length opaque value.
func ReadFixedLengthOpaque(r io.Reader, b []byte) (int64, error) {
	nData, err := io.ReadFull(r, b)
	if err != nil {
		return int64(nData), err
	}
	return readPadding(r, int64(nData))
}

// WriteFixedLengthOpaque writes an XDR encoded fixed length opaque value.
func WriteFixedLengthOpaque(w io.Writer, b []byte) (int64, error) {
	nData, err := w.Write(b)
	if err != nil {
		return int64(nData), err
	}
	return writePadding(w, int64(nData))
}

// SliceReader is an io.Reader whose bytes stay in memory, unchanged, for
// as long as the values decoded from it are used (e.g. a request already
// read into a buffer). ReadVariableLengthOpaque returns its opaques as
// sub-slices of those bytes instead of copies; the caller owns their
// lifetime. Strings are still copied (once).
type SliceReader interface {
	io.Reader
	// Slice returns the next n bytes, or all that remain if fewer, and
	// advances past them.
	Slice(n int) []byte
}

// maxChunkSizeBytes bounds what readVariableLengthOpaque allocates ahead
// of the bytes actually read: a length that the input does not back
// (e.g. a forged 4 GiB one) costs at most this much memory before the
// read fails.
const maxChunkSizeBytes = 1 << 20

// readVariableLengthOpaque reads the length, the bytes and the padding of
// a variable length opaque. The bytes are a sub-slice of r's if r is a
// SliceReader and alias is set, and otherwise a new slice of exactly the
// announced length, allocated once if it is at most maxChunkSizeBytes.
// A zero length gives nil.
func readVariableLengthOpaque(r io.Reader, maximumSizeBytes uint32, alias bool) ([]byte, int64, error) {
	length, nTotal, err := ReadUnsignedInt(r)
	if err != nil || length == 0 {
		return nil, nTotal, err
	}
	if length > maximumSizeBytes {
		return nil, nTotal, fmt.Errorf("size of %d bytes exceeds field's maximum of %d bytes", length, maximumSizeBytes)
	}
	var b []byte
	if sr, ok := r.(SliceReader); ok && alias {
		b = sr.Slice(int(length))
		b = b[:len(b):len(b)]
		nTotal += int64(len(b))
		if len(b) < int(length) {
			return nil, nTotal, io.ErrUnexpectedEOF
		}
	} else {
		b = make([]byte, 0, min(length, maxChunkSizeBytes))
		for uint32(len(b)) < length {
			n := min(length-uint32(len(b)), maxChunkSizeBytes)
			b = slices.Grow(b, int(n))
			m, err := io.ReadFull(r, b[len(b):len(b)+int(n)])
			b = b[:len(b)+m]
			nTotal += int64(m)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, nTotal, err
			}
		}
	}
	nTotal, err = readPadding(r, nTotal)
	if err != nil {
		return nil, nTotal, err
	}
	return b, nTotal, nil
}

// ReadVariableLengthOpaque reads an XDR encoded variable length opaque value.
// From a SliceReader the value aliases the reader's bytes.
func ReadVariableLengthOpaque(r io.Reader, maximumSizeBytes uint32) ([]byte, int64, error) {
	return readVariableLengthOpaque(r, maximumSizeBytes, true)
}

// WriteVariableLengthOpaque writes an XDR encoded variable length opaque value.
func WriteVariableLengthOpaque(w io.Writer, maximumSizeBytes uint32, b []byte) (int64, error) {
	if uint64(len(b)) > uint64(maximumSizeBytes) {
		return 0, fmt.Errorf("size of %d bytes exceeds field's maximum of %d bytes", len(b), maximumSizeBytes)
	}

	nTotal, err := WriteUnsignedInt(w, uint32(len(b)))
	if err != nil {
		return nTotal, err
	}

	nString, err := w.Write(b)
	nTotal += int64(nString)
	if err != nil {
		return nTotal, err
	}
	return writePadding(w, nTotal)
}
