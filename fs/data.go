package fs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Extent list maintenance thresholds.
const (
	// compactAfter: a span record's list longer than this is compacted
	// (WTF §2.8): overwritten and hidden extents are dropped.
	compactAfter = 32
	// spanMax: a span record whose compacted list is longer than this is
	// split into records of spanMax/2 extents (or, when its extents are
	// tiny, its data is rewritten into a few large slices: defrag); a
	// record of at most spanMax/4 extents is merged with the next one
	// when both fit in spanMax/2.
	spanMax = 32
	// defragBelow: a record split for length is defragmented instead when
	// its extents average less than this many bytes of file space, so at
	// most spanMax*defragBelow bytes are read and rewritten.
	defragBelow = 1 << 10
	// maxInlineRun: adjacent inline extents are merged up to this size;
	// longer runs are moved into a slice.
	maxInlineRun = 16 << 10
	// inlineBudget bounds the inline bytes one span record holds, so a
	// record (rewritten on every write to it) stays small: past it,
	// compaction moves all inline data into slices.
	inlineBudget = 64 << 10
)

// trim restricts extent e to record offsets [from, to).
func trim(e meta.Extent, from, to uint64) meta.Extent {
	d := uint32(from - e.Off)
	e.Off, e.Len = from, uint32(to-from)
	switch e.Kind {
	case meta.KindSlice:
		e.SliceOff += d
	case meta.KindInline:
		e.Data = e.Data[d : d+e.Len]
	}
	return e
}

// cut removes record offsets [lo, hi) from the sorted, non-overlapping
// list vis.
func cut(vis []meta.Extent, lo, hi uint64) []meta.Extent {
	out := make([]meta.Extent, 0, len(vis)+1)
	for _, e := range vis {
		if e.End() <= lo || e.Off >= hi {
			out = append(out, e)
			continue
		}
		if e.Off < lo {
			out = append(out, trim(e, e.Off, lo))
		}
		if e.End() > hi {
			out = append(out, trim(e, hi, e.End()))
		}
	}
	return out
}

