package slice

import (
	"bytes"
	"container/list"
	"context"
	"sync"
	"sync/atomic"
)

// entryOverhead approximates the memory a cache entry costs beyond its
// bytes (list element, map entries, index entry), so that many tiny slices
// cannot blow the byte budget.
const entryOverhead = 160

// DefaultCachePutMax is the largest Put a Cache keeps a copy of by default.
// Larger slices are written through without a copy and cached when first
// read: measured (docs/benchmarks.md), the 1 MiB copy cost a durable 1 MiB
// write 10-50% of its throughput and a 256 MiB stream 40%, and a stream of
// large writes would evict the whole LRU anyway. Small slices (inline
// overflow, small-file data, what compaction and defragmentation read back)
// are still cached on write.
const DefaultCachePutMax = 128 << 10

// CacheOptions configures NewCacheOpts.
type CacheOptions struct {
	// MaxBytes bounds the cache (<= 0: no cache, next is returned).
	MaxBytes int64
	// PutMax: Puts of more than this many bytes are not copied into the
	// cache. 0 means DefaultCachePutMax; negative caches every Put.
	PutMax int
}

// Cache is the memory tier (BFS): an LRU of verified slice contents in
// front of another Store, bounded by bytes. Create one with NewCache.
//
// Put is write-through: the slice is stored by the next Store and, if it is
// at most CacheOptions.PutMax bytes, a copy is kept, so recently written
// small data reads at memory speed. ReadAt serves hits
// from memory without touching the next Store (the bytes were verified, or
// checksummed on Put, when they entered); concurrent misses of one slice
// load it once. Free drops every cached slice overlapping the range, before
// and after freeing it below. Slices are immutable, so a cached copy is
// never stale while its pointer is live; no coherence protocol is needed.
//
// Free slices through the Cache, not the Store below it, or freed slices
// may keep reading from memory.
type Cache struct {
	next   Store
	max    int64
	putMax int

	mu struct {
		sync.Mutex
		bytes   int64
		lru     list.List                 // of *cacheEntry, most recent first
		entries map[Pointer]*list.Element // -> lru element
		// index finds entries by backing and offset for Free: every
		// entry is filed under its start offset >> 20; a slice is at
		// most MaxSize = 1<<20 long, so entries overlapping [a, b)
		// start in chunks (a-MaxSize)>>20 .. (b-1)>>20.
		index   map[chunkKey]map[Pointer]struct{}
		flights map[Pointer]*flight
		// gen counts Frees; a load that started before a Free does not
		// insert its result.
		gen    uint64
		closed bool
	}
	stats struct {
		hits, misses, shared, evictions, invalidations atomic.Uint64
	}
}

// CacheStats are cumulative counters and the current occupancy of a Cache.
type CacheStats struct {
	Hits, Misses  uint64
	Shared        uint64 // misses that waited for another caller's load
	Evictions     uint64
	Invalidations uint64 // entries dropped by Free
	Entries       int
	Bytes         int64 // including per-entry overhead
}

type cacheEntry struct {
	p    Pointer
	data []byte // immutable, len p.Length
}

type chunkKey struct {
	backing uint32
	chunk   uint64
}

const chunkShift = 20 // == log2(MaxSize)

// flight is one load of a slice shared by concurrent misses.
type flight struct {
	done chan struct{}
	data []byte
	err  error
}

var _ Store = (*Cache)(nil)

// NewCache returns next with a memory tier of maxBytes in front of it. The
// result is a *Cache unless maxBytes <= 0, in which case next is returned
// unchanged. Closing the Cache closes next.
func NewCache(next Store, maxBytes int64) Store {
	return NewCacheOpts(next, CacheOptions{MaxBytes: maxBytes})
}

// NewCacheOpts is NewCache with options.
func NewCacheOpts(next Store, o CacheOptions) Store {
	if o.MaxBytes <= 0 {
		return next
	}
	c := &Cache{next: next, max: o.MaxBytes, putMax: o.PutMax}
	switch {
	case c.putMax == 0:
		c.putMax = DefaultCachePutMax
	case c.putMax < 0:
		c.putMax = MaxSize
	}
	c.mu.entries = map[Pointer]*list.Element{}
	c.mu.index = map[chunkKey]map[Pointer]struct{}{}
	c.mu.flights = map[Pointer]*flight{}
	return c
}

// Stats returns a snapshot of the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	n, b := c.mu.lru.Len(), c.mu.bytes
	c.mu.Unlock()
	return CacheStats{
		Hits: c.stats.hits.Load(), Misses: c.stats.misses.Load(), Shared: c.stats.shared.Load(),
		Evictions: c.stats.evictions.Load(), Invalidations: c.stats.invalidations.Load(),
		Entries: n, Bytes: b,
	}
}

