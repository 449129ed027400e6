package fuse

import (
	"os"
	"slices"
	"sync"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

// DefaultWriteBehindBytes bounds the bytes of answered but not yet
// committed WRITE requests of a local mount (or of a Group): see
// writeBehind.
const DefaultWriteBehindBytes = 8 << 20

// DefaultWriteBehindDelay is how long answered writes may wait for their
// commit when nothing else asks for it (see writeBehind, "Batches").
const DefaultWriteBehindDelay = 10 * time.Millisecond

// writeBehind answers WRITE requests before their engine transaction runs
// (issue 5: the kernel sends a file's next WRITE only after the previous
// one is answered, so the engine's time per write added directly to every
// write(2)). A WRITE's bytes are copied out of go-fuse's request buffer
// into the queue and the request is answered; one goroutine commits the
// queue in order, consecutive writes to one inode in one NoSync
// transaction (contiguous small writes merged into one engine Write).
//
// Nothing can observe the difference: every other engine access of the
// mount (m.view, m.update, m.appendData, m.syncEngine, so every request
// but a queued WRITE, and the unpin after FORGET) first waits until every
// write queued before it has committed (wait), and mounts of a Group share
// one queue. Kernel-side, the answered data is in the page cache and the
// kernel's own file size, as it was with a synchronous WRITE; the next
// GETATTR waits for the queue. Durability is unchanged: a NoSync commit
// is durable at the next FS.Sync (fsync, close of a written file), which
// waits for the queue first, and a crash loses at most what was not
// fsynced, as before.
//
// A write that fails in the background (ENOSPC, EIO, ...) is reported on
// its handle, as NFS and writeback caches do: by the next WRITE through
// that handle, or by its fsync or close (FLUSH). Writes through O_APPEND
// or O_SYNC/O_DSYNC handles and writes inside a sandbox stay synchronous.
//
// Batches. The committer does not start at the first queued write: the
// queue commits once it holds batch bytes, once someone waits for it
// (wait: any other request, fsync, close), once a writer finds it full,
// or delay after the first write it holds, whichever comes first. A
// sequential writer's writes then share one commit per batch bytes
// (4 MiB) instead of one per write or two, and its large writes join one
// open transaction: fewer commits, engine replays of the open
// transaction and goroutine wake-ups per write (docs/fuse.md
// "Write-behind"). Nothing can observe the delay but a crash of the
// mount, which loses at most the writes of the last delay that were not
// fsynced (they were not durable either way).
type writeBehind struct {
	mu    sync.Mutex
	cond  sync.Cond     // done, bytes or free changed
	max   int           // bound on bytes queued and in progress
	batch int           // queued bytes that start the committer
	delay time.Duration // longest wait of a write for its commit; 0: none

	timer    *time.Timer // armed while writes are queued and not due
	timerGen uint64      // which timer is q.timer (a stopped one may still fire)
	dueSeq   uint64      // writes up to this one are due: commit them now

	queue   []*wbWrite
	bytes   int    // bytes of buffers queued or being committed
	enq     uint64 // sequence number of the last write queued
	done    uint64 // every write up to this one has been committed (or failed)
	busy    bool   // a goroutine is committing a batch (commitSome)
	spawned bool   // the committer goroutine (run) exists
}

// wbWrite is one queued WRITE, or (txn set) an open transaction holding
// large writes.
type wbWrite struct {
	m    *Server
	h    *handle
	cred fs.Cred
	ino  fs.Ino
	off  uint64
	data []byte // owned: a copy of the request's
	seq  uint64
	txn  *wbTxn
}

// wbTxn is an open NoSync transaction into which the WRITE handlers of
// large writes (at least wbLarge bytes) write directly: the engine
// stores the data (checksum, slice write) while it is still in the
// request buffer and in this CPU's cache, and places it in the
// transaction; the committer only commits. The slice write runs in the
// background from the request buffer itself when the mount could take
// it from go-fuse (bufLender), else from a staging copy. Copying a large write into
// the queue instead cost the copy and, worse, a checksum and a staging
// copy of data that had gone cold: +35% of the mount's CPU per 1 MiB
// write (docs/fuse.md "Write-behind"). Writes join the transaction while
// it is the queue's tail and not yet taken; one begun while the previous
// one commits conflicts with it and is replayed by the engine at its own
// commit (Write's replay re-places the stored slices), so commits keep
// the queue's order.
type wbTxn struct {
	mu sync.Mutex // serializes its writers (an fs.Txn is not safe for concurrent use)
	// Guarded by writeBehind.mu.
	pending int  // writers that took a sequence number and have not finished
	closed  bool // a write failed (the transaction may be poisoned): no more writes
	bytes   int  // counted in writeBehind.bytes until committed
	// syncSoon: it holds a write whose fsync is expected next
	// (queueWrite's syncNext): whoever commits it runs the early Sync
	// (presync) right after, before taking the next batch.
	syncSoon bool
	// Guarded by mu, then owned by the committer.
	t       *fs.Txn
	handles []*handle
	marks   map[fs.Ino]*[2]uint64 // change before the first and after the last write
	inos    []fs.Ino
}

// wbLarge is the smallest write that goes into the open transaction
// (wbTxn); smaller ones are copied into the queue and merged.
const wbLarge = 64 << 10

// wbMergeMax bounds the bytes of contiguous small writes merged into one
// engine Write.
const wbMergeMax = 1 << 20

// wbBatch is the most queued bytes that wait for a commit (see
// writeBehind, "Batches"); at most half the queue's bound.
const wbBatch = 4 << 20

// newWriteBehind returns a queue of at most bound bytes whose writes wait
// at most delay for their commit (0 or negative: they commit at once).
func newWriteBehind(bound int, delay time.Duration) *writeBehind {
	q := &writeBehind{max: bound, batch: min(wbBatch, bound/2), delay: max(delay, 0)}
	q.cond.L = &q.mu
	return q
}

// due reports whether the committer should commit the queue now (q.mu
// held).
func (q *writeBehind) due() bool {
	return len(q.queue) > 0 && (q.delay == 0 || q.bytes >= q.batch || q.queue[0].seq <= q.dueSeq)
}

// schedule starts the committer if the queue is due, or else arms the
// timer that makes it due (q.mu held; called after queueing a write).
func (q *writeBehind) schedule() {
	if q.due() {
		q.spawn()
		return
	}
	if q.timer == nil && len(q.queue) > 0 {
		q.timerGen++
		gen := q.timerGen
		q.timer = time.AfterFunc(q.delay, func() { q.expire(gen) })
	}
}

// expire makes every write queued so far due: the timer gen of schedule
// fired (unless commitSome took the writes and stopped it meanwhile).
func (q *writeBehind) expire(gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if gen != q.timerGen || q.timer == nil {
		return
	}
	q.timer = nil
	q.dueSeq = max(q.dueSeq, q.enq)
	q.spawn()
}

// full waits while n more bytes would pass the bound (q.mu held); what is
// queued is due meanwhile.
func (q *writeBehind) full(n int) {
	for q.bytes > 0 && q.bytes+n > q.max {
		q.dueSeq = max(q.dueSeq, q.enq)
		q.spawn()
		q.cond.Wait()
	}
}

// wbCost is what a queued buffer counts against q.max.
func wbCost(b []byte) int { return cap(b) }

// addLarge writes data to ino at off in the open transaction at the
// queue's tail (beginning one if there is none), waiting while the queue
// is full. Called as add. An error is the write's own (nothing was
// answered or queued).
//
// The write's sequence number is taken, and the transaction marked
// pending, while it is the queue's tail: every item queued later has a
// larger number, and the transaction is not committed before the write
// is in it (commitTxn waits for pending writers).
//
// With a loan (the request buffer taken from go-fuse, bufLender) the
// slice store writes data from that buffer in the background instead of
// a staging copy (slice.WithLoan).
//
// syncNext (see queueWrite) makes everything queued so far due at once,
// and the transaction start the early Sync when it commits.
func (q *writeBehind) addLarge(m *Server, h *handle, c fs.Cred, ino fs.Ino, off uint64, data []byte, loan *slice.Loan, syncNext bool) error {
	q.mu.Lock()
	q.full(len(data))
	var x *wbWrite
	if n := len(q.queue); n > 0 {
		if t := q.queue[n-1]; t.txn != nil && !t.txn.closed && t.m == m && sameCred(t.cred, c) {
			x = t
		}
	}
	if x == nil {
		t, err := m.eng.Begin(m.ctx, c, fs.TxnOptions{NoSync: true})
		if err != nil {
			q.mu.Unlock()
			return err
		}
		x = &wbWrite{m: m, h: h, cred: c, ino: ino, txn: &wbTxn{t: t, marks: map[fs.Ino]*[2]uint64{}}}
		q.queue = append(q.queue, x)
	}
	tx := x.txn
	q.bytes += len(data)
	tx.bytes += len(data)
	tx.pending++
	q.enq++
	x.seq = q.enq
	if syncNext {
		tx.syncSoon = true
		q.dueSeq = max(q.dueSeq, x.seq)
	}
	q.schedule()
	q.mu.Unlock()

	tx.mu.Lock()
	err := tx.write(m, h, ino, off, data, loan)
	tx.mu.Unlock()

	q.mu.Lock()
	if err != nil {
		tx.closed = true // it may be poisoned: no more writes
	}
	tx.pending--
	q.cond.Broadcast()
	q.mu.Unlock()
	return err
}

// write writes data into the open transaction (tx.mu held).
func (tx *wbTxn) write(m *Server, h *handle, ino fs.Ino, off uint64, data []byte, loan *slice.Loan) error {
	mk := tx.marks[ino]
	if mk == nil {
		mk = new([2]uint64)
		if err := tx.t.ChangeMark(m.ctx, ino, &mk[0]); err != nil {
			return err
		}
	}
	ctx := m.ctx
	if loan != nil {
		ctx = slice.WithLoan(ctx, loan)
	}
	if err := tx.t.Write(ctx, ino, off, data); err != nil {
		m.mirrors.invalidate(ino)
		return err
	}
	m.mirrors.writeAhead(ino, tx, off, data)
	if err := tx.t.ChangeMark(m.ctx, ino, &mk[1]); err != nil {
		return err
	}
	if tx.marks[ino] == nil {
		tx.marks[ino] = mk
		tx.inos = append(tx.inos, ino)
	}
	if !slices.Contains(tx.handles, h) {
		tx.handles = append(tx.handles, h)
	}
	return nil
}

// commitTxn commits an open transaction of large writes (see wbTxn),
// taken off the queue, once its pending writers are done. If it holds a
// write whose fsync is expected next (wbTxn.syncSoon) and committed, it
// claims the early Sync (presync.claim) and returns the function that
// runs it, for the caller to run once it has marked the transaction
// done.
func (q *writeBehind) commitTxn(w *wbWrite) (syncNow func()) {
	tx, m := w.txn, w.m
	q.mu.Lock()
	for tx.pending > 0 {
		q.cond.Wait()
	}
	q.mu.Unlock()
	tx.mu.Lock() // for the memory model; no writer is left
	tx.mu.Unlock()
	if len(tx.handles) == 0 { // its only write failed
		tx.t.Abort()
		return nil
	}
	var err error
	if f := m.wbFault.Load(); f != nil {
		err = (*f)(tx.inos[0])
	}
	if err != nil {
		tx.t.Abort()
	} else {
		err = tx.t.Commit(m.ctx)
	}
	if err != nil {
		m.log.Debug("background write failed", "inos", tx.inos, "err", err)
		for _, h := range tx.handles {
			h.setErr(err)
		}
		for _, ino := range tx.inos {
			m.handles.setErr(ino, err)
			m.nodes.forgetPages(ino)
			m.mirrors.committed(ino, tx, false, 0, 0)
		}
		m.notify.push(&invalidation{inos: tx.inos})
		return nil
	}
	if tx.syncSoon {
		// Claimed before the transaction is marked done, so that the
		// FSYNC that waits for the queue then waits for this Sync
		// (syncEngine) instead of starting its own.
		syncNow = m.presync.claim(m)
	}
	for _, ino := range tx.inos {
		mk := tx.marks[ino]
		m.nodes.wrote(ino, mk[0], mk[1])
		m.mirrors.committed(ino, tx, true, mk[0], mk[1])
	}
	if m.cfg.Group != nil {
		m.cfg.Group.broadcast(m, &invalidation{inos: tx.inos})
	}
	return syncNow
}

// spawn starts the committer goroutine unless it exists (q.mu held).
func (q *writeBehind) spawn() {
	if !q.spawned {
		q.spawned = true
		go q.run()
	}
}

// add queues a write of data (copied) to ino at off through handle h,
// waiting while the queue is full. The caller has checked that no sandbox
// is active and holds the sandbox gate shared, so none can begin until
// the write is queued (begin waits for the queue afterwards).
func (q *writeBehind) add(m *Server, h *handle, c fs.Cred, ino fs.Ino, off uint64, data []byte) {
	buf := make([]byte, len(data))
	q.mu.Lock()
	q.full(wbCost(buf))
	q.bytes += wbCost(buf)
	q.mu.Unlock()
	copy(buf, data) // outside the lock: the committer runs meanwhile
	q.mu.Lock()
	q.enq++
	q.queue = append(q.queue, &wbWrite{m: m, h: h, cred: c, ino: ino, off: off, data: buf, seq: q.enq})
	q.schedule()
	q.mu.Unlock()
}

// wait returns once every write queued before the call has committed or
// failed. If nobody is committing (the committer goroutine has not run
// yet), the caller commits the queue itself instead of waiting for it:
// an fsync or close right after a write does not wait for a goroutine to
// be scheduled.
func (q *writeBehind) wait() {
	q.mu.Lock()
	target := q.enq
	q.dueSeq = max(q.dueSeq, target) // for a committer running meanwhile
	for q.done < target {
		if !q.commitSome() {
			q.cond.Wait()
		}
	}
	q.mu.Unlock()
}

// run is the committer goroutine: it commits the queue while it is due
// (and arms the timer for what it leaves), letting a waiter that took a
// batch (wait) finish first.
func (q *writeBehind) run() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.busy {
			q.cond.Wait()
			continue
		}
		if !q.due() || !q.commitSome() {
			q.spawned = false
			q.schedule()
			return
		}
	}
}

