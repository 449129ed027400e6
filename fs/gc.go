package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Garbage collection (WTF §2.9). Slices are never reference-counted: a
// collection lists the backing files' sizes, then scans all span records
// in one snapshot for the pointers in use; byte ranges below the listed
// sizes that no pointer covers are unreferenced. A range is freed (a hole
// punched) only when two consecutive collections found it unreferenced
// AND it is safe with respect to running transactions:
//
//   - every transaction that began before this collection's snapshot has
//     finished (the collector waits a bounded time for that, Config.GCWait),
//     so no running transaction can still read a pointer from an older
//     snapshot;
//   - slices written by transactions that began before the snapshot and
//     committed after it ("late" commits, whose references the snapshot
//     cannot show) are excluded;
//   - a pointer can reach new metadata only through a transaction that
//     read it (OCC makes such a transaction replay on a fresh snapshot if
//     the reference was removed meanwhile) or through Paste, which checks
//     that the source still references the slices it pastes.
//
// Ranges appended after the size listing are never candidates.
//
// Reuse (slice.Recycler, docs/engine.md "Garbage collection"): a freed
// range is recycled, not punched: its whole blocks go to the slice store's
// reuse pool, and later large puts write there, below the listed sizes. The
// collector begins a slice.ReuseWatch before listing the sizes and
// recycles with it, so a range handed out since (to a transaction that
// began after the snapshot, which the epoch wait does not cover) is never
// freed under it; those ranges also leave the next candidates. A range
// enters the pool under exactly the conditions it was punched under
// before (two scans, quiesced epoch, after FS.Sync). Only the ranges the
// store punched are remembered in the persistent Freed list; pooled ones
// stay candidates, so after a restart (empty pool), or once reused and
// dropped again, the collector finds them again; recycling a range already
// in the pool is harmless.

// gcTracker knows the GC epoch each running transaction began in, and
// the slices of late commits.
type gcTracker struct {
	mu      sync.Mutex
	epoch   uint64
	active  map[*Txn]uint64
	ended   chan struct{} // closed and replaced when a transaction ends
	late    []lateCommit
	running sync.Mutex // one collection at a time
}

// lateCommit is a commit of slices by a transaction that began in an
// earlier GC epoch than the one it committed in.
type lateCommit struct {
	begin  uint64
	ranges map[uint32]ranges
}

func (g *gcTracker) init() {
	g.epoch = 1
	g.active = map[*Txn]uint64{}
	g.ended = make(chan struct{})
}

func (g *gcTracker) begin(t *Txn) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active[t] = g.epoch
	return g.epoch
}

// end records the end of t; committed says whether its writes committed.
func (g *gcTracker) end(t *Txn, committed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.active[t]; !ok {
		return
	}
	delete(g.active, t)
	if committed && len(t.written) > 0 && t.gcSeq < g.epoch {
		lc := lateCommit{begin: t.gcSeq, ranges: map[uint32]ranges{}}
		for _, p := range t.written {
			lc.ranges[p.Backing] = append(lc.ranges[p.Backing], rng{Start: p.Offset, End: p.End()})
		}
		g.late = append(g.late, lc)
	}
	close(g.ended)
	g.ended = make(chan struct{})
}

func (g *gcTracker) advance() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epoch++
	return g.epoch
}

