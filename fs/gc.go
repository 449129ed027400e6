package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Garbage collection (WTF §2.9). Slices are never reference-counted:
// a collection scans all region records for the pointers in use, and any
// byte range of a backing file that no pointer covers is a candidate. A
// candidate is freed (a hole punched) only when the next collection finds
// it unreferenced again AND every transaction that was running when the
// first scan started has finished — so a slice written by a transaction
// that has not committed yet is never taken. Byte ranges appended after a
// scan started are never candidates of that scan.

// gcTracker knows the GC epoch each running transaction began in.
type gcTracker struct {
	mu       sync.Mutex
	instance uint64 // random per process: epochs of other processes are void
	epoch    uint64
	active   map[*Txn]uint64
	running  sync.Mutex // one collection at a time
}

func (g *gcTracker) init() {
	g.instance = randUint64()
	g.epoch = 1
	g.active = map[*Txn]uint64{}
}

func (g *gcTracker) begin(t *Txn) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active[t] = g.epoch
	return g.epoch
}

func (g *gcTracker) end(t *Txn) {
	g.mu.Lock()
	delete(g.active, t)
	g.mu.Unlock()
}

func (g *gcTracker) advance() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epoch++
	return g.epoch
}

// quiescedSince reports whether every running transaction began at or
// after epoch.
func (g *gcTracker) quiescedSince(epoch uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.active {
		if e < epoch {
			return false
		}
	}
	return true
}

// gcRecord is the collector's persistent state, under meta key "gc".
type gcRecord struct {
	_          struct{} `cbor:",toarray"`
	Instance   uint64
	Epoch      uint64
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
	Deferred       bool   // freeing was deferred: an older transaction is still running
}

const keyGC = "gc"

// CollectGarbage runs one collection: scan, then free what the previous
// scan and this one both found unreferenced. Run it periodically (at an
// interval longer than transactions last); `txnfs gc` runs two in a row on
// an idle file system.
func (f *FS) CollectGarbage(ctx context.Context) (GCReport, error) {
	g := &f.gcState
	g.running.Lock()
	defer g.running.Unlock()
	var rep GCReport

	backings, err := f.slices.Backings(ctx)
	if err != nil {
		return rep, sliceErr(err)
	}
	epoch := g.advance()
	rep.Backings = len(backings)

	prev, err := f.loadGC(ctx)
	if err != nil {
		return rep, err
	}
	canFree := prev.Instance != g.instance || g.quiescedSince(prev.Epoch)

	live, nptr, err := f.liveRanges(ctx)
	if err != nil {
		return rep, err
	}
	rep.LiveSlices = nptr
	freed := byID(prev.Freed)
	oldCand := byID(prev.Candidates)
	next := gcRecord{Instance: g.instance, Epoch: epoch}
	for _, b := range backings {
		l := live[b.ID]
		rep.LiveBytes += l.total()
		cand := ranges{{Start: 0, End: b.Size}}.subtract(l).subtract(freed[b.ID])
		rep.CandidateBytes += cand.total()
		fr := freed[b.ID]
		if canFree {
			for _, r := range oldCand[b.ID].intersect(cand) {
				if err := f.slices.Free(ctx, b.ID, r.Start, r.End-r.Start); err != nil {
					return rep, sliceErr(err)
				}
				rep.FreedBytes += r.End - r.Start
				fr = fr.union(ranges{r})
			}
			cand = cand.subtract(fr)
		} else {
			rep.Deferred = true
			cand = cand.intersect(ranges{{Start: 0, End: b.Size}})
		}
		if len(cand) > 0 {
			next.Candidates = append(next.Candidates, backingRanges{ID: b.ID, Ranges: cand})
		}
		if len(fr) > 0 {
			next.Freed = append(next.Freed, backingRanges{ID: b.ID, Ranges: fr})
		}
	}
	if !canFree {
		// Keep the older candidates' epoch so they stay guarded.
		next.Epoch = prev.Epoch
		next.Candidates = prev.Candidates
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
			"freed_bytes", rep.FreedBytes, "deferred", rep.Deferred)
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

// liveRanges scans every region record (in one snapshot) and returns the
// backing-file ranges referenced by slice pointers.
func (f *FS) liveRanges(ctx context.Context) (map[uint32]ranges, int, error) {
	live := map[uint32]ranges{}
	seen := map[slice.Pointer]bool{}
	err := f.forEachRegion(ctx, func(ino, idx uint64, r *meta.Region) error {
		for _, e := range r.Extents {
			if e.Kind != meta.KindSlice {
				continue
			}
			p := e.Pointer()
			if seen[p] {
				continue
			}
			seen[p] = true
			live[p.Backing] = append(live[p.Backing], rng{Start: p.Offset, End: p.End()})
		}
		return nil
	})
	for id, rs := range live {
		live[id] = rs.normalize()
	}
	return live, len(seen), err
}

// forEachRegion calls fn for every region record, in one snapshot.
func (f *FS) forEachRegion(ctx context.Context, fn func(ino, idx uint64, r *meta.Region) error) error {
	return f.View(ctx, RootCred, func(t *Txn) error {
		return t.scanAll(ctx, meta.AllRegionsPrefix(), func(p kv.Pair) error {
			ino, idx, err := meta.ParseRegionKey(p.Key)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrCorrupt, err)
			}
			var r meta.Region
			if err := meta.Unmarshal(p.Value, &r); err != nil {
				return fmt.Errorf("%w: inode %d region %d: %v", ErrCorrupt, ino, idx, err)
			}
			return fn(ino, idx, &r)
		})
	})
}

// scanAll calls fn for every pair under prefix, in batches.
func (t *Txn) scanAll(ctx context.Context, prefix []byte, fn func(kv.Pair) error) error {
	start, end := prefix, kv.PrefixEnd(prefix)
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
