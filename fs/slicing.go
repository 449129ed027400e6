package fs

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// Slices is a range of file content captured by Yank: pointers to
// immutable slices (plus small inline pieces and holes), never the data
// itself. It carries a MAC keyed by a secret of this file system, so Paste
// rejects slices that were forged or came from another file system.
type Slices struct {
	_      struct{} `cbor:",toarray"`
	Length uint64
	// Pieces are at offsets relative to the start of the range.
	Pieces []slicesPiece
	MAC    []byte
	// Src and SrcOff say where the range was yanked from: Paste checks
	// that the source still references the slices, so a stale Slices
	// value can never bring back storage the collector may have freed.
	Src    Ino
	SrcOff uint64
}

type slicesPiece struct {
	_   struct{} `cbor:",toarray"`
	Off uint64
	Ext meta.Extent
}

// slicesWire is Slices without its methods, for encoding (cbor would
// otherwise call MarshalBinary recursively).
type slicesWire Slices

// Len returns the number of bytes the slices cover.
func (s Slices) Len() uint64 { return s.Length }

// MarshalBinary encodes s for transport (e.g. to another process).
func (s Slices) MarshalBinary() ([]byte, error) { return meta.Marshal((*slicesWire)(&s)) }

// UnmarshalBinary decodes an encoding made by MarshalBinary. The MAC is
// checked by Paste, not here.
func (s *Slices) UnmarshalBinary(b []byte) error {
	if err := meta.Unmarshal(b, (*slicesWire)(s)); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSlice, err)
	}
	return nil
}

func (f *FS) sliceMAC(ctx context.Context, s *Slices) ([]byte, error) {
	key, err := f.Secret(ctx, "slices")
	if err != nil {
		return nil, err
	}
	body := *s
	body.MAC = nil
	b, err := meta.Marshal((*slicesWire)(&body))
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)[:16], nil
}

// Yank returns the slices holding bytes [off, off+n) of the file (clipped
// at end of file), without reading any data.
func (t *Txn) Yank(ctx context.Context, ino Ino, off, n uint64) (Slices, error) {
	res, err := t.do(ctx, "yank", func(ctx context.Context) (any, error) {
		return t.yank(ctx, ino, off, n)
	})
	if err != nil {
		return Slices{}, err
	}
	s := res.(Slices)
	mac, err := t.fs.sliceMAC(ctx, &s)
	if err != nil {
		return Slices{}, err
	}
	s.MAC = mac
	return s, nil
}

func (t *Txn) yank(ctx context.Context, ino Ino, off, n uint64) (Slices, error) {
	f, err := t.loadFile(ctx, ino)
	if err != nil {
		return Slices{}, err
	}
	if off >= f.Size {
		return Slices{}, nil
	}
	n = min(n, f.Size-off)
	ps, err := t.pieces(ctx, ino, off, n)
	if err != nil {
		return Slices{}, err
	}
	s := Slices{Length: n, Src: ino, SrcOff: off}
	for _, p := range ps {
		s.Pieces = append(s.Pieces, slicesPiece{Off: p.Off - off, Ext: p.Ext})
	}
	return s, nil
}

// Paste overlays slices at offset off of the file (holes in s become holes
// in the file), extending it to off+s.Len(). No data is read or written.
func (t *Txn) Paste(ctx context.Context, ino Ino, off uint64, s Slices) error {
	mac, err := t.fs.sliceMAC(ctx, &s)
	if err != nil {
		return err
	}
	if !hmac.Equal(mac, s.MAC) {
		return fmt.Errorf("%w: MAC mismatch", ErrBadSlice)
	}
	if off+s.Length > MaxFileSize || off+s.Length < off {
		return ErrFileTooBig
	}
	now := t.fs.now().UnixNano()
	_, err = t.do(ctx, "paste", func(ctx context.Context) (any, error) {
		if err := t.checkSource(ctx, s); err != nil {
			return nil, err
		}
		f, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		return nil, t.paste(ctx, ino, f, off, s, now)
	})
	return err
}

