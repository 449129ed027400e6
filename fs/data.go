package fs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Region list maintenance thresholds.
const (
	// compactAfter: a chunk's list longer than this is compacted (WTF
	// §2.8): overwritten and hidden extents are dropped.
	compactAfter = 32
	// defragAfter: a compacted list still longer than this has its data
	// rewritten into a few large slices.
	defragAfter = 256
	// maxInlineRun: adjacent inline extents are merged up to this size;
	// longer runs are moved into a slice.
	maxInlineRun = 16 << 10
	// inlineBudget bounds the inline bytes one chunk record holds, so a
	// chunk record (rewritten on every write to the chunk) stays small:
	// past it, compaction moves all inline data into slices.
	inlineBudget = 64 << 10
)

// overlay places e over the non-overlapping, sorted pieces in vis (newest
// wins) and returns the new list.
func overlay(vis []meta.Extent, e meta.Extent) []meta.Extent {
	if n := len(vis); n == 0 || vis[n-1].End() <= e.Off {
		return append(vis, e) // the common case: writing past everything seen
	}
	out := make([]meta.Extent, 0, len(vis)+2)
	inserted := false
	for _, p := range vis {
		if p.End() <= e.Off {
			out = append(out, p)
			continue
		}
		if p.Off >= e.End() {
			if !inserted {
				out = append(out, e)
				inserted = true
			}
			out = append(out, p)
			continue
		}
		if p.Off < e.Off {
			out = append(out, trim(p, p.Off, e.Off))
		}
		if !inserted {
			out = append(out, e)
			inserted = true
		}
		if p.End() > e.End() {
			out = append(out, trim(p, e.End(), p.End()))
		}
	}
	if !inserted {
		out = append(out, e)
	}
	return out
}

// trim restricts extent e to chunk offsets [from, to).
func trim(e meta.Extent, from, to uint32) meta.Extent {
	d := from - e.Off
	e.Off, e.Len = from, to-from
	switch e.Kind {
	case meta.KindSlice:
		e.SliceOff += d
	case meta.KindInline:
		e.Data = e.Data[d : d+e.Len]
	}
	return e
}

// visible returns the compacted form of a chunk's extent list: sorted,
// non-overlapping pieces with data, holes left out.
func visible(exts []meta.Extent) []meta.Extent {
	var vis []meta.Extent
	for _, e := range exts {
		vis = overlay(vis, e)
	}
	return slices.DeleteFunc(vis, func(e meta.Extent) bool { return e.Kind == meta.KindHole })
}

// filePiece is a visible piece of a file at file offset Off.
type filePiece struct {
	Off uint64
	Ext meta.Extent // Ext.Off is meaningless here; Ext.Len is the length
}

// pieces returns the visible pieces of ino within [off, off+n), in order,
// holes left out.
func (t *Txn) pieces(ctx context.Context, ino Ino, off, n uint64) ([]filePiece, error) {
	if n == 0 {
		return nil, nil
	}
	var out []filePiece
	end := off + n
	idxs, err := t.chunksIn(ctx, ino, off/meta.ChunkSize, (end-1)/meta.ChunkSize)
	if err != nil {
		return nil, err
	}
	for _, idx := range idxs {
		r, err := t.loadChunk(ctx, ino, idx)
		if err != nil {
			return nil, err
		}
		base := idx * meta.ChunkSize
		lo := uint32(max(off, base) - base)
		hi := uint32(min(end, base+meta.ChunkSize) - base)
		for _, e := range visible(r.Extents) {
			if e.End() <= lo || e.Off >= hi {
				continue
			}
			e = trim(e, max(e.Off, lo), min(e.End(), hi))
			out = append(out, filePiece{Off: base + uint64(e.Off), Ext: e})
		}
	}
	return out, nil
}

// loadFile loads a regular file's inode for a data operation.
func (t *Txn) loadFile(ctx context.Context, ino Ino) (*meta.Inode, error) {
	n, err := t.loadInode(ctx, ino)
	if err != nil {
		return nil, err
	}
	switch FileType(n.Type) {
	case TypeRegular:
		return n, nil
	case TypeDirectory:
		return nil, fmt.Errorf("%w: inode %d", ErrIsDir, ino)
	default:
		return nil, fmt.Errorf("%w: data operation on a %v", ErrInvalid, FileType(n.Type))
	}
}

type readResult struct {
	N      int
	EOF    bool
	Pieces []filePiece
}