// commitSome commits what is queued unless another goroutine is
// committing, and reports whether it did. q.mu is held on entry and exit
// (released while committing). Batches are taken one at a time (busy),
// so writes commit in the order they were queued.
func (q *writeBehind) commitSome() bool {
	if q.busy || len(q.queue) == 0 {
		return false
	}
	q.busy = true
	batch := q.queue
	q.queue = nil
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	q.mu.Unlock()
	for len(batch) > 0 {
		if w := batch[0]; w.txn != nil {
			syncNow := q.commitTxn(w)
			q.mu.Lock()
			q.bytes -= w.txn.bytes
			q.done = w.seq // final: off the queue, no writer pending
			q.cond.Broadcast()
			q.mu.Unlock()
			if syncNow != nil {
				// In this goroutine, not another: the FSYNC
				// expected next waits for it (presync.wait).
				syncNow()
			}
			batch = batch[1:]
			continue
		}
		n := 1
		for n < len(batch) && batch[n].txn == nil && sameTarget(batch[0], batch[n]) {
			n++
		}
		commitRun(batch[:n])
		q.mu.Lock()
		for _, w := range batch[:n] {
			q.bytes -= wbCost(w.data)
			w.data = nil
		}
		q.done = batch[n-1].seq
		q.cond.Broadcast()
		q.mu.Unlock()
		batch = batch[n:]
	}
	q.mu.Lock()
	q.busy = false
	q.cond.Broadcast()
	return true
}