// visible returns the compacted form of a record's extent list: sorted,
// non-overlapping pieces with data, holes left out. The list is swept from
// its newest extent back, keeping the covered ranges sorted, so a long
// list costs O(n log n), not a pass over the result per extent.
func visible(exts []meta.Extent) []meta.Extent {
	sorted := true
	for i := range exts {
		if exts[i].Kind == meta.KindHole || (i > 0 && exts[i].Off < exts[i-1].End()) {
			sorted = false
			break
		}
	}
	if sorted { // already compacted: the common case
		return slices.Clone(exts)
	}
	type iv struct{ lo, hi uint64 }
	var covered []iv // sorted, disjoint, not touching
	var out []meta.Extent
	for i := len(exts) - 1; i >= 0; i-- {
		e := exts[i]
		lo, hi := e.Off, e.End()
		// first covered range ending at or after lo (touching counts)
		a, _ := slices.BinarySearchFunc(covered, lo, func(c iv, x uint64) int { return cmp.Compare(c.hi, x) })
		cur, b := lo, a
		for ; b < len(covered) && covered[b].lo <= hi; b++ {
			if e.Kind != meta.KindHole && covered[b].lo > cur {
				out = append(out, trim(e, cur, covered[b].lo))
			}
			cur = max(cur, covered[b].hi)
		}
		if e.Kind != meta.KindHole && cur < hi {
			out = append(out, trim(e, cur, hi))
		}
		merged := iv{lo, hi}
		if a < b {
			merged.lo, merged.hi = min(lo, covered[a].lo), max(hi, covered[b-1].hi)
		}
		covered = slices.Replace(covered, a, b, merged)
	}
	slices.SortFunc(out, func(x, y meta.Extent) int { return cmp.Compare(x.Off, y.Off) })
	return out
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
	spans, err := t.spansIn(ctx, ino, off, end)
	if err != nil {
		return nil, err
	}
	for _, s := range spans {
		if s.start >= end {
			break
		}
		lo := max(off, s.start) - s.start
		hi := end - s.start
		for _, e := range s.data() {
			if e.End() <= lo || e.Off >= hi {
				continue
			}
			e = trim(e, max(e.Off, lo), min(e.End(), hi))
			out = append(out, filePiece{Off: s.start + e.Off, Ext: e})
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
		return storeErr("slice store", err)
	}
}

// storeData turns data destined for file offset off into extents in file
// coordinates, split at region boundaries and slice.MaxSize; pieces larger
// than the inline threshold are written to the slice store now. A non-nil
// pl is the payload of all of data (Txn.WritePayload): a piece that is all
// of data is put as it (slice.PutPayload, which the caller's buffer may be
// written from in the background); split pieces are put as usual.
func (t *Txn) storeData(ctx context.Context, ino Ino, off uint64, data []byte, pl *slice.Payload) ([]filePiece, error) {
	if err := t.fs.space.admit(ctx, uint64(len(data))); err != nil {
		return nil, err
	}
	var out []filePiece
	whole := len(data)
	for len(data) > 0 {
		room := meta.RegionSize - off%meta.RegionSize
		n := min(uint64(len(data)), room, slice.MaxSize)
		e := meta.Extent{Len: uint32(n)}
		if int(n) <= t.fs.cfg.InlineMax && t.inlineSmall() {
			e.Kind, e.Data = meta.KindInline, slices.Clone(data[:n])
		} else {
			var p slice.Pointer
			var err error
			if pl != nil && n == uint64(whole) {
				p, err = t.putPayload(ctx, ino, off, *pl)
			} else {
				p, err = t.putSlice(ctx, ino, off, data[:n])
			}
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
// span record of up to inlineBudget bytes (measured: 4 KiB NoSync writes
// p50 104 µs, p99 9.7 ms inline; see docs/engine.md).
//
// With TxnOptions.SyncFollows the Sync comes right after the commit, so
// small writes stay inline: the slice data would cost that Sync a flush.
func (t *Txn) noFlushSlices() bool { return t.opts.NoSync && t.fs.cfg.SlicesOrdered }

// inlineSmall reports whether writes up to InlineMax are stored inline.
func (t *Txn) inlineSmall() bool { return !t.noFlushSlices() || t.opts.SyncFollows }

func (t *Txn) putSlice(ctx context.Context, ino Ino, off uint64, data []byte) (slice.Pointer, error) {
	p, err := t.fs.slices.Put(ctx, sliceHint(ino, off), data)
	return t.putDone(p, err)
}

// retainPayloads: WritePayload lets the slice store write the payload
// asynchronously from the caller's buffer (slice.WithLoan; the
// transaction's end waits for it). A variable for the A/B benchmark
// (BenchmarkOverwritePayload).
var retainPayloads = true

// putPayload is putSlice of a payload (WritePayload). With
// retainPayloads the store may write it in the background from the
// caller's buffer (a loan: the caller keeps the buffer until the
// transaction ends, which waits for the write, waitRetained). A caller
// that lends the payload itself (ctx has a slice.Loan) waits for its loan
// instead, and may let the write run past the transaction's end.
func (t *Txn) putPayload(ctx context.Context, ino Ino, off uint64, pl slice.Payload) (slice.Pointer, error) {
	if retainPayloads && !slice.Lent(ctx) {
		t.retained = true
		loan := slice.NewLoan(func() {})
		defer loan.Release()
		ctx = slice.WithLoan(ctx, loan)
	}
	p, err := slice.PutPayload(ctx, t.fs.slices, sliceHint(ino, off), pl)
	return t.putDone(p, err)
}

// sliceHint is the slice store hint of data at off in ino: one per
// region of a file.
func sliceHint(ino Ino, off uint64) uint64 {
	return uint64(ino)*0x9e3779b97f4a7c15 + off/meta.RegionSize
}

// putDone records a put's pointer among the transaction's written slices.
func (t *Txn) putDone(p slice.Pointer, err error) (slice.Pointer, error) {
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
	return t.write(ctx, ino, off, data, nil)
}

// WritePayload is Write of p.Data(), whose CRC32C the caller computed
// already (p.CRC(), see slice.Payload; or which the store hashes, for a
// slice.PayloadOf): when the data goes to the slice store as one slice,
// the store does not hash it again. The caller must
// keep p.Data() unchanged until the transaction ends (Commit or Abort
// returns; with FS.Do, until Do returns): the store may write it
// asynchronously from there (slice.WithLoan), overlapping the
// device write with the rest of the transaction. A caller whose ctx
// carries its own slice.Loan keeps p.Data() until that loan is done
// instead: the write may then run past the commit (which pledges it,
// see Txn.settleSlices).
func (t *Txn) WritePayload(ctx context.Context, ino Ino, off uint64, p slice.Payload) error {
	return t.write(ctx, ino, off, p.Data(), &p)
}

// write is Write, of the payload pl (WritePayload) if pl is not nil.
func (t *Txn) write(ctx context.Context, ino Ino, off uint64, data []byte, pl *slice.Payload) error {
	if off+uint64(len(data)) > MaxFileSize || off+uint64(len(data)) < off {
		return ErrFileTooBig
	}
	if t.done {
		return ErrTxnDone
	}
	ps, err := t.storeData(ctx, ino, off, data, pl)
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
	// Pieces relative to offset 0, placed once the offset is known.
	rel, err := t.storeData(ctx, ino, 0, data, nil)
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

// placePieces overlays file pieces (in ascending order) on the span
// records of inode n, growing its size to cover them, and compacts, splits
// and merges the records it changed. Only the records the pieces touch
// are loaded and re-encoded: a piece in a gap between records extends
// the next record down, and a file without records gets one open record.
func (t *Txn) placePieces(ctx context.Context, ino Ino, n *meta.Inode, ps []filePiece) error {
	if len(ps) == 0 {
		return nil
	}
	lo, hi := ps[0].Off, ps[0].Off+uint64(ps[0].Ext.Len)
	for _, p := range ps[1:] {
		lo, hi = min(lo, p.Off), max(hi, p.Off+uint64(p.Ext.Len))
	}
	spans, err := t.spansIn(ctx, ino, lo, hi)
	if err != nil {
		return err
	}
	touched := make([]bool, len(spans))
	j := 0
	for i, whole := range ps {
		if i > 0 && whole.Off < ps[i-1].Off {
			j = 0 // not in order (callers place ascending pieces)
		}
		for done := uint64(0); done < uint64(whole.Ext.Len); {
			a := whole.Off + done
			for j < len(spans) && spans[j].last < a {
				j++
			}
			if j == len(spans) { // no record at or past a: the file has none
				spans = append(spans, &span{start: a, last: meta.SpanOpen})
				touched = append(touched, false)
			}
			s := spans[j]
			if s.start > a { // a gap before s: extend s down
				s.moveStart(a)
			}
			k := min(uint64(whole.Ext.Len)-done, s.last-a+1)
			if s.last-a+1 == 0 { // the open record at 0: room 2^64
				k = uint64(whole.Ext.Len) - done
			}
			e := whole.Ext
			if k < uint64(e.Len) || done > 0 {
				e.Off = 0
				e = trim(e, done, done+k)
			}
			e.Off = a - s.start
			s.add(e)
			touched[j] = true
			if end := a + k; end > n.Size && e.Kind != meta.KindHole {
				n.Size = end
			}
			done += k
		}
	}
	var changed []*span
	for i, s := range spans {
		if touched[i] {
			changed = append(changed, s)
		}
	}
	return t.storeSpans(ctx, ino, n, changed, true)
}

// compact rewrites a record's list in compacted form (WTF §2.8): merges
// adjacent inline runs, moves long inline runs into slices and joins
// adjacent pointers.
func (t *Txn) compact(ctx context.Context, ino Ino, s *span) error {
	vis := s.data()
	t.garbage += sliceBytes(s.rec.Extents) - min(sliceBytes(s.rec.Extents), sliceBytes(vis))
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
	evict := inlineBytes(out) > inlineBudget/2
	for i, e := range out {
		if e.Kind == meta.KindInline && (evict || int(e.Len) > t.fs.cfg.InlineMax) {
			p, err := t.putSlice(ctx, ino, s.start+e.Off, e.Data)
			if err != nil {
				return err
			}
			out[i].SetPointer(p, 0)
		}
	}
	s.setCompacted(mergePointers(out))
	return nil
}

// mergePointers joins adjacent slice extents whose bytes are adjacent in
// the same backing file (two slices written one after the other, or two
// pieces of one slice) into one extent, so a file written sequentially in
// small pieces compacts to a few extents.
func mergePointers(vis []meta.Extent) []meta.Extent {
	out := vis[:0:0]
	for _, e := range vis {
		k := len(out) - 1
		if k >= 0 && e.Kind == meta.KindSlice && out[k].Kind == meta.KindSlice && out[k].End() == e.Off {
			if out[k].Pointer() == e.Pointer() && out[k].SliceOff+out[k].Len == e.SliceOff && uint64(out[k].Len)+uint64(e.Len) <= slice.MaxSize {
				out[k].Len += e.Len
				continue
			}
			if out[k].SliceOff+out[k].Len == out[k].PtrLen && e.SliceOff == 0 {
				if p, ok := slice.Combine(out[k].Pointer(), e.Pointer()); ok {
					sliceOff := out[k].SliceOff
					out[k].SetPointer(p, sliceOff)
					out[k].Len += e.Len
					continue
				}
			}
		}
		out = append(out, e)
	}
	return out
}

func inlineBytes(exts []meta.Extent) int {
	n := 0
	for _, e := range exts {
		n += len(e.Data)
	}
	return n
}

// defrag reads a fragmented record's visible data and rewrites contiguous
// runs as slices of up to slice.MaxSize.
func (t *Txn) defrag(ctx context.Context, ino Ino, s *span) error {
	vis := s.rec.Extents
	var out []meta.Extent
	for i := 0; i < len(vis); {
		j, runEnd := i, vis[i].End()
		for j+1 < len(vis) && vis[j+1].Off == runEnd && runEnd-vis[i].Off+uint64(vis[j+1].Len) <= slice.MaxSize {
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
				return err
			}
		}
		p, err := t.putSlice(ctx, ino, s.start+vis[i].Off, buf)
		if err != nil {
			return err
		}
		e := meta.Extent{Off: vis[i].Off, Len: uint32(len(buf))}
		e.SetPointer(p, 0)
		out = append(out, e)
		i = j + 1
	}
	s.setCompacted(out)
	return nil
}

// truncate changes a file's size: shrinking clips the record holding the
// new end (which becomes the open record) and deletes every record after
// it, so a later extension reads zeros.
func (t *Txn) truncate(ctx context.Context, ino Ino, n *meta.Inode, size uint64) error {
	if size < n.Size {
		if size == 0 {
			if err := t.deleteSpans(ctx, ino, n); err != nil {
				return err
			}
			t.garbage += n.Used
			n.Used = 0
			n.Spans = 1 // known again, even if it was not
			n.Size = 0
			return nil
		}
		spans, err := t.spansIn(ctx, ino, size, size+1)
		if err != nil {
			return err
		}
		if len(spans) > 0 {
			s := spans[0]
			// Every record after s goes.
			from := append(slices.Clone(s.key), 0)
			if err := t.deleteRange(ctx, ino, n, from, kv.PrefixEnd(meta.SpanPrefix(uint64(ino)))); err != nil {
				return err
			}
			if size > s.start {
				s.setCompacted(cut(s.data(), size-s.start, meta.SpanOpen))
			} else {
				s.setCompacted(nil)
			}
			s.last = meta.SpanOpen
			if err := t.storeSpans(ctx, ino, n, []*span{s}, true); err != nil {
				return err
			}
		}
	}
	n.Size = size
	return nil
}

// punchRange makes file bytes [off, off+n) read as zeros: records wholly
// inside the range are deleted, the (at most two) partly covered ones lose
// the range and are compacted, so the punched slices lose their
// references. It costs what the range holds, not its length.
func (t *Txn) punchRange(ctx context.Context, ino Ino, f *meta.Inode, off, n uint64) error {
	if n == 0 {
		return nil
	}
	end := off + n
	spans, err := t.spansIn(ctx, ino, off, end)
	if err != nil {
		return err
	}
	var changed []*span
	for _, s := range spans {
		if s.start >= end {
			break
		}
		if s.start >= off && s.last < end {
			if err := t.dropSpan(ctx, f, s); err != nil {
				return err
			}
			continue
		}
		lo, hi := max(off, s.start)-s.start, end-s.start
		s.setCompacted(cut(s.data(), lo, hi))
		changed = append(changed, s)
	}
	return t.storeSpans(ctx, ino, f, changed, true)
}
