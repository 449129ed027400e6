package meta

import (
	"encoding/binary"
	"fmt"
)

// Key prefixes.
const (
	prefixInode  = 'i'
	prefixDirent = 'd'
	prefixCookie = 'c'
	prefixRegion = 'r' // layout 1 only (see ChunkKey)
	prefixChunk  = 'e' // layout 2 only (see SpanKey)
	prefixSpan   = 'f'
	prefixXattr  = 'x'
	prefixOrphan = 'o'
	prefixMisc   = 'm'
	// prefixCovered: covered-put descriptors, "v" + sequence (u64). See
	// CoveredKey.
	prefixCovered = 'v'
)

// RegionSize is the size of the file regions that each had one slice list
// (WTF §2.3) in layout 1. It still bounds an extent (Extent.Off is
// region-relative in layout 1) and is the unit of slice placement hints.
const RegionSize = 64 << 20

// ChunkSize is the span of file data one Chunk record (layout 2) describes:
// a write re-encodes only the chunks it touches, so its cost does not grow
// with the number of extents elsewhere in the file.
const ChunkSize = 256 << 10

// Data layouts (the MiscKey(LayoutKey) record, a big-endian uint64; absent
// means LayoutRegions).
const (
	// LayoutRegions: one Region record per 64 MiB region ("r" keys).
	LayoutRegions = 1
	// LayoutChunks: one Chunk record per ChunkSize chunk ("e" keys).
	LayoutChunks = 2
	// LayoutSpans: Span records of variable span ("f" keys).
	LayoutSpans = 3
	// LayoutSpanCount: layout 3 whose inode records count their span
	// records (Inode.Spans, Inode.OpenStart). Nothing is converted: a
	// layout-3 inode decodes with Spans 0 (unknown). The number tells
	// engines that do not maintain the count to keep off.
	LayoutSpanCount = 4
	// LayoutCurrent is the layout this engine writes.
	LayoutCurrent = LayoutSpanCount
	// LayoutKey names the misc record holding the layout.
	LayoutKey = "layout"
)