// Read reads into buf from offset off. Permission to read is checked when
// the file is opened, by the caller (NFS OPEN/ACCESS, FUSE open).
func (t *Txn) Read(ctx context.Context, ino Ino, off uint64, buf []byte) (int, bool, error) {
	res, err := t.do(ctx, "read", func(ctx context.Context) (any, error) {
		n, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		if off >= n.Size {
			return readResult{EOF: true}, nil
		}
		cnt := min(uint64(len(buf)), n.Size-off)
		ps, err := t.pieces(ctx, ino, off, cnt)
		if err != nil {
			return nil, err
		}
		return readResult{N: int(cnt), EOF: off+cnt == n.Size, Pieces: ps}, nil
	})
	if err != nil {
		return 0, false, err
	}
	r := res.(readResult)
	pos := off // zero only the holes between pieces
	for _, p := range r.Pieces {
		clear(buf[pos-off : p.Off-off])
		if err := t.fs.readPiece(ctx, p.Ext, buf[p.Off-off:p.Off-off+uint64(p.Ext.Len)]); err != nil {
			return 0, false, err
		}
		pos = p.Off + uint64(p.Ext.Len)
	}
	clear(buf[pos-off : r.N])
	return r.N, r.EOF, nil
}

// readPiece copies extent e's bytes into dst (len(dst) == e.Len).
func (f *FS) readPiece(ctx context.Context, e meta.Extent, dst []byte) error {
	switch e.Kind {
	case meta.KindInline:
		copy(dst, e.Data)
	case meta.KindSlice:
		if err := f.slices.ReadAt(ctx, e.Pointer(), e.SliceOff, dst); err != nil {
			return sliceErr(err)
		}
	}
	return nil
}

func sliceErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, slice.ErrCorrupt), errors.Is(err, slice.ErrBadPointer):
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return fmt.Errorf("%w: slice store: %v", ErrIO, err)
	}
}

// storeData turns data destined for file offset off into extents in file
// coordinates, split at region boundaries and slice.MaxSize (placePieces
// splits them further at chunk boundaries); pieces larger
// than the inline threshold are written to the slice store now.
func (t *Txn) storeData(ctx context.Context, ino Ino, off uint64, data []byte) ([]filePiece, error) {
	var out []filePiece
	for len(data) > 0 {
		room := meta.RegionSize - off%meta.RegionSize
		n := min(uint64(len(data)), room, slice.MaxSize)
		e := meta.Extent{Len: uint32(n)}
		if int(n) <= t.fs.cfg.InlineMax && !t.noFlushSlices() {
			e.Kind, e.Data = meta.KindInline, slices.Clone(data[:n])
		} else {
			p, err := t.putSlice(ctx, ino, off, data[:n])
			if err != nil {
				return nil, err
			}
			e.SetPointer(p, 0)
		}
		out = append(out, filePiece{Off: off, Ext: e})
		off += n
		data = data[n:]
	}
	return out, nil
}

// noFlushSlices reports whether the transaction's slices cost its commit
// no flush (a NoSync commit over ordered stores, see Config.SlicesOrdered).
// Small writes then go to slices too: inline data is there to save a
// durable commit's data flush, and it makes every small write rewrite a
// chunk record of up to inlineBudget bytes (measured: 4 KiB NoSync writes
// p50 104 µs, p99 9.7 ms inline; see docs/engine.md).
func (t *Txn) noFlushSlices() bool { return t.opts.NoSync && t.fs.cfg.SlicesOrdered }

func (t *Txn) putSlice(ctx context.Context, ino Ino, off uint64, data []byte) (slice.Pointer, error) {
	hint := uint64(ino)*0x9e3779b97f4a7c15 + off/meta.RegionSize
	p, err := t.fs.slices.Put(ctx, hint, data)
	if err != nil {
		return slice.Pointer{}, sliceErr(err)
	}
	t.written = append(t.written, p)
	return p, nil
}

// Write writes data at offset off, extending the file as needed. The data
// goes to the slice store before the metadata transaction; only pointers
// are logged for replay. Permission is checked at open by the caller.
func (t *Txn) Write(ctx context.Context, ino Ino, off uint64, data []byte) error {
	if off+uint64(len(data)) > MaxFileSize || off+uint64(len(data)) < off {
		return ErrFileTooBig
	}
	if t.done {
		return ErrTxnDone
	}
	ps, err := t.storeData(ctx, ino, off, data)
	if err != nil {
		return err
	}
	now := t.fs.now().UnixNano()
	_, err = t.do(ctx, "write", func(ctx context.Context) (any, error) {
		n, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		return nil, t.placeWritten(ctx, ino, n, ps, len(data) > 0, now)
	})
	return err
}

