package slice

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/txnfs/txnfs/internal/byterange"
)

// Reuse of freed space (see "Reuse pool" in the package doc and
// docs/engine.md "Garbage collection"). A durable 1 MiB put appended to a
// backing file costs the file system an allocation (measured: 1.10-2.28 ms
// p50 with its two flushes, against 0.70-1.03 ms for an overwrite of
// written space), so the garbage collector recycles freed ranges instead
// of punching them: whole 4 KiB blocks go to a per-file pool, still
// allocated and written, and large puts take a fitting range from the pool
// before they append. Nothing about the pool is persistent: after a
// restart it is empty and the collector finds the unreferenced ranges
// again.

// DefaultReuseMax is LocalOptions.ReuseMax when it is zero: at most 1 GiB
// of freed space is kept for reuse (over all backing files); beyond it,
// recycled ranges are punched and the space goes back to the OS.
const DefaultReuseMax = 1 << 30

// DefaultReuseMin is LocalOptions.ReuseMin when it is zero: puts of at
// least 64 KiB take their space from the reuse pool when it has a fitting
// range. Smaller puts append, so that many small puts do not fragment the
// pool.
const DefaultReuseMin = 64 << 10

// maxPoolRanges bounds the ranges one backing file's pool holds (16 bytes
// each); a recycled range that would need more is punched.
const maxPoolRanges = 1 << 16

// Range is the byte range [Start, End) of a backing file.
type Range = byterange.Range

// Recycler is a Store that can keep freed space for reuse (Local, and a
// Cache over one). The garbage collector uses it through the package
// functions WatchReuse and Recycle, which fall back to Free for other
// stores.
type Recycler interface {
	// WatchReuse starts recording the ranges the store hands out from
	// its reuse pool, until the watch is closed.
	WatchReuse() *ReuseWatch
	// Recycle releases [off, off+length) of backing file id, which no
	// live pointer refers to, like Free, except that: the parts handed
	// out for reuse since w began (w may be nil) are left alone, since a
	// running transaction may be writing there; and whole 4 KiB blocks
	// are kept in the reuse pool, allocated and holding their old bytes,
	// up to the store's bound, instead of punched (the partial blocks at
	// the ends of a pooled range are left as they are). It returns the
	// ranges released for good (punched or zeroed, whole): those are
	// never handed out again.
	Recycle(ctx context.Context, w *ReuseWatch, id uint32, off, length uint64) (punched []Range, err error)
}

// Drainer is a store whose reuse pool can be given back (Local, and a
// Cache over one); the engine drains it when the file system runs short
// of space.
type Drainer interface {
	// DrainPool punches every range in the reuse pool, giving the space
	// back to the OS, and returns the bytes it released. The ranges stay
	// unreferenced, so the collector recycles them again later.
	DrainPool(ctx context.Context) (uint64, error)
}

// ReuseWatch records the ranges a store hands out from its reuse pool
// between WatchReuse and Close. Safe for concurrent use; a nil watch
// records nothing.
type ReuseWatch struct {
	mu     sync.Mutex
	reused map[uint32][]Range
	stop   func()
}

func (w *ReuseWatch) add(id uint32, r Range) {
	w.mu.Lock()
	w.reused[id] = append(w.reused[id], r)
	w.mu.Unlock()
}

// Reused returns the ranges of backing file id handed out since the watch
// began, unsorted, possibly overlapping.
func (w *ReuseWatch) Reused(id uint32) []Range {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reused[id])
}

// Close stops recording. Reused still answers afterwards.
func (w *ReuseWatch) Close() {
	if w != nil && w.stop != nil {
		w.stop()
	}
}

// WatchReuse returns s.WatchReuse() if s is a Recycler, else nil (a store
// that never reuses space).
func WatchReuse(s Store) *ReuseWatch {
	if r, ok := s.(Recycler); ok {
		return r.WatchReuse()
	}
	return nil
}

// Recycle calls s.Recycle if s is a Recycler; otherwise it frees the range
// with Free and reports it all punched.
func Recycle(ctx context.Context, s Store, w *ReuseWatch, id uint32, off, length uint64) ([]Range, error) {
	if r, ok := s.(Recycler); ok {
		return r.Recycle(ctx, w, id, off, length)
	}
	if err := s.Free(ctx, id, off, length); err != nil {
		return nil, err
	}
	if length == 0 {
		return nil, nil
	}
	return byterange.Of(off, off+length), nil
}

