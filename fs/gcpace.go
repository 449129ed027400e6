package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txnfs/txnfs/meta"
)

// Pacing the collector by garbage (docs/engine.md "Garbage collection").
// A workload that overwrites large files makes slice data unreferenced at
// a high rate; the collector must bring that space back (to the slice
// store's reuse pool) while the workload runs, not every ten minutes, or
// every put appends and allocates. Committed transactions add an estimate
// of the slice bytes they made unreachable to a counter; RunCollector
// starts a collection when it passes a threshold, never sooner after the
// last one than DutyCycle times that one's duration, so a large metadata
// scan cannot run back to back, and at least every Interval.

// GCSchedule configures RunCollector. Zero fields take the defaults.
type GCSchedule struct {
	// Interval: a collection runs at least this often (default 10 min).
	Interval time.Duration
	// GarbageBytes: a collection starts once committed transactions made
	// this many slice bytes unreachable since the last one began
	// (default 64 MiB; an upper bound: clones share slices).
	GarbageBytes uint64
	// DutyCycle: a collection triggered by garbage starts no sooner than
	// DutyCycle times the last collection's duration after it ended
	// (default 10).
	DutyCycle int
	// OnReport, if set, receives every collection's report or error.
	OnReport func(GCReport, error)
}

const (
	defaultGCInterval = 10 * time.Minute
	defaultGCGarbage  = 64 << 20
	defaultGCDuty     = 10
)

// gcPacer counts garbage and wakes RunCollector.
type gcPacer struct {
	garbage   atomic.Uint64
	threshold atomic.Uint64 // 0: no RunCollector (nobody to wake)
	// short is set when a write was refused for want of space while
	// garbage was pending: the next wake-up collects (and follows up)
	// whatever the garbage count.
	short atomic.Bool
	once  sync.Once
	kick  chan struct{} // buffered 1
}

func (p *gcPacer) init() { p.once.Do(func() { p.kick = make(chan struct{}, 1) }) }

// add records n bytes of slice data made unreachable by a commit.
func (p *gcPacer) add(n uint64) {
	if n == 0 {
		return
	}
	g := p.garbage.Add(n)
	if th := p.threshold.Load(); th > 0 && g >= th && g-n < th {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// shortOfSpace wakes RunCollector for a collection, with its follow-up,
// if committed transactions left garbage behind: a file system that ran
// out of space gets the space of removed files back without waiting for
// the garbage threshold.
func (p *gcPacer) shortOfSpace() {
	if p.garbage.Load() == 0 || p.threshold.Load() == 0 || p.short.Swap(true) {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Garbage returns the estimated slice bytes committed transactions made
// unreachable since the last collection began.
func (f *FS) Garbage() uint64 { return f.pacer.garbage.Load() }

// RunCollector runs garbage collections until ctx ends, paced as s says:
// by garbage, with a duty-cycle limit, and at least every s.Interval. A
// collection triggered by garbage is followed by one more (after the
// duty-cycle delay): freeing takes two scans, and the garbage that
// triggered the first became candidates only then (measured with
// BenchmarkOverwrite1MiB: 0.77-0.81 of the puts reused space with the
// follow-up, 0.70-0.78 with a follow-up only when the first run freed
// little). Run one per FS (cmd/txnfs serve does).
func (f *FS) RunCollector(ctx context.Context, s GCSchedule) {
	if s.Interval <= 0 {
		s.Interval = defaultGCInterval
	}
	if s.GarbageBytes == 0 {
		s.GarbageBytes = defaultGCGarbage
	}
	if s.DutyCycle <= 0 {
		s.DutyCycle = defaultGCDuty
	}
	p := &f.pacer
	p.init()
	p.threshold.Store(s.GarbageBytes)
	defer p.threshold.Store(0)
	floor := time.NewTimer(s.Interval)
	defer floor.Stop()
	var lastEnd time.Time
	var lastDur time.Duration
	followUp := false
	for {
		// Wait for a reason to collect.
		byGarbage := followUp || p.garbage.Load() >= s.GarbageBytes
		if !byGarbage {
			select {
			case <-ctx.Done():
				return
			case <-floor.C:
			case <-p.kick:
				if p.garbage.Load() < s.GarbageBytes && !p.short.Load() {
					continue // a stale kick, from before the last run
				}
				byGarbage = true
			}
		}
		if byGarbage {
			if wait := time.Until(lastEnd.Add(time.Duration(s.DutyCycle) * lastDur)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				case <-floor.C:
					t.Stop()
				}
			}
		}
		short := p.short.Swap(false)
		triggered := p.garbage.Swap(0)
		start := time.Now()
		rep, err := f.CollectGarbage(ctx)
		lastEnd = time.Now()
		lastDur = lastEnd.Sub(start)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.log.Error("garbage collection failed", "err", err)
		}
		if s.OnReport != nil {
			s.OnReport(rep, err)
		}
		// One follow-up after a garbage-triggered run: the garbage that
		// triggered it became candidates only now.
		followUp = !followUp && err == nil && (triggered >= s.GarbageBytes || short)
		if !floor.Stop() {
			select {
			case <-floor.C:
			default:
			}
		}
		floor.Reset(s.Interval)
	}
}

// sliceBytes sums the lengths of the slice extents in exts.
func sliceBytes(exts []meta.Extent) uint64 {
	var n uint64
	for _, e := range exts {
		if e.Kind == meta.KindSlice {
			n += uint64(e.Len)
		}
	}
	return n
}
