package fs

import (
	"context"
	"errors"
	"fmt"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// upgradeBatch is the number of layout-1 region records converted per
// transaction, so that converting a large data directory never builds one
// huge transaction. A variable only so that tests can make it small.
var upgradeBatch = 64

// upgradeLayout brings the store to meta.LayoutChunks. A store without a
// layout record is layout 1 (or empty): its region records are converted
// into chunk records, upgradeBatch per transaction, each transaction
// deleting the regions it converted, so an interrupted upgrade resumes at
// the next Open; the layout record is written once none is left. A store
// of a later layout is refused.
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
	case layout == meta.LayoutChunks:
		return nil
	case layout != meta.LayoutRegions:
		return fmt.Errorf("%w: data layout %d is newer than this engine's (%d)", ErrNotSupported, layout, meta.LayoutChunks)
	}
	converted := 0
	for {
		var n int
		err := f.Do(ctx, RootCred, func(t *Txn) error {
			return t.internal(ctx, "upgrade-layout", func(ctx context.Context) (any, error) {
				var err error
				n, err = t.convertRegions(ctx, upgradeBatch)
				if err == nil && n == 0 {
					err = t.setRaw(ctx, meta.MiscKey(meta.LayoutKey), encodeUint64(meta.LayoutChunks))
				}
				return n, err
			})
		})
		if err != nil {
			return fmt.Errorf("upgrading the data layout: %w", err)
		}
		if n == 0 {
			break
		}
		converted += n
	}
	if converted > 0 {
		f.log.Info("converted data layout", "from", meta.LayoutRegions, "to", meta.LayoutChunks, "regions", converted)
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
		for cidx, c := range regionToChunks(idx, &r) {
			t.putChunk(Ino(ino), cidx, c)
		}
		if err := t.deleteRaw(ctx, p.Key); err != nil {
			return 0, err
		}
	}
	return len(pairs), nil
}

// regionToChunks splits layout-1 region idx into the chunk records (by
// chunk index) that read the same: its visible extents, cut at chunk
// boundaries. Holes are dropped, as absent chunks and gaps read as zeros.
func regionToChunks(idx uint64, r *meta.Region) map[uint64]*meta.Chunk {
	out := map[uint64]*meta.Chunk{}
	for _, e := range visible(r.Extents) {
		for _, p := range splitPiece(idx*meta.RegionSize+uint64(e.Off), e) {
			cidx := p.Off / meta.ChunkSize
			c := out[cidx]
			if c == nil {
				c = &meta.Chunk{}
				out[cidx] = c
			}
			x := p.Ext
			x.Off = uint32(p.Off % meta.ChunkSize)
			c.Extents = append(c.Extents, x)
			c.End = max(c.End, x.End())
		}
	}
	for _, c := range out {
		c.Compacted = uint32(len(c.Extents))
	}
	return out
}
