package fs

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Covered-put descriptors (docs/engine.md "Covered puts"). A slice store
// with covered puts (slice.CoveredReporter: datadir with Options.Covered)
// does not fdatasync a slice written with O_DIRECT into reused space; the
// metadata log's device flush makes it durable. A commit naming such
// slices records them in its own kv batch (meta.CoveredKey), so that
// recovery can tell a commit whose log record reached the disk without
// its data (a power cut during the log's flush, on a device that destages
// its cache out of order) and cut the log before it (datadir.Open). Once a
// Sync made the commit durable, its descriptor is garbage; it must be
// deleted before the space it names is recycled (a stale descriptor over
// rewritten space would fail the check and cut acknowledged commits): the
// collector deletes every descriptor it saw, after its Sync and before it
// recycles (Collect), and dropCovered also runs in the background every
// coveredCleanupEvery descriptors, so they stay few.

// coveredCleanupEvery is how many covered slices commits describe between
// two background cleanups: it bounds what Open reads to check them
// (about 128 MiB of 1 MiB slices, plus what commits add while a cleanup
// runs) at the cost of one Sync and one small durable commit per that
// many covered slices.
const coveredCleanupEvery = 128

type coveredState struct {
	mu  sync.Mutex
	seq uint64 // the last descriptor sequence handed out
	// outstanding are the sequences of descriptors whose commits are not
	// yet acknowledged durable: in flight (false), or applied NoSync and
	// waiting for an FS.Sync (true).
	outstanding map[uint64]bool
	acked       uint64        // the watermark: every sequence <= acked is not outstanding
	recorded    atomic.Uint64 // the largest watermark a committed batch holds

	// dropped: every descriptor with a sequence below it is deleted
	// (dropCovered); listings start there, past the deleted ones, whose
	// tombstones a scan from the prefix's start would walk (they pile up
	// in the memtable: two entries per covered commit).
	dropped atomic.Uint64

	pending atomic.Int64 // slices described since the last cleanup began
	running atomic.Bool  // a background cleanup is running
	wg      sync.WaitGroup
}

// initCovered starts the descriptor sequence past every existing one and
// past the clock (so sequences are not reused across restarts, whatever
// was deleted: recovery matches log records by key and value).
func (f *FS) initCovered(ctx context.Context) error {
	keys, err := f.coveredKeys(ctx, 0)
	if err != nil {
		return err
	}
	seq := uint64(f.now().UnixNano())
	if n := len(keys); n > 0 {
		seq = max(seq, binary.BigEndian.Uint64(keys[n-1][1:]))
	}
	c := &f.covered
	c.seq, c.acked, c.outstanding = seq, seq, map[uint64]bool{}
	return nil
}

// updateAckedLocked recomputes the watermark (c.mu held).
func (c *coveredState) updateAckedLocked() {
	w := c.seq
	for s := range c.outstanding {
		w = min(w, s-1)
	}
	c.acked = max(c.acked, w)
}

// describeCovered adds to kt, right before its commit, the descriptor of
// t's covered slices, if any (after the slices were synced or waited
// for), and the acknowledgement watermark if it advanced since a commit
// last recorded it. It returns the descriptor's sequence (0: none), how
// many slices it describes and the watermark written (0: none); the
// caller reports the commit's outcome to endCovered.
func (t *Txn) describeCovered(kt kv.Txn) (seq uint64, n int, acked uint64, err error) {
	c := &t.fs.covered
	var cov []slice.Pointer
	if len(t.written) > 0 {
		cov = slice.Covered(t.fs.slices, t.written)
	}
	c.mu.Lock()
	if len(cov) > 0 {
		c.seq++
		seq = c.seq
		c.outstanding[seq] = false
	}
	if c.acked > c.recorded.Load() && (t.mutations > 0 || seq > 0) {
		// Only in a commit that writes anyway: a commit without changes
		// costs no log write.
		acked = c.acked
	}
	c.mu.Unlock()
	if acked > 0 {
		if err := kt.Set(meta.MiscKey(meta.CoveredAckedKey), encodeUint64(acked)); err != nil {
			t.fs.endCovered(seq, kv.ErrConflict, false, 0)
			return 0, 0, 0, kvErr(err)
		}
	}
	if len(cov) == 0 {
		return 0, 0, acked, nil
	}
	v := make([]byte, 0, len(cov)*slice.PointerSize)
	for _, p := range cov {
		v = p.AppendBinary(v)
	}
	if err := kt.Set(meta.CoveredKey(seq), v); err != nil {
		t.fs.endCovered(seq, kv.ErrConflict, false, 0)
		return 0, 0, 0, kvErr(err)
	}
	return seq, len(cov), acked, nil
}