// Append writes data at the end of the file and returns the offset used.
// Inside a transaction, concurrent appenders conflict and are retried by
// replay; FS.Append batches independent appends into one transaction.
func (t *Txn) Append(ctx context.Context, ino Ino, data []byte) (uint64, error) {
	var off uint64
	res, err := t.do(ctx, "append-size", func(ctx context.Context) (any, error) {
		n, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		return n.Size, nil
	})
	if err != nil {
		return 0, err
	}
	off = res.(uint64)
	return off, t.Write(ctx, ino, off, data)
}

// AppendAtEnd appends data at the end of the file as it is when the
// transaction commits. Unlike Append it neither returns nor logs the
// offset: the data is stored once, and if the commit conflicts, replay
// places the same slices at the then-current end. So concurrent
// transactions appending to one file do not abort each other through it
// (an NFS APPEND whose offset the client does not ask for).
func (t *Txn) AppendAtEnd(ctx context.Context, ino Ino, data []byte) error {
	if uint64(len(data)) > MaxFileSize {
		return ErrFileTooBig
	}
	if t.done {
		return ErrTxnDone
	}
	// Pieces relative to offset 0; placePieces splits them at chunk
	// boundaries once the offset is known.
	rel, err := t.storeData(ctx, ino, 0, data)
	if err != nil {
		return err
	}
	now := t.fs.now().UnixNano()
	_, err = t.do(ctx, "append-at-end", func(ctx context.Context) (any, error) {
		n, err := t.loadFile(ctx, ino)
		if err != nil {
			return nil, err
		}
		off := n.Size
		if off+uint64(len(data)) > MaxFileSize || off+uint64(len(data)) < off {
			return nil, ErrFileTooBig
		}
		ps := make([]filePiece, len(rel))
		for i, p := range rel {
			ps[i] = filePiece{Off: p.Off + off, Ext: p.Ext}
		}
		return nil, t.placeWritten(ctx, ino, n, ps, len(data) > 0, now)
	})
	return err
}

// placeWritten places the pieces of a write on inode n and, if it wrote
// any bytes, updates the times and clears set-id bits, then stores n.
func (t *Txn) placeWritten(ctx context.Context, ino Ino, n *meta.Inode, ps []filePiece, wrote bool, now int64) error {
	if err := t.placePieces(ctx, ino, n, ps); err != nil {
		return err
	}
	if wrote {
		touch(n, now)
		t.clearSetid(n)
	}
	t.putInode(ino, n)
	return nil
}

// placePieces overlays file pieces (of any length, split here at chunk
// boundaries) on the chunks of inode n, growing its size to cover them, and
// compacts chunks whose lists grew long. Only the chunks the pieces touch
// are loaded and re-encoded.
func (t *Txn) placePieces(ctx context.Context, ino Ino, n *meta.Inode, ps []filePiece) error {
	byChunk := map[uint64]*meta.Chunk{}
	var order []uint64
	for _, whole := range ps {
		for _, p := range splitPiece(whole.Off, whole.Ext) {
			idx := p.Off / meta.ChunkSize
			r, ok := byChunk[idx]
			if !ok {
				var err error
				if r, err = t.loadChunk(ctx, ino, idx); err != nil {
					return err
				}
				byChunk[idx] = r
				order = append(order, idx)
			}
			e := p.Ext
			e.Off = uint32(p.Off % meta.ChunkSize)
			r.Extents = append(r.Extents, e)
			if e.Kind != meta.KindHole {
				r.End = max(r.End, e.End())
			}
			if end := p.Off + uint64(e.Len); end > n.Size && e.Kind != meta.KindHole {
				n.Size = end
			}
		}
	}
	for _, idx := range order {
		r := byChunk[idx]
		if len(r.Extents) > max(t.fs.compactAfter, 2*int(r.Compacted)) || inlineBytes(r) > inlineBudget {
			if err := t.compact(ctx, ino, idx, r); err != nil {
				return err
			}
		}
		t.putChunk(ino, idx, r)
	}
	return nil
}