// Put implements Store: the next Store stores data, the Cache keeps a copy.
func (c *Cache) Put(ctx context.Context, hint uint64, data []byte) (Pointer, error) {
	p, err := c.next.Put(ctx, hint, data)
	if err != nil {
		return p, err
	}
	c.afterPut(p, data, false)
	return p, nil
}

// PutPayload implements PayloadPutter through the next Store (see
// slice.PutPayload). The payload's bytes are cached only once a checksum
// of the copy matches the CRC the caller gave: the cache serves its
// copies unverified, so a wrong CRC must not make wrong bytes readable.
func (c *Cache) PutPayload(ctx context.Context, hint uint64, pl Payload) (Pointer, error) {
	p, err := PutPayload(ctx, c.next, hint, pl)
	if err != nil {
		return p, err
	}
	c.afterPut(p, pl.data, true)
	return p, nil
}

// afterPut drops stale copies of the range p took and caches data (small
// enough, see CacheOptions.PutMax) under p; check: only if its CRC32C is
// p.CRC.
func (c *Cache) afterPut(p Pointer, data []byte, check bool) {
	if _, ok := c.next.(Recycler); ok {
		// The range may be reused space: drop copies of the dead slices
		// that were there (Recycle dropped them, but a reader of a dead
		// pointer may have loaded one since). Their pointers differ from
		// p in CRC unless a CRC collides; this makes that harmless too.
		c.drop(p.Backing, p.Offset, uint64(p.Length), false)
	}
	if cost(p) <= c.max && len(data) <= c.putMax {
		cp := bytes.Clone(data)
		if check && Checksum(cp) != p.CRC {
			return
		}
		c.mu.Lock()
		c.insertLocked(p, cp)
		c.mu.Unlock()
	}
}

// Sync implements Store by passing through: the cache holds no dirty data.
func (c *Cache) Sync(ctx context.Context, ptrs []Pointer) error {
	return c.next.Sync(ctx, ptrs)
}

// Covered passes through to the next Store (see slice.Covered).
func (c *Cache) Covered(ptrs []Pointer) []Pointer { return Covered(c.next, ptrs) }

// Pledge passes through to the next Store (see slice.Pledge).
func (c *Cache) Pledge(ctx context.Context, ptrs []Pointer) ([]Pointer, error) {
	return Pledge(ctx, c.next, ptrs)
}

// WaitWritten passes through to the next Store (see slice.WaitWritten).
func (c *Cache) WaitWritten(ctx context.Context, ptrs []Pointer) error {
	return WaitWritten(ctx, c.next, ptrs)
}

