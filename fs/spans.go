package fs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// Span records (data layout 3, docs/engine.md "Files: span records").
//
// A file's extents are held by span records: each covers file bytes
// [start, last] and holds up to spanMax visible extents at offsets
// relative to start. Records of a file never overlap; there may be gaps
// between them (zeros), and the record with the highest offsets is open
// (last = meta.SpanOpen), so every offset past the file's other records
// belongs to it. Keys sort by last offset: the record holding offset x is
// the first at or after meta.SpanSeekKey(ino, x), found by a forward scan
// of limit 1 whose read range [seek key, found key] makes a concurrent
// insertion, change or removal of a record there conflict (kv range read
// sets), so lookups stay serializable although the kv store has no
// reverse scan.
//
// Records are written through to the kv transaction as soon as an
// operation changes them (so later operations and scans of the same
// transaction see them) and offered to the decode cache.

// span is one span record as loaded by an operation: a private copy that
// the operation may change before storeSpans writes it back.
type span struct {
	start, last uint64
	rec         meta.Span
	// vis is rec's list overlaid (sorted, non-overlapping; may hold
	// holes), kept up to date by add and setCompacted so that a write
	// does not recompute it from the whole list. Shared: never modified
	// in place.
	vis  []meta.Extent
	key  []byte // the key it was loaded from; nil: a new record
	used uint64 // spanUsed of the record as loaded (0 if new)
}

// add appends extent e (at record offsets) to the record.
func (s *span) add(e meta.Extent) {
	s.rec.Extents = append(s.rec.Extents, e)
	s.vis = overlay(s.vis, e)
}

// setCompacted replaces the record's list with compacted list exts.
func (s *span) setCompacted(exts []meta.Extent) {
	s.rec.Extents = exts
	s.rec.Compacted = uint32(len(exts))
	s.vis = slices.Clip(exts)
}

// data returns the record's visible extents with data (no holes).
func (s *span) data() []meta.Extent {
	for _, e := range s.vis {
		if e.Kind == meta.KindHole {
			return slices.DeleteFunc(slices.Clone(s.vis), func(e meta.Extent) bool { return e.Kind == meta.KindHole })
		}
	}
	return s.vis
}

// moveStart makes the record start at start (< s.start), shifting its
// extents.
func (s *span) moveStart(start uint64) {
	d := s.start - start
	for i := range s.rec.Extents {
		s.rec.Extents[i].Off += d
	}
	vis := make([]meta.Extent, len(s.vis))
	for i, e := range s.vis {
		e.Off += d
		vis[i] = e
	}
	s.vis, s.start = vis, start
}

// spanValue is what the decode cache holds for a span record: the
// decoded value, its overlaid list and spanUsed (shared, never modified).
type spanValue struct {
	rec  *meta.Span
	vis  []meta.Extent
	used uint64
}

// decodeSpan decodes span record (key, b), through the decode cache.
func (t *Txn) decodeSpan(key, b []byte) (*span, error) {
	ino, start, last, err := meta.ParseSpanKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	var v *spanValue
	if c, ok := t.fs.decoded.get(key, b); ok {
		v = c.(*spanValue)
	} else {
		_, _, _, rec, err := meta.UnmarshalSpan(key, b)
		if err != nil {
			return nil, fmt.Errorf("%w: inode %d span [%d, %d]: %v", ErrCorrupt, ino, start, last, err)
		}
		vis := visible(rec.Extents)
		v = &spanValue{rec: rec, vis: vis, used: usedOf(vis)}
		t.fs.decoded.put(key, b, v)
	}
	t.fs.hints.add(Ino(ino), start, last)
	return &span{start: start, last: last, key: key, vis: slices.Clip(v.vis),
		rec: meta.Span{Extents: slices.Clone(v.rec.Extents), Compacted: v.rec.Compacted}, used: v.used}, nil
}

