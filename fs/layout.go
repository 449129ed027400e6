package fs

import (
	"context"
	"errors"
	"fmt"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// upgradeBatch is the number of old-layout records (layout-1 regions,
// layout-2 chunks) converted per transaction, so that converting a large
// data directory never builds one huge transaction. A variable only so
// that tests can make it small.
var upgradeBatch = 64

// upgradeProgressKey names the misc record of a layout 2 -> 3 conversion
// in progress (spanProgress).
const upgradeProgressKey = "layout3-progress"

// spanProgress is where an interrupted layout 2 -> 3 conversion resumes:
// the file whose chunks it was converting, the first offset its next
// record starts at, and the storage its records written so far reference.
type spanProgress struct {
	_    struct{} `cbor:",toarray"`
	Ino  uint64
	Next uint64
	Used uint64
}

// upgradeLayout brings the store to meta.LayoutSpans. A store without a
// layout record is layout 1 (or empty): its region records are converted
// into chunk records (layout 2), which are then converted into span
// records (layout 3). Each step converts upgradeBatch records per
// transaction and deletes them in it, so an interrupted upgrade resumes
// at the next Open; the layout record is written when a step is done. A
// store of a later layout is refused.
func (f *FS) upgradeLayout(ctx context.Context) error {
	var layout uint64
	err := f.View(ctx, RootCred, func(t *Txn) error {
		b, err := t.getRaw(ctx, meta.MiscKey(meta.LayoutKey))
		switch {
		case errors.Is(err, ErrNotExist):
			layout = meta.LayoutRegions
			return nil
		case err != nil:
			return err
		}
		layout, err = decodeUint64(b)
		return err
	})
	switch {
	case err != nil:
		return err
	case layout == meta.LayoutCurrent:
		return nil
	case layout != meta.LayoutRegions && layout != meta.LayoutChunks && layout != meta.LayoutSpans:
		return fmt.Errorf("%w: data layout %d is newer than this engine's (%d)", ErrNotSupported, layout, meta.LayoutCurrent)
	}
	steps := []struct {
		from, to uint64
		convert  func(t *Txn, ctx context.Context) (int, error)
	}{
		{meta.LayoutRegions, meta.LayoutChunks, func(t *Txn, ctx context.Context) (int, error) { return t.convertRegions(ctx, upgradeBatch) }},
		{meta.LayoutChunks, meta.LayoutSpans, func(t *Txn, ctx context.Context) (int, error) { return t.convertChunks(ctx, upgradeBatch) }},
		// Nothing to convert: layout-3 inodes decode with Spans 0
		// (unknown), and deleting such a file scans for its records.
		{meta.LayoutSpans, meta.LayoutSpanCount, func(t *Txn, ctx context.Context) (int, error) { return 0, nil }},
	}
	for _, step := range steps {
		if layout != step.from {
			continue
		}
		converted := 0
		for {
			var n int
			err := f.Do(ctx, RootCred, func(t *Txn) error {
				return t.internal(ctx, "upgrade-layout", func(ctx context.Context) (any, error) {
					var err error
					n, err = step.convert(t, ctx)
					if err == nil && n == 0 {
						err = t.setRaw(ctx, meta.MiscKey(meta.LayoutKey), encodeUint64(step.to))
					}
					return n, err
				})
			})
			if err != nil {
				return fmt.Errorf("upgrading the data layout from %d to %d: %w", step.from, step.to, err)
			}
			if n == 0 {
				break
			}
			converted += n
		}
		if converted > 0 {
			f.log.Info("converted data layout", "from", step.from, "to", step.to, "records", converted)
		}
		layout = step.to
	}
	return nil
}

// convertRegions converts up to limit layout-1 region records into chunk
// records and deletes them; it returns how many it converted.
func (t *Txn) convertRegions(ctx context.Context, limit int) (int, error) {
	prefix := meta.AllRegionsPrefix()
	pairs, err := t.scanRaw(ctx, prefix, kv.PrefixEnd(prefix), limit)
	if err != nil {
		return 0, err
	}
	for _, p := range pairs {
		ino, idx, err := meta.ParseRegionKey(p.Key)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		var r meta.Region
		if err := meta.Unmarshal(p.Value, &r); err != nil {
			return 0, fmt.Errorf("%w: inode %d region %d: %v", ErrCorrupt, ino, idx, err)
		}
		for cidx, c := range extentsToChunks(idx*meta.RegionSize, visible(r.Extents)) {
			b, err := meta.Marshal(c)
			if err != nil {
				return 0, fmt.Errorf("%w: encoding: %v", ErrCorrupt, err)
			}
			if err := t.setRaw(ctx, meta.ChunkKey(ino, cidx), b); err != nil {
				return 0, err
			}
		}
		if err := t.deleteRaw(ctx, p.Key); err != nil {
			return 0, err
		}
	}
	return len(pairs), nil
}

// extentsToChunks cuts visible extents at offsets relative to base into
// the layout-2 chunk records (by chunk index) that read the same.
func extentsToChunks(base uint64, vis []meta.Extent) map[uint64]*meta.Chunk {
	out := map[uint64]*meta.Chunk{}
	for _, e := range vis {
		for done := uint64(0); done < uint64(e.Len); {
			off := base + e.Off + done
			k := min(uint64(e.Len)-done, meta.ChunkSize-off%meta.ChunkSize)
			x := trim(e, e.Off+done, e.Off+done+k)
			x.Off = off % meta.ChunkSize
			cidx := off / meta.ChunkSize
			c := out[cidx]
			if c == nil {
				c = &meta.Chunk{}
				out[cidx] = c
			}
			c.Extents = append(c.Extents, x)
			c.End = max(c.End, uint32(x.End()))
			done += k
		}
	}
	for _, c := range out {
		c.Compacted = uint32(len(c.Extents))
	}
	return out
}

// convertChunks converts up to limit layout-2 chunk records into span
// records and deletes them; it returns how many it converted. Chunks are
// taken in key order (by file, then offset): a file's visible extents are
// joined where one slice was cut at chunk boundaries and packed into
// records of spanMax/2 extents; the last record of a file is open. A file
// whose chunks do not all fit in this batch continues in the next one
// from spanProgress; when a file is done its inode gets its Used.
func (t *Txn) convertChunks(ctx context.Context, limit int) (int, error) {
	prefix := meta.AllChunksPrefix()
	pairs, err := t.scanRaw(ctx, prefix, kv.PrefixEnd(prefix), limit)
	if err != nil {
		return 0, err
	}
	var prog spanProgress
	progKey := meta.MiscKey(upgradeProgressKey)
	switch b, err := t.getRaw(ctx, progKey); {
	case errors.Is(err, ErrNotExist):
	case err != nil:
		return 0, err
	default:
		if err := meta.Unmarshal(b, &prog); err != nil {
			return 0, fmt.Errorf("%w: layout upgrade progress: %v", ErrCorrupt, err)
		}
	}
	// finish ends a file whose chunks an earlier batch converted last:
	// its records end with an empty open one, and its inode gets Used.
	finish := func() error {
		if prog.Ino == 0 {
			return nil
		}
		var acc meta.Inode
		if err := t.writeSpan(ctx, Ino(prog.Ino), &acc, &span{start: prog.Next, last: meta.SpanOpen}); err != nil {
			return err
		}
		prog.Used += acc.Used
		return t.setUsed(ctx, Ino(prog.Ino), prog.Used)
	}
	if len(pairs) == 0 {
		if err := finish(); err != nil {
			return 0, err
		}
		return 0, t.deleteRaw(ctx, progKey)
	}
	for i := 0; i < len(pairs); {
		ino, _, err := meta.ParseChunkKey(pairs[i].Key)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if prog.Ino != ino {
			if err := finish(); err != nil {
				return 0, err
			}
			prog = spanProgress{Ino: ino}
		}
		var exts []meta.Extent // absolute file offsets
		var endOff uint64      // just past the last chunk converted
		j := i
		for ; j < len(pairs); j++ {
			cino, idx, err := meta.ParseChunkKey(pairs[j].Key)
			if err != nil {
				return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
			}
			if cino != ino {
				break
			}
			var c meta.Chunk
			if err := meta.Unmarshal(pairs[j].Value, &c); err != nil {
				return 0, fmt.Errorf("%w: inode %d chunk %d: %v", ErrCorrupt, ino, idx, err)
			}
			for _, e := range visible(c.Extents) {
				e.Off += idx * meta.ChunkSize
				exts = append(exts, e)
			}
			endOff = (idx + 1) * meta.ChunkSize
			if err := t.deleteRaw(ctx, pairs[j].Key); err != nil {
				return 0, err
			}
		}
		// The file is done unless the batch ended inside it.
		done := j < len(pairs) || len(pairs) < limit
		exts = mergePointers(exts)
		per := max(t.fs.spanMax/2, 1)
		for k := 0; k < len(exts) || (done && k == 0 && prog.Next > 0); k += per {
			group := exts[k:min(k+per, len(exts))]
			s := &span{start: prog.Next, last: endOff - 1}
			if k > 0 {
				s.start = group[0].Off
			}
			if k+per < len(exts) {
				s.last = exts[k+per].Off - 1
			} else if done {
				s.last = meta.SpanOpen
			}
			exts := make([]meta.Extent, 0, len(group))
			for _, e := range group {
				e.Off -= s.start
				exts = append(exts, e)
			}
			s.setCompacted(exts)
			var acc meta.Inode
			if err := t.writeSpan(ctx, Ino(ino), &acc, s); err != nil {
				return 0, err
			}
			prog.Used += acc.Used
		}
		prog.Next = endOff
		if done {
			if err := t.setUsed(ctx, Ino(ino), prog.Used); err != nil {
				return 0, err
			}
			prog = spanProgress{}
		}
		i = j
	}
	b, err := meta.Marshal(&prog)
	if err != nil {
		return 0, fmt.Errorf("%w: encoding: %v", ErrCorrupt, err)
	}
	return len(pairs), t.setRaw(ctx, progKey, b)
}

// setUsed sets the Used of inode ino (converted from layout 2).
func (t *Txn) setUsed(ctx context.Context, ino Ino, used uint64) error {
	n, err := t.loadInode(ctx, ino)
	switch {
	case errors.Is(err, ErrNotExist): // Check reports its records
		return nil
	case err != nil:
		return err
	}
	n.Used = used
	t.putInode(ino, n)
	return nil
}

// chunksOf returns the layout-2 chunk records a file's span records
// would be (for WriteLayout2ForTest).
func (t *Txn) chunksOf(ctx context.Context, ino Ino) (map[uint64]*meta.Chunk, error) {
	out := map[uint64]*meta.Chunk{}
	spans, err := t.spansIn(ctx, ino, 0, meta.SpanOpen)
	if err != nil {
		return nil, err
	}
	for _, s := range spans {
		for cidx, c := range extentsToChunks(s.start, s.data()) {
			if old := out[cidx]; old != nil {
				old.Extents = append(old.Extents, c.Extents...)
				old.End = max(old.End, c.End)
				old.Compacted = uint32(len(old.Extents))
				continue
			}
			out[cidx] = c
		}
	}
	return out, nil
}