// checkSource verifies that every slice in s is still referenced by the
// span record of the source file holding the offset it was yanked from
// (in this transaction's view), making those records part of the read set.
func (t *Txn) checkSource(ctx context.Context, s Slices) error {
	var spans []*span
	loaded := false
	for _, p := range s.Pieces {
		if p.Ext.Kind != meta.KindSlice {
			continue
		}
		if !loaded {
			var err error
			if spans, err = t.spansIn(ctx, s.Src, s.SrcOff, s.SrcOff+max(s.Length, 1)); err != nil {
				return err
			}
			loaded = true
		}
		at := s.SrcOff + p.Off
		want := p.Ext.Pointer()
		found := false
		i, _ := slices.BinarySearchFunc(spans, at, func(x *span, at uint64) int { return cmp.Compare(x.last, at) })
		if i < len(spans) && spans[i].start <= at {
			for _, e := range spans[i].rec.Extents {
				if e.Kind == meta.KindSlice && e.Backing == want.Backing && e.PtrOff <= want.Offset &&
					e.PtrOff+uint64(e.PtrLen) >= want.End() {
					found = true
					break
				}
			}
		}
		if !found {
			return fmt.Errorf("%w: stale: inode %d no longer holds slice %v", ErrBadSlice, s.Src, want)
		}
	}
	return nil
}

// paste places s at off: the whole range is first punched (so holes in s
// read as zeros), then s's pieces are laid over it.
func (t *Txn) paste(ctx context.Context, ino Ino, f *meta.Inode, off uint64, s Slices, now int64) error {
	if s.Length == 0 {
		return nil
	}
	var ps []filePiece
	covered := uint64(0) // s's pieces cover [0, covered) without a gap
	for _, p := range s.Pieces {
		if p.Off+uint64(p.Ext.Len) > s.Length || p.Off < covered {
			return fmt.Errorf("%w: pieces out of order or past the end", ErrBadSlice)
		}
		if p.Off == covered {
			covered += uint64(p.Ext.Len)
		}
		ps = append(ps, filePiece{Off: off + p.Off, Ext: p.Ext})
	}
	if covered < s.Length {
		// Holes in s must read as zeros: punch the range first.
		if err := t.punchRange(ctx, ino, f, off, s.Length); err != nil {
			return err
		}
	}
	if err := t.placePieces(ctx, ino, f, ps); err != nil {
		return err
	}
	f.Size = max(f.Size, off+s.Length)
	touch(f, now)
	t.putInode(ino, f)
	return nil
}

// Punch zeroes [off, off+n) (clipped at end of file) without changing the
// size; the storage behind it becomes garbage for the collector.
func (t *Txn) Punch(ctx context.Context, ino Ino, off, n uint64) error {
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, "punch", func(ctx context.Context) (any, error) {
		f, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		if off >= f.Size || n == 0 {
			return nil, nil
		}
		if err := t.punchRange(ctx, ino, f, off, min(n, f.Size-off)); err != nil {
			return nil, err
		}
		touch(f, now)
		t.putInode(ino, f)
		return nil, nil
	})
	return err
}

// CopyRange copies n bytes (n == 0: to the end of src) from src at srcOff
// to dst at dstOff by pasting slice pointers: no data is read or written.
// It returns the number of bytes copied (clipped at src's end of file).
func (t *Txn) CopyRange(ctx context.Context, src Ino, srcOff uint64, dst Ino, dstOff uint64, n uint64) (uint64, error) {
	now := t.fs.now().UnixNano()
	res, err := t.do(ctx, "copyrange", func(ctx context.Context) (any, error) {
		sf, err := t.loadFile(ctx, src)
		if err != nil {
			return nil, err
		}
		if n == 0 && srcOff < sf.Size {
			n = sf.Size - srcOff
		}
		s, err := t.yank(ctx, src, srcOff, n)
		if err != nil {
			return nil, err
		}
		if dstOff+s.Length > MaxFileSize || dstOff+s.Length < dstOff { // wrapped past 2^64
			return nil, ErrFileTooBig
		}
		df, err := t.loadFile(ctx, dst)
		if err != nil {
			return nil, err
		}
		return s.Length, t.paste(ctx, dst, df, dstOff, s, now)
	})
	if err != nil {
		return 0, err
	}
	return res.(uint64), nil
}