// spansIn returns, in order, ino's span records overlapping file bytes
// [off, end) (end > off) followed by the first record after them, if any.
func (t *Txn) spansIn(ctx context.Context, ino Ino, off, end uint64) ([]*span, error) {
	if _, ok := t.fresh[ino]; ok {
		return nil, nil // created by this execution, no record written yet
	}
	var out []*span
	start := meta.SpanSeekKey(uint64(ino), off)
	stop := kv.PrefixEnd(meta.SpanPrefix(uint64(ino)))
	limit := 1 // most operations touch one record: keep the read range tight
	if st, la, ok := t.fs.hints.find(ino, off); ok {
		key := meta.SpanKey(uint64(ino), st, la)
		b, err := t.getRaw(ctx, key)
		switch {
		case err == nil:
			s, err := t.decodeSpan(key, b)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			if s.last >= end-1 {
				return out, nil
			}
			start, limit = append(key, 0), 64
		case errors.Is(err, ErrNotExist):
			t.fs.hints.remove(ino, st, la)
		default:
			return nil, err
		}
	}
	for {
		pairs, err := t.scanRaw(ctx, start, stop, limit)
		if err != nil {
			return nil, err
		}
		for _, p := range pairs {
			s, err := t.decodeSpan(p.Key, p.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			if s.last >= end-1 || s.start >= end {
				return out, nil
			}
		}
		if len(pairs) < limit {
			return out, nil
		}
		start = append(slices.Clone(pairs[len(pairs)-1].Key), 0)
		limit = 64
	}
}

// spanUsed is the storage a record's visible data extents reference, each
// rounded up to 4 KiB (holes and overwritten extents do not count).
func spanUsed(exts []meta.Extent) uint64 { return usedOf(visible(exts)) }

// usedOf is spanUsed of an overlaid list (holes do not count).
func usedOf(vis []meta.Extent) uint64 {
	var used uint64
	for _, e := range vis {
		if e.Kind != meta.KindHole {
			used += (uint64(e.Len) + 4095) &^ 4095
		}
	}
	return used
}

// storeSpans finishes the records an operation changed (in ascending
// order) and writes them back, keeping n.Used up to date: a list grown
// long is compacted; a record of more than spanMax visible extents
// (2*spanMax for the open record) is compacted and split (or
// defragmented, see defragBelow); a closed record left empty is deleted;
// with tryMerge, records left with few extents are merged with the next
// record. The caller stores n.
func (t *Txn) storeSpans(ctx context.Context, ino Ino, n *meta.Inode, spans []*span, tryMerge bool) error {
	var small []*span
	for _, s := range spans {
		r := &s.rec
		limit := t.fs.spanMax
		if s.last == meta.SpanOpen {
			limit = 2 * t.fs.spanMax
		}
		if len(r.Extents) > max(t.fs.compactAfter, 2*int(r.Compacted)) || inlineBytes(r.Extents) > inlineBudget ||
			(len(s.data()) > limit && len(r.Extents) != int(r.Compacted)) {
			if err := t.compact(ctx, ino, s); err != nil {
				return err
			}
		}
		if vis := r.Extents; len(vis) == int(r.Compacted) && len(vis) > limit &&
			(vis[len(vis)-1].End()-vis[0].Off)/uint64(len(vis)) < defragBelow {
			if err := t.defrag(ctx, ino, s); err != nil {
				return err
			}
		}
		if len(r.Extents) == int(r.Compacted) && len(r.Extents) > limit {
			if err := t.splitSpan(ctx, n, ino, s); err != nil {
				return err
			}
			continue
		}
		if len(s.data()) == 0 && (s.last != meta.SpanOpen || s.start == 0) {
			if err := t.dropSpan(ctx, n, s); err != nil {
				return err
			}
			continue
		}
		if err := t.writeSpan(ctx, ino, n, s); err != nil {
			return err
		}
		if tryMerge && s.last != meta.SpanOpen && len(s.data()) <= t.fs.spanMax/4 {
			small = append(small, s)
		}
	}
	// Highest first: a merge deletes only records after the one merged.
	for i := len(small) - 1; i >= 0; i-- {
		if err := t.mergeNext(ctx, ino, n, small[i]); err != nil {
			return err
		}
	}
	return nil
}

// writeSpan writes s under the key of its current bounds (deleting the
// key it was loaded from if that differs) and accounts its storage in n.
func (t *Txn) writeSpan(ctx context.Context, ino Ino, n *meta.Inode, s *span) error {
	key := meta.SpanKey(uint64(ino), s.start, s.last)
	if s.key != nil && string(s.key) != string(key) {
		if err := t.dropSpan(ctx, n, s); err != nil {
			return err
		}
	}
	stored := s.key != nil // under key: rewritten, not added
	rec := &meta.Span{Extents: s.rec.Extents, Compacted: s.rec.Compacted}
	b, err := meta.Marshal(rec)
	if err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrCorrupt, err)
	}
	delete(t.fresh, ino)
	if err := t.setRaw(ctx, key, b); err != nil {
		return err
	}
	vis := slices.Clip(s.vis)
	used := usedOf(vis)
	t.fs.decoded.put(key, b, &spanValue{rec: rec, vis: vis, used: used})
	n.Used = n.Used - s.used + used
	if !stored {
		addSpans(n, 1)
	}
	if s.last == meta.SpanOpen {
		n.OpenStart = s.start
	}
	s.key, s.used = key, used
	t.fs.hints.add(ino, s.start, s.last)
	s.rec = meta.Span{Extents: slices.Clone(rec.Extents), Compacted: rec.Compacted}
	return nil
}