// waitQuiesced waits until every running transaction began at or after
// epoch, or until timeout; it reports whether that happened.
func (g *gcTracker) waitQuiesced(ctx context.Context, epoch uint64, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		g.mu.Lock()
		quiet := true
		for _, e := range g.active {
			if e < epoch {
				quiet = false
				break
			}
		}
		ch := g.ended
		g.mu.Unlock()
		if quiet {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// takeLate returns the ranges of late commits by transactions that began
// before epoch, and forgets them (all such transactions have ended).
func (g *gcTracker) takeLate(epoch uint64) map[uint32]ranges {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[uint32]ranges{}
	kept := g.late[:0]
	for _, lc := range g.late {
		if lc.begin >= epoch {
			kept = append(kept, lc)
			continue
		}
		for id, rs := range lc.ranges {
			out[id] = append(out[id], rs...)
		}
	}
	g.late = kept
	for id, rs := range out {
		out[id] = rs.Normalize()
	}
	return out
}

// gcRecord is the collector's persistent state, under meta key "gc".
type gcRecord struct {
	_          struct{} `cbor:",toarray"`
	Candidates []backingRanges
	Freed      []backingRanges
}

type backingRanges struct {
	_      struct{} `cbor:",toarray"`
	ID     uint32
	Ranges ranges
}

// GCReport says what a collection found and freed.
type GCReport struct {
	Backings       int
	LiveSlices     int    // distinct slice pointers in use
	LiveBytes      uint64 // bytes of backing files in use
	CandidateBytes uint64 // unreferenced bytes found by this scan
	FreedBytes     uint64 // bytes released by this collection
	// PunchedBytes of FreedBytes went back to the OS (holes punched);
	// the rest went to the slice store's reuse pool.
	PunchedBytes uint64
	// Deferred: nothing was freed because a transaction older than the
	// scan was still running after Config.GCWait.
	Deferred bool
}

const keyGC = "gc"

// CollectGarbage runs one collection: scan, then free what the previous
// collection and this one both found unreferenced, if running transactions
// allow (see above). Run it periodically; `txnfs gc` runs two in a row on an
// idle file system.
func (f *FS) CollectGarbage(ctx context.Context) (GCReport, error) {
	g := &f.gcState
	g.running.Lock()
	defer g.running.Unlock()
	var rep GCReport

	prev, err := f.loadGC(ctx)
	if err != nil {
		return rep, err
	}
	// Before the size listing: every range handed out for reuse from now
	// on is excluded below.
	w := slice.WatchReuse(f.slices)
	defer w.Close()
	backings, err := f.slices.Backings(ctx)
	if err != nil {
		return rep, sliceErr(err)
	}
	rep.Backings = len(backings)
	live, nptr, epoch, err := f.liveRanges(ctx)
	if err != nil {
		return rep, err
	}
	rep.LiveSlices = nptr
	canFree := g.waitQuiesced(ctx, epoch, f.cfg.GCWait)
	var late map[uint32]ranges
	if canFree {
		late = g.takeLate(epoch)
	}
	rep.Deferred = !canFree
	if canFree {
		// The scans saw NoSync commits that a crash could still lose,
		// bringing back pointers to what we free: make them durable
		// first, so durable metadata never names freed bytes. Then
		// delete the covered-put descriptors (dropCovered): none that
		// names a range freed below may outlive this Sync (those of
		// commits after the scan name no such range: they began after
		// the snapshot, or are late commits, excluded).
		if err := f.dropCovered(ctx); err != nil {
			return rep, err
		}
	}

	freed := byID(prev.Freed)
	oldCand := byID(prev.Candidates)
	var next gcRecord
	for _, b := range backings {
		l := live[b.ID]
		rep.LiveBytes += l.Total()
		fr := freed[b.ID]
		cand := ranges{{Start: 0, End: b.Size}}.Subtract(l).Subtract(fr)
		rep.CandidateBytes += cand.Total()
		var released ranges
		if canFree {
			released = oldCand[b.ID].Intersect(cand).Subtract(late[b.ID])
			for _, r := range released {
				punched, err := slice.Recycle(ctx, f.slices, w, b.ID, r.Start, r.End-r.Start)
				if err != nil {
					return rep, sliceErr(err)
				}
				rep.FreedBytes += r.End - r.Start
				for _, p := range punched {
					rep.PunchedBytes += p.End - p.Start
					fr = fr.Union(ranges{{Start: p.Start, End: p.End}})
				}
			}
			cand = cand.Subtract(released).Subtract(fr)
		}
		var reused ranges
		for _, r := range w.Reused(b.ID) {
			reused = append(reused, rng{Start: r.Start, End: r.End})
		}
		if len(reused) > 0 {
			// Possibly a transaction's uncommitted slices (and, if they
			// were in released, not recycled: Recycle skipped them).
			reused = reused.Normalize()
			cand = cand.Subtract(reused)
			rep.FreedBytes -= released.Intersect(reused).Total()
		}
		if len(cand) > 0 {
			next.Candidates = append(next.Candidates, backingRanges{ID: b.ID, Ranges: cand})
		}
		if len(fr) > 0 {
			next.Freed = append(next.Freed, backingRanges{ID: b.ID, Ranges: fr})
		}
	}
	b, err := meta.Marshal(&next)
	if err != nil {
		return rep, err
	}
	err = f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "gc-state", func(ctx context.Context) (any, error) {
			return nil, t.setRaw(ctx, meta.MiscKey(keyGC), b)
		})
	})
	if err == nil {
		f.log.Info("garbage collection", "live_bytes", rep.LiveBytes, "candidate_bytes", rep.CandidateBytes,
			"freed_bytes", rep.FreedBytes, "punched_bytes", rep.PunchedBytes, "deferred", rep.Deferred)
	}
	return rep, err
}

