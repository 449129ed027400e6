package meta

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"github.com/txnfs/txnfs/slice"
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("meta: corrupt record")

// formatV1 is the first byte of every encoded record.
const formatV1 = 1

// Limits enforced when decoding, so corrupt bytes cannot make us allocate
// without bound.
const (
	MaxExtentsPerRegion = 1 << 16
	maxDecodedBytes     = 16 << 20
)

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	if encMode, err = (cbor.EncOptions{}).EncMode(); err != nil {
		panic(err)
	}
	if decMode, err = (cbor.DecOptions{
		MaxNestedLevels:   8,
		MaxArrayElements:  MaxExtentsPerRegion,
		MaxMapPairs:       1 << 16,
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
	}).DecMode(); err != nil {
		panic(err)
	}
}

// Marshal encodes a record: a format byte followed by CBOR.
func Marshal(v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{formatV1}, b...), nil
}

// Unmarshal decodes a record made by Marshal into v. Any problem is an
// error wrapping ErrCorrupt.
func Unmarshal(b []byte, v any) error {
	if len(b) == 0 || b[0] != formatV1 {
		return fmt.Errorf("%w: unknown record format", ErrCorrupt)
	}
	if len(b) > maxDecodedBytes {
		return fmt.Errorf("%w: record of %d bytes", ErrCorrupt, len(b))
	}
	if d, ok := v.(*Dirent); ok && d.decodeFast(b[1:]) {
		// decoded (check below)
	} else if n, ok := v.(*Inode); ok && n.decodeFast(b[1:]) {
		// decoded (check below)
	} else if err := decMode.Unmarshal(b[1:], v); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if c, ok := v.(interface{ check() error }); ok {
		if err := c.check(); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	return nil
}

// Inode is an inode record.
type Inode struct {
	_      struct{} `cbor:",toarray"`
	Type   uint8
	Mode   uint32
	Nlink  uint32
	Uid    uint32
	Gid    uint32
	Size   uint64
	Rdev   uint64
	Atime  int64 // Unix nanoseconds
	Mtime  int64
	Ctime  int64
	Btime  int64
	Change uint64
	Gen    uint64
	// Parent is the containing directory of a directory (for ".." and
	// the rename loop check); 0 for other types.
	Parent uint64
	// NextCookie is the next readdir cookie of a directory.
	NextCookie uint64
	// Target is a symlink's target.
	Target string
	// Used is the storage a regular file's visible data extents
	// reference, each rounded up to 4 KiB (layout 3; kept up to date by
	// every change of its span records). Records written before layout 3
	// lack the field and decode with 0.
	Used uint64
	// Spans is 1 + the number of the file's span records, kept up to
	// date by every change of them (layout 4), so that deleting a file
	// with none or one needs no scan of its records; 0 means unknown:
	// records written before layout 4 (they lack the field and decode
	// with 0) and files whose count was lost. Only regular files have
	// span records; every other inode is created with Spans 1.
	Spans uint64
	// OpenStart is the start of the file's open span record (the one
	// with the highest offsets, meta.SpanOpen last) when Spans >= 2.
	OpenStart uint64
}

// inodeV3 is Inode as encoded by layout 3 (without Spans and OpenStart).
type inodeV3 struct {
	_          struct{} `cbor:",toarray"`
	Type       uint8
	Mode       uint32
	Nlink      uint32
	Uid        uint32
	Gid        uint32
	Size       uint64
	Rdev       uint64
	Atime      int64
	Mtime      int64
	Ctime      int64
	Btime      int64
	Change     uint64
	Gen        uint64
	Parent     uint64
	NextCookie uint64
	Target     string
	Used       uint64
}

// MarshalInodeV3 encodes n as engines of layout 3 did (without Spans and
// OpenStart), for tests that build older data directories.
func MarshalInodeV3(n *Inode) ([]byte, error) {
	return Marshal(&inodeV3{Type: n.Type, Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid, Size: n.Size,
		Rdev: n.Rdev, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime, Btime: n.Btime, Change: n.Change, Gen: n.Gen,
		Parent: n.Parent, NextCookie: n.NextCookie, Target: n.Target, Used: n.Used})
}

// inodeV1 is Inode as encoded before layout 3 (without Used).
type inodeV1 struct {
	_          struct{} `cbor:",toarray"`
	Type       uint8
	Mode       uint32
	Nlink      uint32
	Uid        uint32
	Gid        uint32
	Size       uint64
	Rdev       uint64
	Atime      int64
	Mtime      int64
	Ctime      int64
	Btime      int64
	Change     uint64
	Gen        uint64
	Parent     uint64
	NextCookie uint64
	Target     string
}

// MarshalInodeV1 encodes n as engines before layout 3 did (without
// Used), for tests and tools that build older data directories.
func MarshalInodeV1(n *Inode) ([]byte, error) {
	return Marshal(&inodeV1{Type: n.Type, Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid, Size: n.Size,
		Rdev: n.Rdev, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime, Btime: n.Btime, Change: n.Change, Gen: n.Gen,
		Parent: n.Parent, NextCookie: n.NextCookie, Target: n.Target})
}

// inodeWire is Inode without its methods (for the decoder).
type inodeWire Inode

// UnmarshalCBOR decodes an inode of any encoding: a CBOR array of 19
// elements, of 17 (layout 3: without Spans and OpenStart, which decode as
// 0, unknown) or of 16 (before layout 3: without Used either).
func (n *Inode) UnmarshalCBOR(b []byte) error {
	if len(b) > 0 && b[0] == 0x80|17 {
		var v inodeV3
		if err := decMode.Unmarshal(b, &v); err != nil {
			return err
		}
		*n = Inode{Type: v.Type, Mode: v.Mode, Nlink: v.Nlink, Uid: v.Uid, Gid: v.Gid, Size: v.Size, Rdev: v.Rdev,
			Atime: v.Atime, Mtime: v.Mtime, Ctime: v.Ctime, Btime: v.Btime, Change: v.Change, Gen: v.Gen,
			Parent: v.Parent, NextCookie: v.NextCookie, Target: v.Target, Used: v.Used}
		return nil
	}
	if len(b) > 0 && b[0] == 0x80|16 {
		var v inodeV1
		if err := decMode.Unmarshal(b, &v); err != nil {
			return err
		}
		*n = Inode{Type: v.Type, Mode: v.Mode, Nlink: v.Nlink, Uid: v.Uid, Gid: v.Gid, Size: v.Size, Rdev: v.Rdev,
			Atime: v.Atime, Mtime: v.Mtime, Ctime: v.Ctime, Btime: v.Btime, Change: v.Change, Gen: v.Gen,
			Parent: v.Parent, NextCookie: v.NextCookie, Target: v.Target}
		return nil
	}
	return decMode.Unmarshal(b, (*inodeWire)(n))
}

// decodeFast decodes b if it is the canonical encoding Marshal produces
// for the current layout (an array of 19 elements: integers in their
// shortest form, the target a text string of valid UTF-8 with a
// shortest-form length, nothing after) and reports whether it did;
// anything else (older layouts, other encodings, corrupt bytes) is left
// to the generic decoder, which gives the same result for the bytes the
// fast path accepts (TestInodeDecodeFast, FuzzInodeFast). The
// reflection-driven decoder, and the decode cache that saved it, were a
// fifth of ls -lR's CPU (docs/vnfs.md "Trees, session 8").
func (n *Inode) decodeFast(b []byte) bool {
	if len(b) < 20 || b[0] != 0x80|19 {
		return false
	}
	b = b[1:]
	var u [19]uint64 // unsigned fields by position; times in t
	var t [4]int64
	var target string
	ok := true
	for i := 0; i < 19 && ok; i++ {
		switch {
		case i >= 7 && i <= 10: // Atime, Mtime, Ctime, Btime
			t[i-7], b, ok = cborInt(b)
		case i == 15: // Target
			target, b, ok = cborText(b)
		default:
			u[i], b, ok = cborUint(b)
		}
	}
	if !ok || len(b) != 0 || u[0] > 0xff || u[1] > 0xffffffff || u[2] > 0xffffffff || u[3] > 0xffffffff || u[4] > 0xffffffff {
		return false
	}
	*n = Inode{Type: uint8(u[0]), Mode: uint32(u[1]), Nlink: uint32(u[2]), Uid: uint32(u[3]), Gid: uint32(u[4]),
		Size: u[5], Rdev: u[6], Atime: t[0], Mtime: t[1], Ctime: t[2], Btime: t[3], Change: u[11], Gen: u[12],
		Parent: u[13], NextCookie: u[14], Target: target, Used: u[16], Spans: u[17], OpenStart: u[18]}
	return true
}

// cborInt decodes a CBOR integer (unsigned or negative) in its shortest
// form whose value fits an int64.
func cborInt(b []byte) (int64, []byte, bool) {
	if len(b) == 0 {
		return 0, nil, false
	}
	major := b[0] >> 5
	if major > 1 {
		return 0, nil, false
	}
	v, rest, ok := cborHead(b, major)
	if !ok || v > math.MaxInt64 {
		return 0, nil, false
	}
	if major == 1 {
		return -1 - int64(v), rest, true
	}
	return int64(v), rest, true
}

// cborText decodes a CBOR text string of valid UTF-8 with its length in
// the shortest form.
func cborText(b []byte) (string, []byte, bool) {
	n, rest, ok := cborHead(b, 3)
	if !ok || n > uint64(len(rest)) || !utf8.Valid(rest[:n]) {
		return "", nil, false
	}
	if n == 0 {
		return "", rest, true
	}
	return string(rest[:n]), rest[n:], true
}

func (n *Inode) check() error {
	if n.Type < 1 || n.Type > 7 {
		return fmt.Errorf("inode type %d", n.Type)
	}
	if n.Mode&^0o7777 != 0 {
		return fmt.Errorf("inode mode %o", n.Mode)
	}
	return nil
}

// Time converts a stored timestamp.
func Time(ns int64) time.Time { return time.Unix(0, ns) }

// Dirent is a directory entry record.
type Dirent struct {
	_      struct{} `cbor:",toarray"`
	Ino    uint64
	Type   uint8
	Cookie uint64
}

// decodeFast decodes b if it is the canonical encoding Marshal produces
// (an array of three unsigned integers in their shortest form, nothing
// after) and reports whether it did; anything else is left to the
// generic decoder, which gives the same result for these bytes
// (FuzzUnmarshalDirent compares them). The reflection-driven decoder was
// most of an entry read's decoding cost, one per LOOKUP and REMOVE.
func (d *Dirent) decodeFast(b []byte) bool {
	if len(b) < 4 || b[0] != 0x83 {
		return false
	}
	ino, b, ok := cborUint(b[1:])
	if !ok {
		return false
	}
	typ, b, ok := cborUint(b)
	if !ok || typ > 0xff {
		return false
	}
	cookie, b, ok := cborUint(b)
	if !ok || len(b) != 0 {
		return false
	}
	*d = Dirent{Ino: ino, Type: uint8(typ), Cookie: cookie}
	return true
}

// cborUint decodes a CBOR unsigned integer in its shortest form at the
// start of b and returns it and the rest of b.
func cborUint(b []byte) (uint64, []byte, bool) {
	return cborHead(b, 0)
}

// cborHead decodes the head of a CBOR data item of the given major type
// whose argument is in its shortest form (no indefinite lengths) and
// returns the argument and the rest of b.
func cborHead(b []byte, major byte) (uint64, []byte, bool) {
	if len(b) == 0 || b[0]>>5 != major {
		return 0, nil, false
	}
	var v uint64
	var n int
	switch ai := b[0] & 0x1f; {
	case ai < 24:
		return uint64(ai), b[1:], true
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	default:
		return 0, nil, false
	}
	if len(b) < 1+n {
		return 0, nil, false
	}
	for _, c := range b[1 : 1+n] {
		v = v<<8 | uint64(c)
	}
	// The shortest form: the value needs this width.
	if min := [...]uint64{1: 24, 2: 1 << 8, 4: 1 << 16, 8: 1 << 32}[n]; v < min {
		return 0, nil, false
	}
	return v, b[1+n:], true
}

func (d *Dirent) check() error {
	if d.Ino == 0 || d.Type < 1 || d.Type > 7 {
		return fmt.Errorf("dirent ino %d type %d", d.Ino, d.Type)
	}
	return nil
}

// Extent kinds.
const (
	KindHole   = 0 // reads as zeros
	KindSlice  = 1 // bytes [SliceOff, SliceOff+Len) of slice Ptr
	KindInline = 2 // bytes in Data
)

// Extent places Len bytes at offset Off within a region, chunk or span
// record (relative to the record's first byte).
type Extent struct {
	_        struct{} `cbor:",toarray"`
	Off      uint64
	Len      uint32
	Kind     uint8
	Backing  uint32
	PtrOff   uint64
	PtrLen   uint32
	CRC      uint32
	SliceOff uint32
	Data     []byte
}

// Pointer returns the slice pointer of a KindSlice extent.
func (e *Extent) Pointer() slice.Pointer {
	return slice.Pointer{Backing: e.Backing, Offset: e.PtrOff, Length: e.PtrLen, CRC: e.CRC}
}

// SetPointer makes e a KindSlice extent of p.
func (e *Extent) SetPointer(p slice.Pointer, sliceOff uint32) {
	e.Kind, e.Backing, e.PtrOff, e.PtrLen, e.CRC, e.SliceOff, e.Data = KindSlice, p.Backing, p.Offset, p.Length, p.CRC, sliceOff, nil
}

// End is the record offset just past the extent.
func (e *Extent) End() uint64 { return e.Off + uint64(e.Len) }

// check checks e on its own; the record's check bounds its offsets.
func (e *Extent) check() error {
	if e.Len == 0 || e.Off+uint64(e.Len) < e.Off {
		return fmt.Errorf("extent [%d,+%d)", e.Off, e.Len)
	}
	switch e.Kind {
	case KindHole:
	case KindSlice:
		if e.PtrLen == 0 || e.PtrLen > slice.MaxSize || uint64(e.SliceOff)+uint64(e.Len) > uint64(e.PtrLen) {
			return fmt.Errorf("extent slice range %d+%d of %d", e.SliceOff, e.Len, e.PtrLen)
		}
	case KindInline:
		if len(e.Data) != int(e.Len) {
			return fmt.Errorf("inline extent length %d holds %d bytes", e.Len, len(e.Data))
		}
	default:
		return fmt.Errorf("extent kind %d", e.Kind)
	}
	return nil
}

// Region is the slice list of one region of a file in layout 1: extents in
// the order they were written; where they overlap the later one wins (WTF
// §2.1). Layout 2 stores Chunk records instead; Region remains so that a
// data directory written by layout 1 can be read and converted.
type Region struct {
	_ struct{} `cbor:",toarray"`
	// End is the region offset just past the last byte ever written in
	// this region (the region's end of data, WTF §2.5).
	End     uint32
	Extents []Extent
	// Compacted is the list length after the last compaction; the list
	// is compacted again when it has grown well past it.
	Compacted uint32
}

func (r *Region) check() error {
	if r.End > RegionSize {
		return fmt.Errorf("region end %d", r.End)
	}
	for i := range r.Extents {
		e := &r.Extents[i]
		if err := e.check(); err != nil {
			return err
		}
		if e.End() > RegionSize {
			return fmt.Errorf("extent [%d,+%d) outside region", e.Off, e.Len)
		}
	}
	return nil
}

// Chunk is the slice list of one ChunkSize chunk of a file (layout 2):
// extents at chunk offsets, in the order they were written; where they
// overlap the later one wins (WTF §2.1). The engine keeps it compacted
// most of the time (fs/data.go).
type Chunk struct {
	_ struct{} `cbor:",toarray"`
	// End is the chunk offset just past the last byte ever written in
	// this chunk.
	End     uint32
	Extents []Extent
	// Compacted is the list length after the last compaction; the list
	// is compacted again when it has grown well past it.
	Compacted uint32
}

func (c *Chunk) check() error {
	if c.End > ChunkSize {
		return fmt.Errorf("chunk end %d", c.End)
	}
	for i := range c.Extents {
		e := &c.Extents[i]
		if err := e.check(); err != nil {
			return err
		}
		if e.End() > ChunkSize {
			return fmt.Errorf("extent [%d,+%d) outside chunk", e.Off, e.Len)
		}
	}
	return nil
}

// MaxExtentsPerSpan bounds the extents a decoded Span record may hold (the
// engine keeps far fewer: it splits records past a few dozen).
const MaxExtentsPerSpan = MaxExtentsPerRegion

// Span is the slice list of one span record of a file (layout 3): the
// record covers file bytes [start, last] given by its key (SpanKey), and
// its extents are at offsets relative to start, in the order they were
// written; where they overlap the later one wins (WTF §2.1). The value is
// independent of the record's position, so copying a file's records to
// another offset rewrites keys only.
type Span struct {
	_       struct{} `cbor:",toarray"`
	Extents []Extent
	// Compacted is the list length after the last compaction; the list
	// is compacted again when it has grown well past it.
	Compacted uint32
}

func (s *Span) check() error {
	if len(s.Extents) > MaxExtentsPerSpan {
		return fmt.Errorf("span of %d extents", len(s.Extents))
	}
	for i := range s.Extents {
		if err := s.Extents[i].check(); err != nil {
			return err
		}
	}
	return nil
}

// CheckLength reports an extent reaching past a record covering length
// bytes (last-start+1; 0 stands for 2^64, the open record at offset 0).
func (s *Span) CheckLength(length uint64) error {
	for i := range s.Extents {
		e := &s.Extents[i]
		if e.End() < e.Off || length != 0 && e.End() > length {
			return fmt.Errorf("%w: extent [%d,+%d) outside a span of %d bytes", ErrCorrupt, e.Off, e.Len, length)
		}
	}
	return nil
}

// UnmarshalSpan decodes the span record value b stored under key k
// (ParseSpanKey), checking that its extents lie within the span.
func UnmarshalSpan(k, b []byte) (ino, start, last uint64, s *Span, err error) {
	if ino, start, last, err = ParseSpanKey(k); err != nil {
		return 0, 0, 0, nil, err
	}
	s = new(Span)
	if err := Unmarshal(b, s); err != nil {
		return 0, 0, 0, nil, err
	}
	if err := s.CheckLength(last - start + 1); err != nil {
		return 0, 0, 0, nil, err
	}
	return ino, start, last, s, nil
}