func key(prefix byte, n uint64, rest []byte) []byte {
	k := make([]byte, 0, 9+len(rest))
	k = append(k, prefix)
	k = binary.BigEndian.AppendUint64(k, n)
	return append(k, rest...)
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// InodeKey is the key of inode ino.
func InodeKey(ino uint64) []byte { return key(prefixInode, ino, nil) }

// InodePrefix covers all inodes.
func InodePrefix() []byte { return []byte{prefixInode} }

// DirentKey is the key of entry name in directory dir.
func DirentKey(dir uint64, name string) []byte { return key(prefixDirent, dir, []byte(name)) }

// DirentPrefix covers all entries of directory dir.
func DirentPrefix(dir uint64) []byte { return key(prefixDirent, dir, nil) }

// AllDirentsPrefix covers every directory entry.
func AllDirentsPrefix() []byte { return []byte{prefixDirent} }

// CookieKey is the readdir-order index entry of cookie in dir.
func CookieKey(dir, cookie uint64) []byte { return key(prefixCookie, dir, u64(cookie)) }

// CookiePrefix covers the cookie index of dir.
func CookiePrefix(dir uint64) []byte { return key(prefixCookie, dir, nil) }

// AllCookiesPrefix covers every cookie index entry.
func AllCookiesPrefix() []byte { return []byte{prefixCookie} }

// RegionKey is the key of region idx of inode ino (layout 1).
func RegionKey(ino, idx uint64) []byte { return key(prefixRegion, ino, u64(idx)) }

// RegionPrefix covers all regions of ino.
func RegionPrefix(ino uint64) []byte { return key(prefixRegion, ino, nil) }

// AllRegionsPrefix covers every region of every file.
func AllRegionsPrefix() []byte { return []byte{prefixRegion} }

// ChunkKey is the key of chunk idx (file bytes [idx*ChunkSize,
// (idx+1)*ChunkSize)) of inode ino.
func ChunkKey(ino, idx uint64) []byte { return key(prefixChunk, ino, u64(idx)) }

// ChunkPrefix covers all chunks of ino.
func ChunkPrefix(ino uint64) []byte { return key(prefixChunk, ino, nil) }

// AllChunksPrefix covers every chunk of every file.
func AllChunksPrefix() []byte { return []byte{prefixChunk} }

// SpanOpen is the last offset of a file's open-ended span record: the
// record with the highest offsets covers everything past its start.
const SpanOpen = ^uint64(0)

// SpanKey is the key of the span record of inode ino covering file bytes
// [start, last] (layout 3). Keys sort by last offset, so the record
// covering offset x is the first one at or after SpanSeekKey(ino, x): a
// forward scan, which the kv store's range read sets protect.
func SpanKey(ino, start, last uint64) []byte {
	return binary.BigEndian.AppendUint64(key(prefixSpan, ino, u64(last)), start)
}

// SpanSeekKey is the smallest key of a span record of ino whose last
// offset is at least off.
func SpanSeekKey(ino, off uint64) []byte { return key(prefixSpan, ino, u64(off)) }

// SpanPrefix covers all span records of ino.
func SpanPrefix(ino uint64) []byte { return key(prefixSpan, ino, nil) }

// AllSpansPrefix covers every span record of every file.
func AllSpansPrefix() []byte { return []byte{prefixSpan} }

// ParseSpanKey decodes a span key into inode, first and last offset.
func ParseSpanKey(k []byte) (ino, start, last uint64, err error) {
	if len(k) != 25 || k[0] != prefixSpan {
		return 0, 0, 0, fmt.Errorf("%w: bad span key %x", ErrCorrupt, k)
	}
	ino, last, start = binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), binary.BigEndian.Uint64(k[17:25])
	if start > last {
		return 0, 0, 0, fmt.Errorf("%w: span key %x starts after its end", ErrCorrupt, k)
	}
	return ino, start, last, nil
}

// XattrKey is the key of extended attribute name of ino.
func XattrKey(ino uint64, name string) []byte { return key(prefixXattr, ino, []byte(name)) }

// XattrPrefix covers the extended attributes of ino.
func XattrPrefix(ino uint64) []byte { return key(prefixXattr, ino, nil) }

// AllXattrsPrefix covers the extended attributes of every inode.
func AllXattrsPrefix() []byte { return []byte{prefixXattr} }

// OrphanKey marks ino as an orphan (unlinked while open).
func OrphanKey(ino uint64) []byte { return key(prefixOrphan, ino, nil) }

// OrphanPrefix covers all orphans.
func OrphanPrefix() []byte { return []byte{prefixOrphan} }

// CoveredKey is the key of covered-put descriptor seq: the value is the
// concatenated 20-byte encodings (slice.Pointer.AppendBinary) of the
// slices a commit wrote with O_DIRECT into reused space without syncing
// their backing files (datadir Options.Covered). The commit that writes
// them sets it in its own batch; the garbage collector deletes it once a
// Sync made that commit durable; datadir.Open checks every one left
// (docs/engine.md "Covered puts").
func CoveredKey(seq uint64) []byte { return key(prefixCovered, seq, nil) }

// CoveredAckedKey names the misc record (MiscKey) holding the covered-put
// acknowledgement watermark, a big-endian uint64: every descriptor with a
// sequence at most it belongs to a commit that was acknowledged durable
// (or never applied) before the batch that wrote the value was built.
// Commits write it (blindly) when it has advanced; recovery takes the
// largest value the log and the store hold and never cuts for a
// descriptor under it (that is damage, not an unfinished commit).
const CoveredAckedKey = "covered-acked"

// CoveredPrefix covers every covered-put descriptor.
func CoveredPrefix() []byte { return []byte{prefixCovered} }

// MiscKey is engine bookkeeping key name.
func MiscKey(name string) []byte { return append([]byte{prefixMisc}, name...) }