// sameTarget reports whether b may join a's transaction: same mount,
// inode, handle and caller.
func sameTarget(a, b *wbWrite) bool {
	return a.m == b.m && a.ino == b.ino && a.h == b.h && sameCred(a.cred, b.cred)
}

func sameCred(a, b fs.Cred) bool {
	return a.Uid == b.Uid && a.Gid == b.Gid && slices.Equal(a.Groups, b.Groups)
}

// wbPiece is one engine Write of a run: a queued write, or contiguous
// small ones merged.
type wbPiece struct {
	off  uint64
	data []byte
}

// wbPieces merges the run's contiguous small writes (the kernel sends a
// sequential writer's small write(2)s one by one without the writeback
// cache): one slice instead of one per write.
func wbPieces(run []*wbWrite) []wbPiece {
	var out []wbPiece
	for i := 0; i < len(run); {
		w := run[i]
		j := i + 1
		end, total := w.off+uint64(len(w.data)), len(w.data)
		for j < len(run) && run[j].off == end && total+len(run[j].data) <= wbMergeMax && len(w.data) < wbLarge && len(run[j].data) < wbLarge {
			end += uint64(len(run[j].data))
			total += len(run[j].data)
			j++
		}
		if j == i+1 {
			out = append(out, wbPiece{w.off, w.data})
		} else {
			buf := make([]byte, 0, total)
			for _, x := range run[i:j] {
				buf = append(buf, x.data...)
			}
			out = append(out, wbPiece{w.off, buf})
		}
		i = j
	}
	return out
}