// compact rewrites a chunk's list in compacted form (WTF §2.8): merges
// adjacent inline runs, moves long inline runs into slices, and if the list
// is still long, rewrites the chunk's data into a few large slices.
func (t *Txn) compact(ctx context.Context, ino Ino, idx uint64, r *meta.Chunk) error {
	vis := visible(r.Extents)
	var out []meta.Extent
	for _, e := range vis {
		if k := len(out) - 1; k >= 0 && e.Kind == meta.KindInline && out[k].Kind == meta.KindInline &&
			out[k].End() == e.Off && int(out[k].Len+e.Len) <= maxInlineRun {
			out[k].Data = append(slices.Clip(out[k].Data), e.Data...)
			out[k].Len += e.Len
			continue
		}
		out = append(out, e)
	}
	evict := inlineBytes(&meta.Chunk{Extents: out}) > inlineBudget/2
	for i, e := range out {
		if e.Kind == meta.KindInline && (evict || int(e.Len) > t.fs.cfg.InlineMax) {
			p, err := t.putSlice(ctx, ino, idx*meta.ChunkSize+uint64(e.Off), e.Data)
			if err != nil {
				return err
			}
			out[i].SetPointer(p, 0)
		}
	}
	out = mergePointers(out)
	if len(out) > t.fs.defragAfter {
		var err error
		if out, err = t.defrag(ctx, ino, idx, out); err != nil {
			return err
		}
	}
	r.Extents = out
	r.Compacted = uint32(len(out))
	return nil
}

