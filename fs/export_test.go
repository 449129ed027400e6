package fs

import (
	"context"
	"slices"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// SetCompactionForTest lowers f's compaction thresholds (compactAfter,
// spanMax in data.go) so that short tests compact, split, merge and
// defragment span records often.
func SetCompactionForTest(f *FS, compact, spanMax int) {
	f.compactAfter, f.spanMax = compact, spanMax
}

// WriteLayout2ForTest rewrites the store in data layout 2, as an engine
// before layout 3 would have left it: every file's span records become
// chunk records (its visible extents cut at meta.ChunkSize boundaries),
// every inode is encoded without Used, and the layout record says 2.
func WriteLayout2ForTest(ctx context.Context, f *FS) error {
	return f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "downgrade-2", func(ctx context.Context) (any, error) {
			var inodes []kv.Pair
			if err := t.scanAll(ctx, meta.InodePrefix(), func(p kv.Pair) error {
				inodes = append(inodes, p)
				return nil
			}); err != nil {
				return nil, err
			}
			for _, p := range inodes {
				ino, err := meta.ParseIno(p.Key)
				if err != nil {
					return nil, err
				}
				var n meta.Inode
				if err := meta.Unmarshal(p.Value, &n); err != nil {
					return nil, err
				}
				if n.Type == uint8(TypeRegular) {
					chunks, err := t.chunksOf(ctx, Ino(ino))
					if err != nil {
						return nil, err
					}
					if err := t.deletePrefix(ctx, meta.SpanPrefix(ino)); err != nil {
						return nil, err
					}
					for idx, c := range chunks {
						b, err := meta.Marshal(c)
						if err != nil {
							return nil, err
						}
						if err := t.setRaw(ctx, meta.ChunkKey(ino, idx), b); err != nil {
							return nil, err
						}
					}
				}
				b, err := meta.MarshalInodeV1(&n)
				if err != nil {
					return nil, err
				}
				if err := t.setRaw(ctx, p.Key, b); err != nil {
					return nil, err
				}
			}
			t.inodes = map[Ino]*cachedInode{}
			return nil, t.setRaw(ctx, meta.MiscKey(meta.LayoutKey), encodeUint64(meta.LayoutChunks))
		})
	})
}

// WriteLayout3ForTest rewrites the store in data layout 3, as an engine
// before layout 4 would have left it: every inode is encoded without
// Spans and OpenStart, every cookie index value holds the bare name, and
// the layout record says 3.
func WriteLayout3ForTest(ctx context.Context, f *FS) error {
	return f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "downgrade-3", func(ctx context.Context) (any, error) {
			var inodes []kv.Pair
			if err := t.scanAll(ctx, meta.InodePrefix(), func(p kv.Pair) error {
				inodes = append(inodes, p)
				return nil
			}); err != nil {
				return nil, err
			}
			for _, p := range inodes {
				var n meta.Inode
				if err := meta.Unmarshal(p.Value, &n); err != nil {
					return nil, err
				}
				b, err := meta.MarshalInodeV3(&n)
				if err != nil {
					return nil, err
				}
				if err := t.setRaw(ctx, p.Key, b); err != nil {
					return nil, err
				}
			}
			var cookies []kv.Pair
			if err := t.scanAll(ctx, meta.AllCookiesPrefix(), func(p kv.Pair) error {
				cookies = append(cookies, p)
				return nil
			}); err != nil {
				return nil, err
			}
			for _, p := range cookies {
				ce, err := meta.ParseCookieValue(p.Value)
				if err != nil {
					return nil, err
				}
				if err := t.setRaw(ctx, p.Key, []byte(ce.Name)); err != nil {
					return nil, err
				}
			}
			t.inodes = map[Ino]*cachedInode{}
			return nil, t.setRaw(ctx, meta.MiscKey(meta.LayoutKey), encodeUint64(meta.LayoutSpans))
		})
	})
}

// SetUpgradeBatchForTest sets the number of region records converted per
// transaction by the layout upgrade in Open and returns a function that
// restores it.
func SetUpgradeBatchForTest(n int) (restore func()) {
	old := upgradeBatch
	upgradeBatch = n
	return func() { upgradeBatch = old }
}

// WriteLayout1ForTest rewrites the store in data layout 1, as an engine
// before layout 2 would have left it: WriteLayout2ForTest, then the chunk
// records are merged into
// one Region record per meta.RegionSize region and the layout record is
// deleted. Pieces of one extent that were cut at chunk boundaries are
// joined again, and each region's list starts with a hole over the whole
// region and a garbage inline copy of every slice extent up to 64 KiB, all overwritten
// by the later extents (layout 1's "later extent wins" lists), so the
// conversion must honour list order.
func WriteLayout1ForTest(ctx context.Context, f *FS) error {
	if err := WriteLayout2ForTest(ctx, f); err != nil {
		return err
	}
	return f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "downgrade", func(ctx context.Context) (any, error) {
			type rid struct{ ino, idx uint64 }
			regions := map[rid][]meta.Extent{}
			var keys [][]byte
			err := t.scanAll(ctx, meta.AllChunksPrefix(), func(p kv.Pair) error {
				ino, cidx, err := meta.ParseChunkKey(p.Key)
				if err != nil {
					return err
				}
				var c meta.Chunk
				if err := meta.Unmarshal(p.Value, &c); err != nil {
					return err
				}
				id := rid{ino, cidx * meta.ChunkSize / meta.RegionSize}
				shift := cidx * meta.ChunkSize % meta.RegionSize
				for _, e := range visible(c.Extents) {
					e.Off += shift
					l := regions[id]
					if k := len(l) - 1; k >= 0 && l[k].Kind == meta.KindSlice && e.Kind == meta.KindSlice &&
						l[k].End() == e.Off && l[k].Pointer() == e.Pointer() && l[k].SliceOff+l[k].Len == e.SliceOff {
						l[k].Len += e.Len
						continue
					}
					regions[id] = append(l, e)
				}
				keys = append(keys, slices.Clone(p.Key))
				return nil
			})
			if err != nil {
				return nil, err
			}
			for _, k := range keys {
				if err := t.deleteRaw(ctx, k); err != nil {
					return nil, err
				}
			}
			for id, exts := range regions {
				r := meta.Region{}
				for _, e := range exts {
					r.End = max(r.End, uint32(e.End()))
				}
				r.Extents = append(r.Extents, meta.Extent{Kind: meta.KindHole, Len: r.End})
				for _, e := range exts {
					if e.Kind == meta.KindSlice && e.Len <= 64<<10 { // (bounded: a record is at most 8 MiB)
						g := make([]byte, e.Len)
						for i := range g {
							g[i] = 0xee
						}
						r.Extents = append(r.Extents, meta.Extent{Off: e.Off, Len: e.Len, Kind: meta.KindInline, Data: g})
					}
				}
				r.Extents = append(r.Extents, exts...)
				b, err := meta.Marshal(&r)
				if err != nil {
					return nil, err
				}
				if err := t.setRaw(ctx, meta.RegionKey(id.ino, id.idx), b); err != nil {
					return nil, err
				}
			}
			return nil, t.deleteRaw(ctx, meta.MiscKey(meta.LayoutKey))
		})
	})
}

// SetRetainPayloadsForTest sets whether WritePayload lets the slice store
// write asynchronously from the caller's buffer (retainPayloads).
func SetRetainPayloadsForTest(v bool) (restore func()) {
	old := retainPayloads
	retainPayloads = v
	return func() { retainPayloads = old }
}