// ReadAt implements Store. A miss loads the whole slice through the next
// Store (which verifies it) once, however many callers miss concurrently;
// a caller whose ctx ends stops waiting but the load completes.
func (c *Cache) ReadAt(ctx context.Context, p Pointer, off uint32, buf []byte) error {
	if err := checkRange(p, off, len(buf)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if el, ok := c.mu.entries[p]; ok {
		c.mu.lru.MoveToFront(el)
		data := el.Value.(*cacheEntry).data
		c.mu.Unlock()
		c.stats.hits.Add(1)
		copy(buf, data[off:])
		return nil
	}
	c.stats.misses.Add(1)
	f, shared := c.mu.flights[p]
	if !shared {
		f = &flight{done: make(chan struct{})}
		c.mu.flights[p] = f
		gen := c.mu.gen
		c.mu.Unlock()

		data := make([]byte, p.Length)
		// The load is shared, so it must not fail because this caller
		// gave up.
		err := c.next.ReadAt(context.WithoutCancel(ctx), p, 0, data)
		c.mu.Lock()
		delete(c.mu.flights, p)
		if err == nil && gen == c.mu.gen && cost(p) <= c.max {
			c.insertLocked(p, data)
		}
		c.mu.Unlock()
		f.data, f.err = data, err
		close(f.done)
	} else {
		c.mu.Unlock()
		c.stats.shared.Add(1)
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.err != nil {
		return f.err
	}
	copy(buf, f.data[off:])
	return nil
}

func cost(p Pointer) int64 { return int64(p.Length) + entryOverhead }

func (c *Cache) insertLocked(p Pointer, data []byte) {
	if c.mu.closed {
		return
	}
	if el, ok := c.mu.entries[p]; ok {
		c.mu.lru.MoveToFront(el)
		return
	}
	c.mu.entries[p] = c.mu.lru.PushFront(&cacheEntry{p: p, data: data})
	k := chunkKey{p.Backing, p.Offset >> chunkShift}
	set := c.mu.index[k]
	if set == nil {
		set = map[Pointer]struct{}{}
		c.mu.index[k] = set
	}
	set[p] = struct{}{}
	c.mu.bytes += cost(p)
	for c.mu.bytes > c.max {
		back := c.mu.lru.Back()
		c.removeLocked(back.Value.(*cacheEntry).p)
		c.stats.evictions.Add(1)
	}
}

func (c *Cache) removeLocked(p Pointer) {
	el, ok := c.mu.entries[p]
	if !ok {
		return
	}
	c.mu.lru.Remove(el)
	delete(c.mu.entries, p)
	k := chunkKey{p.Backing, p.Offset >> chunkShift}
	if set := c.mu.index[k]; set != nil {
		delete(set, p)
		if len(set) == 0 {
			delete(c.mu.index, k)
		}
	}
	c.mu.bytes -= cost(p)
}

// invalidate drops cached slices overlapping [off, off+length) of backing
// id and makes in-flight loads discard their results.
func (c *Cache) invalidate(id uint32, off, length uint64) { c.drop(id, off, length, true) }

// drop drops cached slices overlapping [off, off+length) of backing id;
// with bumpGen, in-flight loads discard their results too.
func (c *Cache) drop(id uint32, off, length uint64, bumpGen bool) {
	end := off + length
	if end < off { // overflow: to the end of the file
		end = ^uint64(0)
	}
	first := uint64(0)
	if off >= MaxSize {
		first = (off - MaxSize) >> chunkShift
	}
	last := (end - 1) >> chunkShift
	c.mu.Lock()
	defer c.mu.Unlock()
	if bumpGen {
		c.mu.gen++
	}
	if len(c.mu.index) == 0 {
		return
	}
	// Walk whichever is smaller: the chunks of the range or the index.
	var victims []Pointer
	collect := func(set map[Pointer]struct{}) {
		for p := range set {
			if p.Backing == id && p.Offset < end && p.End() > off {
				victims = append(victims, p)
			}
		}
	}
	if last-first < uint64(len(c.mu.index)) {
		for ch := first; ; ch++ {
			collect(c.mu.index[chunkKey{id, ch}])
			if ch == last {
				break
			}
		}
	} else {
		for k, set := range c.mu.index {
			if k.backing == id && k.chunk >= first && k.chunk <= last {
				collect(set)
			}
		}
	}
	for _, p := range victims {
		c.removeLocked(p)
	}
	c.stats.invalidations.Add(uint64(len(victims)))
}

// Free implements Store: cached copies of slices in the range are dropped,
// then the next Store frees the range.
func (c *Cache) Free(ctx context.Context, id uint32, off, length uint64) error {
	if length == 0 {
		return c.next.Free(ctx, id, off, length)
	}
	c.invalidate(id, off, length)
	err := c.next.Free(ctx, id, off, length)
	// A load that read the range before it was freed and finished after
	// the first invalidation is discarded here (or by the gen check).
	c.invalidate(id, off, length)
	return err
}

// Next returns the Store below the cache.
func (c *Cache) Next() Store { return c.next }

// WatchReuse implements Recycler by passing through (nil if the next
// Store does not reuse space).
func (c *Cache) WatchReuse() *ReuseWatch { return WatchReuse(c.next) }

// DrainPool implements Drainer by passing through.
func (c *Cache) DrainPool(ctx context.Context) (uint64, error) { return DrainPool(ctx, c.next) }

// Recycle implements Recycler: like Free, cached copies of slices in the
// range are dropped before and after the next Store recycles it.
func (c *Cache) Recycle(ctx context.Context, w *ReuseWatch, id uint32, off, length uint64) ([]Range, error) {
	if length == 0 {
		return Recycle(ctx, c.next, w, id, off, length)
	}
	c.invalidate(id, off, length)
	punched, err := Recycle(ctx, c.next, w, id, off, length)
	c.invalidate(id, off, length)
	return punched, err
}

// Backings implements Store by passing through.
func (c *Cache) Backings(ctx context.Context) ([]Backing, error) {
	return c.next.Backings(ctx)
}

// Close drops the cached slices and closes the next Store.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.mu.closed = true
	c.mu.lru.Init()
	clear(c.mu.entries)
	clear(c.mu.index)
	c.mu.bytes = 0
	c.mu.Unlock()
	return c.next.Close()
}