// DrainPool calls s.DrainPool if s is a Drainer (a store without a pool
// has nothing to release).
func DrainPool(ctx context.Context, s Store) (uint64, error) {
	if r, ok := s.(Drainer); ok {
		return r.DrainPool(ctx)
	}
	return 0, nil
}

// reusePool is a Local's store-wide reuse state. The ranges themselves
// live in each backing's pool (guarded by backing.mu); lock order:
// backing.mu, then reusePool.mu, then ReuseWatch.mu.
type reusePool struct {
	mu      sync.Mutex
	bytes   uint64 // pooled bytes over all backing files
	watches map[*ReuseWatch]struct{}
}

// WatchReuse implements Recycler.
func (l *Local) WatchReuse() *ReuseWatch {
	w := &ReuseWatch{reused: map[uint32][]Range{}}
	l.reuse.mu.Lock()
	if l.reuse.watches == nil {
		l.reuse.watches = map[*ReuseWatch]struct{}{}
	}
	l.reuse.watches[w] = struct{}{}
	l.reuse.mu.Unlock()
	w.stop = func() {
		l.reuse.mu.Lock()
		delete(l.reuse.watches, w)
		l.reuse.mu.Unlock()
	}
	return w
}

// takeReuse hands out n bytes (a multiple of directAlign) from b's pool:
// the smallest fitting range (the lowest one among equals), from its
// start. b.mu is held. Failed direct writes remembered in the range are
// forgotten: the range is garbage the collector recycled, so no pointer
// to it is being committed.
func (l *Local) takeReuse(b *backing, n uint64) (uint64, bool) {
	if l.reuseMin <= 0 || int(n) < l.reuseMin || len(b.pool) == 0 {
		return 0, false
	}
	best := -1
	for i, r := range b.pool {
		if r.End-r.Start >= n && (best < 0 || r.End-r.Start < b.pool[best].End-b.pool[best].Start) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	off := b.pool[best].Start
	b.pool[best].Start += n
	if b.pool[best].Start == b.pool[best].End {
		b.pool = slices.Delete(b.pool, best, best+1)
	}
	l.reuse.mu.Lock()
	l.reuse.bytes -= n
	for w := range l.reuse.watches {
		w.add(b.id, Range{Start: off, End: off + n})
	}
	l.reuse.mu.Unlock()
	b.dmu.Lock()
	b.dmu.failed = slices.DeleteFunc(b.dmu.failed, func(f failedWrite) bool { return f.off < off+n && off < f.end })
	b.dmu.Unlock()
	l.stats.reusePuts.Add(1)
	l.stats.reuseBytes.Add(n)
	return off, true
}

// dropPool removes the whole blocks of [off, end) from b's pool (the range
// is being punched). A partial block stays: if it is pooled, all its bytes
// are garbage (it was whole garbage when recycled, and it has not been
// handed out since), so zeroing some of them does not matter, and pool
// ranges stay block-aligned, as direct writes need. b.mu is held.
func (l *Local) dropPool(b *backing, off, end uint64) {
	off, end = alignUp(off), end&^(directAlign-1)
	if len(b.pool) == 0 || off >= end {
		return
	}
	kept := b.pool.Subtract(byterange.Of(off, end))
	removed := b.pool.Total() - kept.Total()
	b.pool = kept
	if removed > 0 {
		l.reuse.mu.Lock()
		l.reuse.bytes -= removed
		l.reuse.mu.Unlock()
	}
}

// Recycle implements Recycler.
func (l *Local) Recycle(ctx context.Context, w *ReuseWatch, id uint32, off, length uint64) ([]Range, error) {
	if err := l.enter(ctx); err != nil {
		return nil, err
	}
	defer l.exit()
	if length == 0 {
		return nil, nil
	}
	b, err := l.freeCheck(id, off, length)
	if err != nil {
		return nil, err
	}
	b.waitDirect(off, off+length)
	b.mu.Lock()
	defer b.mu.Unlock()
	pieces := byterange.Of(off, off+length)
	if w != nil {
		pieces = pieces.Subtract(byterange.Set(w.Reused(id)).Normalize())
	}
	var punched []Range
	for _, p := range pieces {
		lo, hi := alignUp(p.Start), p.End&^(directAlign-1)
		if l.reuseMax > 0 {
			if lo >= hi {
				// Inside one block shared with other bytes:
				// left as it is (punching would only zero it).
				continue
			}
			if added, ok := l.poolAdd(b, Range{Start: lo, End: hi}); ok {
				// The partial blocks at the ends are left as
				// they are too: they stay unreferenced, so the
				// collector offers them again, and once the rest
				// of their block is garbage it pools the block.
				// Punching them would put tiny ranges in its
				// persistent list of ranges freed for good.
				l.stats.recycledBytes.Add(added)
				continue
			}
		}
		punched = append(punched, p)
	}
	for _, p := range punched {
		if err := l.release(b, p.Start, p.End-p.Start); err != nil {
			return nil, err
		}
	}
	return punched, nil
}

// DrainPool implements Drainer.
func (l *Local) DrainPool(ctx context.Context) (uint64, error) {
	if err := l.enter(ctx); err != nil {
		return 0, err
	}
	defer l.exit()
	var released uint64
	for _, b := range l.all {
		b.mu.Lock()
		var err error
		for len(b.pool) > 0 {
			r := b.pool[0]
			if err = l.punch(b, r.Start, r.End-r.Start); err != nil {
				break
			}
			b.pool = b.pool[1:]
			released += r.End - r.Start
			l.reuse.mu.Lock()
			l.reuse.bytes -= r.End - r.Start
			l.reuse.mu.Unlock()
		}
		b.mu.Unlock()
		if err != nil {
			return released, err
		}
	}
	if released > 0 {
		l.log.Info("reuse pool drained: space given back to the file system", "bytes", released)
	}
	return released, nil
}

// poolAdd adds r (block-aligned) to b's pool if the store's bound allows
// the bytes it adds, and returns how many were not in the pool already
// (the collector offers pooled ranges again: they are unreferenced space
// in each of its scans). b.mu is held.
func (l *Local) poolAdd(b *backing, r Range) (added uint64, ok bool) {
	if l.reuseMax <= 0 {
		return 0, false
	}
	fresh := byterange.Set{r}.Subtract(b.pool)
	add := fresh.Total()
	l.reuse.mu.Lock()
	defer l.reuse.mu.Unlock()
	if l.reuse.bytes+add > uint64(l.reuseMax) || len(b.pool)+len(fresh) > maxPoolRanges {
		return 0, false
	}
	l.reuse.bytes += add
	b.pool = b.pool.Union(fresh)
	return add, true
}

// dirtyWrite is a put into reused space (below the file's synced
// watermark) that no completed SyncData covers yet.
type dirtyWrite struct {
	off, end uint64
	done     chan struct{} // closed when its direct write returned; nil: written
	// covered: a direct write with LocalOptions.Covered, which needs no
	// SyncData once written (cleared under smu, before done is closed,
	// if the write failed or was redone buffered).
	covered bool
	// pledged: a commit names the put before its write returned
	// (Local.Pledge; set under smu while covered and unwritten). If the
	// write then fails, the file's syncs fail for good: the commit's
	// record may be in the log already.
	pledged bool
}

// uncover makes d an ordinary dirty write (its direct write failed or
// was redone buffered): Sync then fdatasyncs for it.
func (d *dirtyWrite) uncover(b *backing) {
	b.smu.Lock()
	d.covered = false
	b.smu.Unlock()
}

// failed records that d's direct write failed for good (err): if a commit
// pledged it, b's syncs fail from now on (see Local.Pledge).
func (d *dirtyWrite) failed(b *backing, err error) {
	b.smu.Lock()
	defer b.smu.Unlock()
	d.covered = false
	if d.pledged && b.smu.failed == nil {
		b.smu.failed = fmt.Errorf("slice: a pledged write to %s failed; its bytes past %d are not durable and never will be reported so: %w",
			b.name, b.smu.synced, err)
	}
}

func (d *dirtyWrite) written() bool {
	if d.done == nil {
		return true
	}
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// freeCheck validates a Free or Recycle of [off, off+length) in backing id.
func (l *Local) freeCheck(id uint32, off, length uint64) (*backing, error) {
	b := l.byID[id]
	if b == nil {
		return nil, fmt.Errorf("%w: free: no backing file %d", ErrBadPointer, id)
	}
	if size := b.size.Load(); off > size || length > size-off {
		return nil, fmt.Errorf("%w: free [%d, %d+%d) beyond the %d bytes of %s", ErrBadPointer, off, off, length, size, b.name)
	}
	return b, nil
}

// poolBytes returns the bytes in the reuse pool now.
func (l *Local) poolBytes() uint64 {
	l.reuse.mu.Lock()
	defer l.reuse.mu.Unlock()
	return l.reuse.bytes
}
