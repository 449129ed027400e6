package fs

import (
	"context"
	"encoding/binary"
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
	seq     atomic.Uint64 // the last descriptor sequence handed out
	pending atomic.Int64  // slices described since the last cleanup began
	running atomic.Bool   // a background cleanup is running
	wg      sync.WaitGroup
}

// initCovered starts the descriptor sequence past every existing one and
// past the clock (so sequences are not reused across restarts, whatever
// was deleted: recovery matches log records by key and value).
func (f *FS) initCovered(ctx context.Context) error {
	keys, err := f.coveredKeys(ctx)
	if err != nil {
		return err
	}
	seq := uint64(f.now().UnixNano())
	if n := len(keys); n > 0 {
		seq = max(seq, binary.BigEndian.Uint64(keys[n-1][1:]))
	}
	f.covered.seq.Store(seq)
	return nil
}

// describeCovered adds to kt the descriptor of t's covered slices, if
// any (after the slices were synced or waited for), and returns how many
// it described.
func (t *Txn) describeCovered(kt kv.Txn) (int, error) {
	cov := slice.Covered(t.fs.slices, t.written)
	if len(cov) == 0 {
		return 0, nil
	}
	v := make([]byte, 0, len(cov)*slice.PointerSize)
	for _, p := range cov {
		v = p.AppendBinary(v)
	}
	return len(cov), kvErr(kt.Set(meta.CoveredKey(t.fs.covered.seq.Add(1)), v))
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

// coveredKeys returns the keys of the descriptors committed so far, in
// sequence order.
func (f *FS) coveredKeys(ctx context.Context) ([][]byte, error) {
	t, err := f.kv.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		return nil, kvErr(err)
	}
	defer t.Rollback()
	var keys [][]byte
	start, end := meta.CoveredPrefix(), kv.PrefixEnd(meta.CoveredPrefix())
	for {
		pairs, err := t.Scan(ctx, start, end, 1024)
		if err != nil {
			return nil, kvErr(err)
		}
		for _, p := range pairs {
			keys = append(keys, append([]byte(nil), p.Key...))
		}
		if len(pairs) < 1024 {
			return keys, nil
		}
		start = append(append([]byte(nil), pairs[len(pairs)-1].Key...), 0)
	}
}

// dropCovered makes every commit so far durable (FS.Sync, always) and
// then durably deletes the descriptors committed before it: their slices
// were flushed by that Sync's device flush. Descriptors committed after
// the listing stay. When it returns nil, no descriptor committed before
// the call remains.
func (f *FS) dropCovered(ctx context.Context) error {
	f.covered.pending.Store(0)
	keys, err := f.coveredKeys(ctx)
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
	return nil
}