// mergePointers joins adjacent slice extents whose slices are adjacent in
// the same backing file into one extent over a combined pointer, so a
// file written sequentially in small pieces compacts to a few extents.
func mergePointers(vis []meta.Extent) []meta.Extent {
	out := vis[:0:0]
	for _, e := range vis {
		k := len(out) - 1
		if k >= 0 && e.Kind == meta.KindSlice && out[k].Kind == meta.KindSlice && out[k].End() == e.Off &&
			out[k].SliceOff+out[k].Len == out[k].PtrLen && e.SliceOff == 0 {
			if p, ok := slice.Combine(out[k].Pointer(), e.Pointer()); ok {
				sliceOff := out[k].SliceOff
				out[k].SetPointer(p, sliceOff)
				out[k].Len += e.Len
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

func inlineBytes(r *meta.Chunk) int {
	n := 0
	for _, e := range r.Extents {
		n += len(e.Data)
	}
	return n
}

// defrag reads a fragmented chunk's visible data and rewrites contiguous
// runs as slices of up to slice.MaxSize.
func (t *Txn) defrag(ctx context.Context, ino Ino, idx uint64, vis []meta.Extent) ([]meta.Extent, error) {
	var out []meta.Extent
	for i := 0; i < len(vis); {
		j, runEnd := i, vis[i].End()
		for j+1 < len(vis) && vis[j+1].Off == runEnd && runEnd-vis[i].Off+vis[j+1].Len <= slice.MaxSize {
			j++
			runEnd = vis[j].End()
		}
		if j == i {
			out = append(out, vis[i])
			i++
			continue
		}
		buf := make([]byte, runEnd-vis[i].Off)
		for _, e := range vis[i : j+1] {
			if err := t.fs.readPiece(ctx, e, buf[e.Off-vis[i].Off:e.End()-vis[i].Off]); err != nil {
				return nil, err
			}
		}
		p, err := t.putSlice(ctx, ino, idx*meta.ChunkSize+uint64(vis[i].Off), buf)
		if err != nil {
			return nil, err
		}
		e := meta.Extent{Off: vis[i].Off, Len: uint32(len(buf))}
		e.SetPointer(p, 0)
		out = append(out, e)
		i = j + 1
	}
	return out, nil
}

// truncate changes a file's size: shrinking drops chunks past the end and
// clips the last one, so a later extension reads zeros.
func (t *Txn) truncate(ctx context.Context, ino Ino, n *meta.Inode, size uint64) error {
	if size < n.Size {
		last := size / meta.ChunkSize
		cut := uint32(size % meta.ChunkSize)
		first := last + 1
		if cut == 0 {
			first = last
		}
		if err := t.dropChunksFrom(ctx, ino, first); err != nil {
			return err
		}
		if cut != 0 {
			r, err := t.loadChunk(ctx, ino, last)
			if err != nil {
				return err
			}
			var kept []meta.Extent
			for _, e := range visible(r.Extents) {
				if e.Off < cut {
					kept = append(kept, trim(e, e.Off, min(e.End(), cut)))
				}
			}
			r.Extents, r.End = kept, min(r.End, cut)
			t.putChunk(ino, last, r)
		}
	}
	n.Size = size
	return nil
}

// dropChunksFrom deletes the chunks of ino with index >= first.
func (t *Txn) dropChunksFrom(ctx context.Context, ino Ino, first uint64) error {
	start := meta.ChunkKey(uint64(ino), first)
	end := kv.PrefixEnd(meta.ChunkPrefix(uint64(ino)))
	for {
		pairs, err := t.scanRaw(ctx, start, end, 1024)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			if err := t.deleteRaw(ctx, p.Key); err != nil {
				return err
			}
		}
		if len(pairs) < 1024 {
			break
		}
		start = append(slices.Clone(pairs[len(pairs)-1].Key), 0)
	}
	for id := range t.chunks {
		if id.ino == ino && id.idx >= first {
			delete(t.chunks, id)
		}
	}
	return nil
}

// chunkScanMin: pieces and punchRange find the chunks of a range of at
// least this many chunks with one range scan (which sees only chunks that
// exist, so a huge sparse range costs what it holds); shorter ranges get
// each chunk by key, which keeps their read sets to single keys.
const chunkScanMin = 16

// chunksIn returns, in order, the indexes of ino's chunks in [first, last]
// that may hold extents in this transaction's view. Chunks found by a scan
// are decoded into the transaction's cache on the way.
func (t *Txn) chunksIn(ctx context.Context, ino Ino, first, last uint64) ([]uint64, error) {
	if last < first {
		return nil, nil
	}
	if last-first < chunkScanMin {
		idxs := make([]uint64, 0, last-first+1)
		for idx := first; idx <= last; idx++ {
			idxs = append(idxs, idx)
		}
		return idxs, nil
	}
	found := map[uint64]bool{}
	start, end := meta.ChunkKey(uint64(ino), first), meta.ChunkKey(uint64(ino), last+1)
	for {
		pairs, err := t.scanRaw(ctx, start, end, 1024)
		if err != nil {
			return nil, err
		}
		for _, p := range pairs {
			_, idx, err := meta.ParseChunkKey(p.Key)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
			}
			found[idx] = true
			if _, ok := t.chunks[chunkID{ino, idx}]; !ok {
				if _, err := t.cacheChunk(ino, idx, p.Key, p.Value, true); err != nil {
					return nil, err
				}
			}
		}
		if len(pairs) < 1024 {
			break
		}
		start = append(slices.Clone(pairs[len(pairs)-1].Key), 0)
	}
	for id, c := range t.chunks { // this transaction's own chunks
		if id.ino == ino && id.idx >= first && id.idx <= last {
			found[id.idx] = c.rec != nil
		}
	}
	idxs := make([]uint64, 0, len(found))
	for idx, ok := range found {
		if ok {
			idxs = append(idxs, idx)
		}
	}
	slices.Sort(idxs)
	return idxs, nil
}

// punchRange makes file bytes [off, off+n) read as zeros: chunks wholly
// inside the range are deleted, the (at most two) partly covered ones get a
// hole and are compacted, so the punched slices lose their references. It
// costs what the range holds, not its length.
func (t *Txn) punchRange(ctx context.Context, ino Ino, off, n uint64) error {
	if n == 0 {
		return nil
	}
	end := off + n
	idxs, err := t.chunksIn(ctx, ino, off/meta.ChunkSize, (end-1)/meta.ChunkSize)
	if err != nil {
		return err
	}
	for _, idx := range idxs {
		r, err := t.loadChunk(ctx, ino, idx)
		if err != nil {
			return err
		}
		if len(r.Extents) == 0 {
			continue
		}
		base := idx * meta.ChunkSize
		lo, hi := max(off, base)-base, min(end, base+meta.ChunkSize)-base
		if lo == 0 && hi == meta.ChunkSize {
			r.Extents = nil
		} else {
			hole := meta.Extent{Off: uint32(lo), Len: uint32(hi - lo), Kind: meta.KindHole}
			r.Extents = visible(append(r.Extents, hole))
		}
		r.Compacted = uint32(len(r.Extents))
		t.putChunk(ino, idx, r)
	}
	return nil
}