// endCovered records the outcome err of the commit that wrote descriptor
// seq (0: none) and watermark acked (0: none). A commit not applied
// (kv.ErrConflict, or the descriptor never reached the commit) releases
// its sequence; a durable one is acknowledged; a NoSync one waits for an
// FS.Sync. Any other error leaves the sequence outstanding for good: the
// outcome is unknown (the store has failed).
func (f *FS) endCovered(seq uint64, err error, noSync bool, acked uint64) {
	c := &f.covered
	if err == nil && acked > 0 {
		for {
			r := c.recorded.Load()
			if r >= acked || c.recorded.CompareAndSwap(r, acked) {
				break
			}
		}
	}
	if seq == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && noSync:
		c.outstanding[seq] = true
		return
	case err == nil, errors.Is(err, kv.ErrConflict):
		delete(c.outstanding, seq)
	default:
		return
	}
	c.updateAckedLocked()
}

// syncCovered runs sync (the kv store's Sync) and then acknowledges the
// NoSync commits with descriptors that were applied before it began.
func (f *FS) syncCovered(sync func() error) error {
	c := &f.covered
	c.mu.Lock()
	var waiting []uint64
	for s, w := range c.outstanding {
		if w {
			waiting = append(waiting, s)
		}
	}
	c.mu.Unlock()
	if err := sync(); err != nil {
		return err
	}
	if len(waiting) > 0 {
		c.mu.Lock()
		for _, s := range waiting {
			delete(c.outstanding, s)
		}
		c.updateAckedLocked()
		c.mu.Unlock()
	}
	return nil
}

// committedCovered notes a committed descriptor of n slices and starts a
// background cleanup every coveredCleanupEvery slices.
func (f *FS) committedCovered(n int) {
	if f.covered.pending.Add(int64(n)) < coveredCleanupEvery || !f.covered.running.CompareAndSwap(false, true) {
		return
	}
	f.covered.wg.Add(1)
	go func() {
		defer f.covered.wg.Done()
		defer f.covered.running.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.dropCovered(ctx); err != nil {
			f.log.Warn("dropping covered-put descriptors", "err", err)
		}
	}()
}

// coveredKeys returns the keys of the descriptors committed so far with
// a sequence of at least from, in sequence order.
func (f *FS) coveredKeys(ctx context.Context, from uint64) ([][]byte, error) {
	var keys [][]byte
	prefix := meta.CoveredPrefix()
	err := f.View(ctx, RootCred, func(t *Txn) error {
		return t.scanRange(ctx, meta.CoveredKey(from), kv.PrefixEnd(prefix), func(p kv.Pair) error {
			keys = append(keys, append([]byte(nil), p.Key...))
			return nil
		})
	})
	return keys, err
}

// dropCovered makes every commit so far durable (FS.Sync, always) and
// then durably deletes the descriptors committed before it: their slices
// were flushed by that Sync's device flush. Descriptors committed after
// the listing stay. When it returns nil, no descriptor committed before
// the call remains.
func (f *FS) dropCovered(ctx context.Context) error {
	c := &f.covered
	c.pending.Store(0)
	// Every sequence up to the watermark belongs to a commit that was
	// applied before this point (so the listing below sees it) or never
	// will be: once the listed keys are deleted, none below it is left.
	c.mu.Lock()
	acked := c.acked
	c.mu.Unlock()
	keys, err := f.coveredKeys(ctx, c.dropped.Load())
	if err != nil {
		return err
	}
	if err := f.Sync(ctx); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 4096)
		batch := keys[:n]
		keys = keys[n:]
		err := f.Do(ctx, RootCred, func(t *Txn) error {
			return t.internal(ctx, "covered-drop", func(ctx context.Context) (any, error) {
				for _, k := range batch {
					if err := t.deleteRaw(ctx, k); err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
		})
		if err != nil {
			return err
		}
	}
	for {
		d := c.dropped.Load()
		if d > acked || c.dropped.CompareAndSwap(d, acked+1) {
			return nil
		}
	}
}