// dropSpan deletes record s (if stored) and its storage from n.Used.
func (t *Txn) dropSpan(ctx context.Context, n *meta.Inode, s *span) error {
	if s.key == nil {
		return nil
	}
	if err := t.deleteRaw(ctx, s.key); err != nil {
		return err
	}
	if ino, start, last, err := meta.ParseSpanKey(s.key); err == nil {
		t.fs.hints.remove(Ino(ino), start, last)
	}
	n.Used -= s.used
	addSpans(n, -1)
	s.key, s.used = nil, 0
	return nil
}

// addSpans adds d to the count of span records n.Spans keeps, unless the
// count is unknown (0). A count that would drop below zero (a bug; Check
// reports a wrong count) becomes unknown, so that deleting the file scans.
func addSpans(n *meta.Inode, d int) {
	if n.Spans == 0 {
		return
	}
	if c := int64(n.Spans) + int64(d); c >= 1 {
		n.Spans = uint64(c)
	} else {
		n.Spans = 0
	}
}

// splitSpan writes compacted record s as records of spanMax/2 extents,
// each starting at its first extent (the first keeps s's start, the last
// its end). The open record, which grows at its end when a file is
// written sequentially or pasted onto, is split past 2*spanMax extents
// into records of 2*spanMax (and the rest): a sequential or cloned file
// gets few records, and a record that later takes writes is split again
// by them (it holds more than spanMax).
func (t *Txn) splitSpan(ctx context.Context, n *meta.Inode, ino Ino, s *span) error {
	vis := s.rec.Extents
	per := max(t.fs.spanMax/2, 1)
	if s.last == meta.SpanOpen {
		per = max(2*t.fs.spanMax, 1)
	}
	if err := t.dropSpan(ctx, n, s); err != nil {
		return err
	}
	for i := 0; i < len(vis); i += per {
		group := vis[i:min(i+per, len(vis))]
		part := &span{start: s.start, last: s.last}
		if i > 0 {
			part.start = s.start + group[0].Off
		}
		if i+per < len(vis) {
			part.last = s.start + vis[i+per].Off - 1
		}
		d := part.start - s.start
		exts := make([]meta.Extent, len(group))
		for k, e := range group {
			e.Off -= d
			exts[k] = e
		}
		part.setCompacted(exts)
		if err := t.writeSpan(ctx, ino, n, part); err != nil {
			return err
		}
	}
	return nil
}

