package runtime

import (
	"encoding/binary"
	"io"
)

// readUint reads a big-endian unsigned integer of size (4 or 8) bytes.
// From an io.ByteReader it reads byte by byte: a byte array handed to an
// io.Reader's Read escapes to the heap, one allocation per integer.
// The errors are io.ReadFull's: io.EOF if nothing was read,
// io.ErrUnexpectedEOF if part of it.
func readUint(r io.Reader, size int) (uint64, int64, error) {
	if br, ok := r.(io.ByteReader); ok {
		var v uint64
		for i := 0; i < size; i++ {
			c, err := br.ReadByte()
			if err != nil {
				if err == io.EOF && i > 0 {
					err = io.ErrUnexpectedEOF
				}
				return 0, int64(i), err
			}
			v = v<<8 | uint64(c)
		}
		return v, int64(size), nil
	}
	var b [8]byte
	n, err := io.ReadFull(r, b[:size])
	if size == 4 {
		return uint64(binary.BigEndian.Uint32(b[:])), int64(n), err
	}
	return binary.BigEndian.Uint64(b[:]), int64(n), err
}

// writeUint writes v as a big-endian unsigned integer of size (4 or 8)
// bytes; to an io.ByteWriter byte by byte (see readUint).
func writeUint(w io.Writer, v uint64, size int) (int64, error) {
	if bw, ok := w.(io.ByteWriter); ok {
		for i := size - 1; i >= 0; i-- {
			if err := bw.WriteByte(byte(v >> (8 * i))); err != nil {
				return int64(size - 1 - i), err
			}
		}
		return int64(size), nil
	}
	var b [8]byte
	if size == 4 {
		binary.BigEndian.PutUint32(b[:], uint32(v))
	} else {
		binary.BigEndian.PutUint64(b[:], v)
	}
	n, err := w.Write(b[:size])
	return int64(n), err
}

// ReadInt reads an XDR encoded 32-bit signed integer value.
func ReadInt(r io.Reader) (int32, int64, error) {
	v, n, err := readUint(r, 4)
	return int32(uint32(v)), n, err
}

// WriteInt writes an XDR encoded 32-bit signed integer value.
func WriteInt(w io.Writer, i int32) (int64, error) {
	return writeUint(w, uint64(uint32(i)), 4)
}

// ReadUnsignedInt reads an XDR encoded 32-bit unsigned integer value.
func ReadUnsignedInt(r io.Reader) (uint32, int64, error) {
	v, n, err := readUint(r, 4)
	return uint32(v), n, err
}

// WriteUnsignedInt writes an XDR encoded 32-bit unsigned integer value.
func WriteUnsignedInt(w io.Writer, i uint32) (int64, error) {
	return writeUint(w, uint64(i), 4)
}

// ReadHyper reads an XDR encoded 64-bit signed integer value.
func ReadHyper(r io.Reader) (int64, int64, error) {
	v, n, err := readUint(r, 8)
	return int64(v), n, err
}

// WriteHyper writes an XDR encoded 64-bit signed integer value.
func WriteHyper(w io.Writer, i int64) (int64, error) {
	return writeUint(w, uint64(i), 8)
}

// ReadUnsignedHyper reads an XDR encoded 64-bit unsigned integer value.
func ReadUnsignedHyper(r io.Reader) (uint64, int64, error) {
	return readUint(r, 8)
}

// WriteUnsignedHyper writes an XDR encoded 64-bit unsigned integer value.
func WriteUnsignedHyper(w io.Writer, i uint64) (int64, error) {
	return writeUint(w, i, 8)
}