func byID(brs []backingRanges) map[uint32]ranges {
	m := map[uint32]ranges{}
	for _, b := range brs {
		m[b.ID] = b.Ranges
	}
	return m
}

func (f *FS) loadGC(ctx context.Context) (gcRecord, error) {
	var rec gcRecord
	err := f.View(ctx, RootCred, func(t *Txn) error {
		b, err := t.getRaw(ctx, meta.MiscKey(keyGC))
		if errors.Is(err, ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := meta.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("%w: gc state: %v", ErrCorrupt, err)
		}
		return nil
	})
	return rec, err
}

// liveRanges scans every span record in one snapshot and returns the
// backing-file ranges referenced by slice pointers, and the GC epoch begun
// right after the snapshot was taken.
func (f *FS) liveRanges(ctx context.Context) (map[uint32]ranges, int, uint64, error) {
	live := map[uint32]ranges{}
	seen := map[slice.Pointer]bool{}
	var epoch uint64
	err := f.View(ctx, RootCred, func(t *Txn) error {
		if _, err := t.kvt(ctx); err != nil { // takes the snapshot
			return err
		}
		epoch = f.gcState.advance()
		return t.scanAll(ctx, meta.AllSpansPrefix(), func(p kv.Pair) error {
			s, err := t.decodeSpan(p.Key, p.Value)
			if err != nil {
				return err
			}
			for _, e := range s.rec.Extents {
				if e.Kind != meta.KindSlice || seen[e.Pointer()] {
					continue
				}
				ptr := e.Pointer()
				seen[ptr] = true
				live[ptr.Backing] = append(live[ptr.Backing], rng{Start: ptr.Offset, End: ptr.End()})
			}
			return nil
		})
	})
	for id, rs := range live {
		live[id] = rs.Normalize()
	}
	return live, len(seen), epoch, err
}

// scanAll calls fn for every pair under prefix, in batches.
func (t *Txn) scanAll(ctx context.Context, prefix []byte, fn func(kv.Pair) error) error {
	return t.scanRange(ctx, prefix, kv.PrefixEnd(prefix), fn)
}

// scanRange calls fn for every pair in [start, end), in batches.
func (t *Txn) scanRange(ctx context.Context, start, end []byte, fn func(kv.Pair) error) error {
	for {
		pairs, err := t.scanRaw(ctx, start, end, 1024)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			if err := fn(p); err != nil {
				return err
			}
		}
		if len(pairs) < 1024 {
			return nil
		}
		start = append(append([]byte(nil), pairs[len(pairs)-1].Key...), 0)
	}
}