// mergeNext merges stored record s with the next record of the file when
// both fit in spanMax/2 extents (the gap between them, if any, becomes
// part of the merged record and reads as zeros).
func (t *Txn) mergeNext(ctx context.Context, ino Ino, n *meta.Inode, s *span) error {
	next, err := t.spansIn(ctx, ino, s.last+1, s.last+2)
	if err != nil || len(next) == 0 {
		return err
	}
	nx := next[0]
	a, b := s.data(), nx.data()
	if len(a)+len(b) > t.fs.spanMax/2 {
		return nil
	}
	m := &span{start: s.start, last: nx.last}
	d := nx.start - s.start
	exts := slices.Clone(a)
	for _, e := range b {
		e.Off += d
		exts = append(exts, e)
	}
	m.setCompacted(mergePointers(exts))
	if err := t.dropSpan(ctx, n, s); err != nil {
		return err
	}
	if err := t.dropSpan(ctx, n, nx); err != nil {
		return err
	}
	return t.writeSpan(ctx, ino, n, m)
}

// deleteRange deletes the span records of ino with keys in [from, to),
// subtracting their storage from n.Used.
func (t *Txn) deleteRange(ctx context.Context, ino Ino, n *meta.Inode, from, to []byte) error {
	for {
		pairs, err := t.scanRaw(ctx, from, to, 1024)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			s, err := t.decodeSpan(p.Key, p.Value)
			if err != nil {
				return err
			}
			t.garbage += s.used
			if err := t.dropSpan(ctx, n, s); err != nil {
				return err
			}
		}
		if len(pairs) < 1024 {
			return nil
		}
		from = append(slices.Clone(pairs[len(pairs)-1].Key), 0)
	}
}

// deleteSpans deletes every span record of inode ino (n: its record, nil
// if unknown); afterwards it has none in this execution (Txn.fresh). The
// inode record says which records there are when it counts them (layout
// 4, meta.Inode.Spans): none, or only the open one, deleted by key
// without a scan (ENGINE-REQUESTS 17); otherwise the prefix is scanned. A
// concurrent change of the file's records rewrites the inode record
// (their count, open start or Used), which the caller read: one of the
// two commits conflicts, as it would over the scanned range.
func (t *Txn) deleteSpans(ctx context.Context, ino Ino, n *meta.Inode) error {
	switch {
	case n != nil && n.Spans == 1:
	case n != nil && n.Spans == 2:
		key := meta.SpanKey(uint64(ino), n.OpenStart, meta.SpanOpen)
		if err := t.deleteRaw(ctx, key); err != nil {
			return err
		}
		t.fs.hints.remove(ino, n.OpenStart, meta.SpanOpen)
	default:
		if err := t.deletePrefix(ctx, meta.SpanPrefix(uint64(ino))); err != nil {
			return err
		}
	}
	t.markFresh(ino)
	return nil
}

// deletePrefix deletes every key under prefix, without decoding.
func (t *Txn) deletePrefix(ctx context.Context, prefix []byte) error {
	for {
		pairs, err := t.scanRaw(ctx, prefix, kv.PrefixEnd(prefix), 1024)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			if err := t.deleteRaw(ctx, p.Key); err != nil {
				return err
			}
		}
		if len(pairs) < 1024 {
			return nil
		}
	}
}

// overlay places e over the sorted, non-overlapping extents in vis (newest
// wins) and returns the new list; vis is not modified.
func overlay(vis []meta.Extent, e meta.Extent) []meta.Extent {
	if n := len(vis); n == 0 || vis[n-1].End() <= e.Off {
		return append(slices.Clip(vis), e) // the common case: past everything seen
	}
	// the first extent ending after e.Off, and the first starting at or after e.End()
	i, _ := slices.BinarySearchFunc(vis, e.Off, func(x meta.Extent, off uint64) int { return cmp.Compare(x.End(), off+1) })
	j, _ := slices.BinarySearchFunc(vis, e.End(), func(x meta.Extent, end uint64) int { return cmp.Compare(x.Off, end) })
	out := make([]meta.Extent, 0, len(vis)+2)
	out = append(out, vis[:i]...)
	if i < j && vis[i].Off < e.Off {
		out = append(out, trim(vis[i], vis[i].Off, e.Off))
	}
	out = append(out, e)
	if i < j && vis[j-1].End() > e.End() {
		out = append(out, trim(vis[j-1], e.End(), vis[j-1].End()))
	}
	return append(out, vis[j:]...)
}
