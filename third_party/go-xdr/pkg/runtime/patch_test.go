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

// plainReader hides bytes.Reader's ReadByte.
type plainReader struct{ r *bytes.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// plainWriter hides bytes.Buffer's WriteByte.
type plainWriter struct{ b *bytes.Buffer }

func (p plainWriter) Write(b []byte) (int, error) { return p.b.Write(b) }

// TestIntegersByteReader checks the integer readers and writers through
// io.ByteReader / io.ByteWriter against the plain io.Reader / io.Writer
// path (values, counts, errors of truncated input), and that they do not
// allocate.
func TestIntegersByteReader(t *testing.T) {
	var bb, pb bytes.Buffer
	WriteUnsignedInt(&bb, 0xdeadbeef)
	WriteUnsignedHyper(&bb, 0x0123456789abcdef)
	WriteInt(&bb, -5)
	WriteHyper(&bb, -7)
	WriteBool(&bb, true)
	WriteUnsignedInt(plainWriter{&pb}, 0xdeadbeef)
	WriteUnsignedHyper(plainWriter{&pb}, 0x0123456789abcdef)
	WriteInt(plainWriter{&pb}, -5)
	WriteHyper(plainWriter{&pb}, -7)
	WriteBool(plainWriter{&pb}, true)
	if !bytes.Equal(bb.Bytes(), pb.Bytes()) || bb.Len() != 4+8+4+8+4 {
		t.Fatalf("ByteWriter %x, Writer %x", bb.Bytes(), pb.Bytes())
	}
	enc := bb.Bytes()
	for cut := 0; cut <= len(enc); cut++ {
		for _, r := range []io.Reader{bytes.NewReader(enc[:cut]), plainReader{bytes.NewReader(enc[:cut])}} {
			var got []any
			var errs []error
			var ns []int64
			u, n, err := ReadUnsignedInt(r)
			got, errs, ns = append(got, u), append(errs, err), append(ns, n)
			h, n, err := ReadUnsignedHyper(r)
			got, errs, ns = append(got, h), append(errs, err), append(ns, n)
			i, n, err := ReadInt(r)
			got, errs, ns = append(got, i), append(errs, err), append(ns, n)
			hh, n, err := ReadHyper(r)
			got, errs, ns = append(got, hh), append(errs, err), append(ns, n)
			b, n, err := ReadBool(r)
			got, errs, ns = append(got, b), append(errs, err), append(ns, n)
			want := []any{uint32(0xdeadbeef), uint64(0x0123456789abcdef), int32(-5), int64(-7), true}
			off := 0
			for k, size := range []int{4, 8, 4, 8, 4} {
				switch {
				case off+size <= cut:
					if errs[k] != nil || got[k] != want[k] || ns[k] != int64(size) {
						t.Fatalf("%T cut %d value %d: %v %v %d", r, cut, k, got[k], errs[k], ns[k])
					}
				case off >= cut:
					if errs[k] != io.EOF || ns[k] != 0 {
						t.Fatalf("%T cut %d value %d: %v %d, want EOF", r, cut, k, errs[k], ns[k])
					}
				default:
					if errs[k] != io.ErrUnexpectedEOF || ns[k] != int64(cut-off) {
						t.Fatalf("%T cut %d value %d: %v %d, want ErrUnexpectedEOF", r, cut, k, errs[k], ns[k])
					}
				}
				off = min(off+size, cut)
			}
		}
	}
	r := bytes.NewReader(enc)
	if n := testing.AllocsPerRun(100, func() {
		r.Reset(enc)
		ReadUnsignedInt(r)
		ReadUnsignedHyper(r)
		ReadBool(bytes.NewReader(enc[:0]))
	}); n > 1 {
		t.Errorf("reading integers from a bytes.Reader: %v allocations", n)
	}
	w := bytes.NewBuffer(make([]byte, 0, 64))
	if n := testing.AllocsPerRun(100, func() {
		w.Reset()
		WriteUnsignedInt(w, 1)
		WriteHyper(w, 2)
	}); n != 0 {
		t.Errorf("writing integers to a bytes.Buffer: %v allocations", n)
	}
}