// ParseInodeKey, ParseRegionKey etc. decode keys found by scans.

// ParseIno decodes the inode number of an "i", "r", "e", "f", "x", "o", "d" or "c" key.
func ParseIno(k []byte) (uint64, error) {
	if len(k) < 9 {
		return 0, fmt.Errorf("%w: short key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), nil
}

// ParseRegionKey decodes a region key into inode and region index.
func ParseRegionKey(k []byte) (ino, idx uint64, err error) {
	if len(k) != 17 || k[0] != prefixRegion {
		return 0, 0, fmt.Errorf("%w: bad region key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), nil
}

// ParseChunkKey decodes a chunk key into inode and chunk index.
func ParseChunkKey(k []byte) (ino, idx uint64, err error) {
	if len(k) != 17 || k[0] != prefixChunk {
		return 0, 0, fmt.Errorf("%w: bad chunk key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), nil
}

// ParseDirentKey decodes a directory entry key into directory and name.
func ParseDirentKey(k []byte) (dir uint64, name string, err error) {
	if len(k) < 10 || k[0] != prefixDirent {
		return 0, "", fmt.Errorf("%w: bad dirent key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), string(k[9:]), nil
}

// ParseCookieKey decodes a cookie index key.
func ParseCookieKey(k []byte) (dir, cookie uint64, err error) {
	if len(k) != 17 || k[0] != prefixCookie {
		return 0, 0, fmt.Errorf("%w: bad cookie key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), nil
}

// ParseXattrKey decodes an xattr key into inode and attribute name.
func ParseXattrKey(k []byte) (ino uint64, name string, err error) {
	if len(k) < 10 || k[0] != prefixXattr {
		return 0, "", fmt.Errorf("%w: bad xattr key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), string(k[9:]), nil
}

// CookieEntry is what a cookie index value (the value under CookieKey)
// holds. Layout 4 values carry the entry's inode number, type and the
// inode's generation next to its name, so that a directory listing
// without other attributes is one scan of the cookie index (no entry or
// inode read); values written before (layout 3 and older) hold the name
// only and decode with Full false.
type CookieEntry struct {
	Name string
	Full bool // Ino, Type and Gen are set
	Ino  uint64
	Type uint8
	Gen  uint64
}

// cookieTag starts a layout-4 cookie value: names never hold a NUL byte,
// so an older value (the bare name) never starts with it.
const cookieTag = 0

// CookieValue encodes e (Full is implied) as a cookie index value: the tag
// byte, the inode number and generation as uvarints, the type byte, then
// the name.
func CookieValue(e CookieEntry) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+1+len(e.Name))
	b = append(b, cookieTag)
	b = binary.AppendUvarint(b, e.Ino)
	b = binary.AppendUvarint(b, e.Gen)
	b = append(b, e.Type)
	return append(b, e.Name...)
}

// ParseCookieValue decodes a cookie index value of either form.
func ParseCookieValue(b []byte) (CookieEntry, error) {
	if len(b) == 0 {
		return CookieEntry{}, fmt.Errorf("%w: empty cookie value", ErrCorrupt)
	}
	if b[0] != cookieTag {
		return CookieEntry{Name: string(b)}, nil
	}
	ino, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return CookieEntry{}, fmt.Errorf("%w: cookie value %x: bad inode number", ErrCorrupt, b)
	}
	rest := b[1+n:]
	gen, n := binary.Uvarint(rest)
	if n <= 0 || len(rest) < n+2 {
		return CookieEntry{}, fmt.Errorf("%w: cookie value %x: bad generation or no name", ErrCorrupt, b)
	}
	e := CookieEntry{Name: string(rest[n+1:]), Full: true, Ino: ino, Type: rest[n], Gen: gen}
	if e.Ino == 0 || e.Type < 1 || e.Type > 7 {
		return CookieEntry{}, fmt.Errorf("%w: cookie value %x: inode %d type %d", ErrCorrupt, b, e.Ino, e.Type)
	}
	return e, nil
}