// Concat replaces dst's content with the concatenation of srcs' contents
// (dst may be among srcs). Metadata only.
func (t *Txn) Concat(ctx context.Context, dst Ino, srcs []Ino) error {
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, "concat", func(ctx context.Context) (any, error) {
		return nil, t.concat(ctx, dst, srcs, now)
	})
	return err
}

func (t *Txn) concat(ctx context.Context, dst Ino, srcs []Ino, now int64) error {
	sizes := make([]uint64, len(srcs))
	useds := make([]uint64, len(srcs))
	total := uint64(0)
	dstIsSrc := false
	for i, src := range srcs {
		sf, err := t.loadFile(ctx, src)
		if err != nil {
			return err
		}
		sizes[i], useds[i] = sf.Size, sf.Used
		if total += sf.Size; total > MaxFileSize {
			return ErrFileTooBig
		}
		dstIsSrc = dstIsSrc || src == dst
	}
	df, err := t.loadFile(ctx, dst)
	if err != nil {
		return err
	}
	// When dst is also a source, capture every source before dst changes.
	var parts []Slices
	if dstIsSrc {
		for _, src := range srcs {
			s, err := t.yank(ctx, src, 0, MaxFileSize)
			if err != nil {
				return err
			}
			parts = append(parts, s)
		}
	}
	if err := t.truncate(ctx, dst, df, 0); err != nil {
		return err
	}
	off := uint64(0)
	for i, src := range srcs {
		copied := false
		if !dstIsSrc {
			// The source's span records are the destination's, shifted:
			// copy them as stored bytes, without decoding.
			if copied, err = t.copySpans(ctx, src, dst, df, off, useds[i]); err != nil {
				return err
			}
		}
		if !copied {
			s := Slices{Length: sizes[i]}
			if dstIsSrc {
				s = parts[i]
			} else if s, err = t.yank(ctx, src, 0, sizes[i]); err != nil {
				return err
			}
			if err := t.paste(ctx, dst, df, off, s, now); err != nil {
				return err
			}
		}
		off += sizes[i]
	}
	df.Size = total
	touch(df, now)
	t.putInode(dst, df)
	return nil
}

// copySpans gives dst, which holds no data at or past shift, src's span
// records shifted by shift, copied as stored bytes (a record's value does
// not depend on its position): the cost per record is one kv read and
// write, however many extents and bytes it holds. srcUsed is src's Used.
// It reports false, having changed nothing, when dst's records past shift
// are not as expected (the caller then pastes).
func (t *Txn) copySpans(ctx context.Context, src, dst Ino, df *meta.Inode, shift, srcUsed uint64) (bool, error) {
	delete(t.fresh, dst) // it gets records written to the kv store directly
	var pairs []kv.Pair
	err := t.scanAll(ctx, meta.SpanPrefix(uint64(src)), func(p kv.Pair) error {
		pairs = append(pairs, p)
		return nil
	})
	if err != nil || len(pairs) == 0 {
		return len(pairs) == 0 && err == nil, err
	}
	// dst's record holding shift must be its open one, without data at
	// or past shift; it is closed at shift (or deleted if it starts there
	// or holds nothing: closed records are never empty).
	tail, err := t.spansIn(ctx, dst, shift, shift+1)
	if err != nil {
		return false, err
	}
	if len(tail) > 0 {
		r := tail[0]
		if r.last != meta.SpanOpen {
			return false, nil
		}
		for _, e := range r.data() {
			if r.start+e.End() > shift {
				return false, nil
			}
		}
		if r.start >= shift || len(r.data()) == 0 {
			if err := t.dropSpan(ctx, df, r); err != nil {
				return false, err
			}
		} else {
			r.last = shift - 1
			if err := t.writeSpan(ctx, dst, df, r); err != nil {
				return false, err
			}
		}
	}
	for _, p := range pairs {
		_, start, last, err := meta.ParseSpanKey(p.Key)
		if err != nil {
			return false, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if last != meta.SpanOpen {
			last += shift
		} else {
			df.OpenStart = start + shift
		}
		if err := t.setRaw(ctx, meta.SpanKey(uint64(dst), start+shift, last), p.Value); err != nil {
			return false, err
		}
	}
	df.Used += srcUsed
	addSpans(df, len(pairs))
	return true, nil
}

// Copy replaces dst's content with src's. Metadata only.
func (t *Txn) Copy(ctx context.Context, src, dst Ino) error {
	return t.Concat(ctx, dst, []Ino{src})
}

// Allocate makes sure [off, off+n) is within the file, extending it with
// zeros if needed (space is not reserved: slices are allocated on write).
func (t *Txn) Allocate(ctx context.Context, ino Ino, off, n uint64) error {
	if off+n > MaxFileSize || off+n < off {
		return ErrFileTooBig
	}
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, "allocate", func(ctx context.Context) (any, error) {
		f, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		if off+n > f.Size {
			f.Size = off + n
			touch(f, now)
			t.putInode(ino, f)
		}
		return nil, nil
	})
	return err
}