// commitRun commits writes to one inode through one handle as one
// transaction; if that fails, each write alone, so that the failure is
// reported on the handle exactly when one of its writes failed.
func commitRun(run []*wbWrite) {
	w := run[0]
	m := w.m
	if err := m.commitWrites(w.cred, w.ino, wbPieces(run)); err == nil || len(run) == 1 {
		if err != nil {
			m.writeFailed(w, err)
		}
		return
	}
	for _, x := range run {
		if err := m.commitWrites(x.cred, x.ino, []wbPiece{{x.off, x.data}}); err != nil {
			m.writeFailed(x, err)
		}
	}
}

// writeFailed records that answered write w failed: the handle reports
// it, and the kernel's pages and size, which hold what the kernel thinks
// was written, are dropped (and not kept at the next open).
func (m *Server) writeFailed(w *wbWrite, err error) {
	m.log.Debug("background write failed", "ino", w.ino, "off", w.off, "len", len(w.data), "err", err)
	w.h.setErr(err)
	m.handles.setErr(w.ino, err)
	m.nodes.forgetPages(w.ino)
	m.notify.push(&invalidation{inos: []fs.Ino{w.ino}})
}

// commitWrites writes ps to ino in one NoSync transaction, outside any
// sandbox (writes are queued only while none is active, and Begin waits
// for the queue), and records the kernel's page cache as current if it was
// (see nodeTable.wrote).
func (m *Server) commitWrites(c fs.Cred, ino fs.Ino, ps []wbPiece) error {
	if f := m.wbFault.Load(); f != nil {
		if err := (*f)(ino); err != nil {
			return err
		}
	}
	var before, after fs.Attr
	err := m.eng.DoOpts(m.ctx, c, fs.TxnOptions{NoSync: true}, func(t *fs.Txn) (err error) {
		if before, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange); err != nil {
			return err
		}
		for _, p := range ps {
			if err = t.Write(m.ctx, ino, p.off, p.data); err != nil {
				return err
			}
		}
		after, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange)
		return err
	})
	if err != nil {
		m.mirrors.invalidate(ino)
		return err
	}
	m.nodes.wrote(ino, before.Change, after.Change)
	m.mirrors.apply(ino, before.Change, after.Change, func(f *os.File) error {
		for _, p := range ps {
			if _, err := f.WriteAt(p.data, int64(p.off)); err != nil {
				return err
			}
		}
		return nil
	})
	if m.cfg.Group != nil {
		m.cfg.Group.broadcast(m, &invalidation{inos: []fs.Ino{ino}})
	}
	return nil
}

// setErr records a background write failure, reported by the handle's
// next WRITE, fsync or FLUSH (the first one kept).
func (h *handle) setErr(err error) {
	h.errMu.Lock()
	if h.err == nil {
		h.err = err
	}
	h.errMu.Unlock()
}

// setErr records a background write failure of ino on every handle of
// this mount open for writing on it, as Linux reports a writeback error
// to every descriptor open on the file at the time (once each).
func (t *handleTable) setErr(ino fs.Ino, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.mu.m {
		if h.ino == ino && h.write {
			h.setErr(err)
		}
	}
}

// takeErr returns and clears the handle's background write failure.
func (h *handle) takeErr() error {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	err := h.err
	h.err = nil
	return err
}

// waitWrites waits for the write-behind queue of the mount (of its Group)
// before an engine access; a no-op when write-behind is off.
func (m *Server) waitWrites() {
	if m.wb != nil {
		m.wb.wait()
	}
}
