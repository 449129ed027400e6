package runtime

import (
	"bytes"
	"errors"
	"io"
	goruntime "runtime"
	"testing"
	"unsafe"
)

// sliceReader is a bytes.Reader that is a SliceReader.
type sliceReader struct {
	*bytes.Reader
	b []byte
}

func (r sliceReader) Slice(n int) []byte {
	off := len(r.b) - r.Len()
	n = min(n, r.Len())
	r.Seek(int64(n), io.SeekCurrent)
	return r.b[off : off+n]
}

func encodeOpaque(v []byte) []byte {
	var b bytes.Buffer
	WriteVariableLengthOpaque(&b, ^uint32(0), v)
	return b.Bytes()
}

func TestReadVariableLengthOpaqueExact(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 5, 4096, maxChunkSizeBytes - 1, maxChunkSizeBytes, maxChunkSizeBytes + 5, 3*maxChunkSizeBytes + 2} {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(i * 7)
		}
		enc := append(encodeOpaque(v), 9, 9, 9, 9) // and what follows
		r := bytes.NewReader(enc)
		got, nTotal, err := ReadVariableLengthOpaque(r, ^uint32(0))
		if err != nil || !bytes.Equal(got, v) || nTotal != int64(len(enc)-4) || r.Len() != 4 {
			t.Fatalf("length %d: %d bytes, n %d, %v; left %d", n, len(got), nTotal, err, r.Len())
		}
		if n == 0 && got != nil {
			t.Fatalf("length 0: non-nil")
		}
		if n > 0 && n <= maxChunkSizeBytes && cap(got) != n {
			t.Fatalf("length %d: capacity %d, not exact", n, cap(got))
		}
		// From a SliceReader: the same bytes, aliased, capacity clipped.
		sr := sliceReader{bytes.NewReader(enc), enc}
		got, nTotal, err = ReadVariableLengthOpaque(sr, ^uint32(0))
		if err != nil || !bytes.Equal(got, v) || nTotal != int64(len(enc)-4) || sr.Len() != 4 {
			t.Fatalf("slice reader, length %d: %d bytes, n %d, %v", n, len(got), nTotal, err)
		}
		if n > 0 && (unsafe.SliceData(got) != &enc[4] || cap(got) != n) {
			t.Fatalf("slice reader, length %d: not the reader's bytes", n)
		}
		// Strings are copies, also from a SliceReader.
		s, _, err := ReadASCIIString(sliceReader{bytes.NewReader(encodeOpaque([]byte("abc"))), encodeOpaque([]byte("abc"))}, 10)
		if err != nil || s != "abc" {
			t.Fatalf("string %q, %v", s, err)
		}
	}
}

// TestReadVariableLengthOpaqueLyingLength: a length the input does not
// back fails with ErrUnexpectedEOF after allocating at most one chunk.
func TestReadVariableLengthOpaqueLyingLength(t *testing.T) {
	enc := []byte{0xff, 0xff, 0xff, 0xf0, 1, 2, 3}
	for _, r := range []io.Reader{bytes.NewReader(enc), sliceReader{bytes.NewReader(enc), enc}} {
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		_, _, err := ReadVariableLengthOpaque(r, ^uint32(0))
		goruntime.ReadMemStats(&after)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%T: error %v", r, err)
		}
		if b := after.TotalAlloc - before.TotalAlloc; b > maxChunkSizeBytes+64<<10 {
			t.Fatalf("%T: a forged length allocated %d bytes", r, b)
		}
	}
	// Truncated padding and non-zero padding are errors, as before.
	if _, _, err := ReadVariableLengthOpaque(bytes.NewReader([]byte{0, 0, 0, 1, 7, 0}), 10); err == nil {
		t.Fatal("truncated padding accepted")
	}
	if _, _, err := ReadVariableLengthOpaque(bytes.NewReader([]byte{0, 0, 0, 1, 7, 0, 0, 1}), 10); err == nil {
		t.Fatal("non-zero padding accepted")
	}
	if _, _, err := ReadUTF8String(bytes.NewReader([]byte{0, 0, 0, 2, 0xc3, 0x28, 0, 0}), 10); err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	if _, _, err := ReadVariableLengthOpaque(bytes.NewReader([]byte{0, 0, 0, 11}), 10); err == nil {
		t.Fatal("over-long opaque accepted")
	}
}