type seekResult struct {
	Off uint64
	EOF bool
}

// Seek finds the first data (SeekData) or hole (SeekHole) at or after off.
// eof is true when there is none before the end of the file (for SeekHole
// the end of file itself counts as a hole and is returned).
func (t *Txn) Seek(ctx context.Context, ino Ino, off uint64, whence Whence) (uint64, bool, error) {
	res, err := t.do(ctx, "seek", func(ctx context.Context) (any, error) {
		f, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		if off >= f.Size {
			return seekResult{Off: f.Size, EOF: true}, nil
		}
		return t.seek(ctx, ino, off, f.Size, whence)
	})
	if err != nil {
		return 0, false, err
	}
	r := res.(seekResult)
	return r.Off, r.EOF, nil
}

// seek finds the first data or hole at or after off (< size) by walking
// the file's span records from the one holding off, those overlapping a
// 64 MiB window per kv scan: it costs the records it passes, not the
// length of the holes between them (a file of 2^60 bytes with data only
// at its end answers after one or two records).
func (t *Txn) seek(ctx context.Context, ino Ino, off, size uint64, whence Whence) (seekResult, error) {
	pos := off
	for pos < size {
		// The records overlapping the window from pos (at least the one
		// holding pos, or the first after it) and the first after them.
		spans, err := t.spansIn(ctx, ino, pos, max(pos+1, min(size, pos+meta.RegionSize)))
		if err != nil {
			return seekResult{}, err
		}
		if len(spans) == 0 {
			break // no record at or after pos: zeros to the end
		}
		for _, s := range spans {
			if s.last < pos {
				continue
			}
			if s.start > pos { // a gap before s: a hole
				if whence == SeekHole {
					return seekResult{Off: min(pos, size), EOF: pos >= size}, nil
				}
				pos = s.start
			}
			if pos >= size {
				return seekResult{Off: size, EOF: true}, nil
			}
			for _, e := range s.data() {
				lo, hi := s.start+e.Off, s.start+e.End()
				if hi <= pos {
					continue
				}
				if lo >= size {
					break
				}
				if whence == SeekData {
					return seekResult{Off: max(lo, pos)}, nil
				}
				if lo > pos {
					return seekResult{Off: pos}, nil
				}
				pos = hi
			}
			if whence == SeekHole && pos <= s.last && pos < size {
				return seekResult{Off: pos}, nil // s holds no data from pos to its end
			}
			if s.last == meta.SpanOpen {
				return seekResult{Off: size, EOF: true}, nil // no data past the open record
			}
			pos = max(pos, s.last+1)
		}
	}
	if whence == SeekHole && pos < size {
		return seekResult{Off: pos}, nil
	}
	return seekResult{Off: size, EOF: true}, nil
}
