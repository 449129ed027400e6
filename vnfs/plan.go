package vnfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// This file turns vectors of items into COMPOUNDs.
//
// Each item becomes a task. The runner asks tasks, in order, to emit their
// operations into the current batch (one COMPOUND under construction). A
// task checks that what it added fits the negotiated limits and, if not,
// rolls the batch back and reports emitFull; the runner then sends the
// batch and asks again with an empty one. A task whose data does not fit
// one COMPOUND emits a part and reports emitMore. Replies are matched to
// operations through per-operation handlers; the first failing operation
// names the failing item, and nothing after it runs.
//
// The batch tracks which object the current and saved file handles refer
// to, so that a task can reach its directory with the fewest operations
// (path compression, vNFS §4): from the export root (PUTFH + one LOOKUP per
// component), from the current directory (LOOKUPP up to the common
// ancestor, then LOOKUPs; only when the current object is known to be a
// directory), or from the saved directory (RESTOREFH, then the same). A
// task about to leave its directory for a file saves the directory
// (SAVEFH) when the next items would reach their directories more cheaply
// from it.

// Estimated reply sizes of operations (bytes), used to keep replies under
// the negotiated maximum.
const (
	respSmall   = 16  // PUTFH, LOOKUP, SAVEFH, ...
	respFH      = 140 // GETFH
	respOpen    = 200
	respClose   = 24
	respAttr    = 256 // GETATTR of the attributes we ask for
	respWrite   = 32
	respCreate  = 64
	respRename  = 56
	respLink    = 64 // READLINK adds the target length
	respCopy    = 96
	respReadHdr = 16
	rpcReplyHdr = 160 // RPC reply header, COMPOUND header, SEQUENCE result
	rpcCallHdr  = 600 // RPC call header with AUTH_SYS, COMPOUND header, SEQUENCE
	writeHdr    = 48  // encoded WRITE arguments besides the data
)

// pos says what a file handle refers to.
type pos struct {
	path  string // relative to the FS root; "" is the root
	valid bool
	dir   bool // known to be a directory
}

type resFn func(res nfsv4.NfsResop4) error

type opHandler struct {
	task int
	fn   resFn
}

// openRec is an OPEN whose CLOSE has not been seen yet.
type openRec struct {
	task int
	path string
	sid  nfsv4.Stateid4
}

// batch is one COMPOUND under construction.
type batch struct {
	n        *nfsFS
	cp       client.Compound
	hs       []opHandler
	resp     int
	cur      pos
	saved    pos
	compress bool

	maxOps, maxReq, maxResp int
	// lookahead holds the directories of the next tasks (for SAVEFH).
	lookahead []string
	// opens are OPENs executed without their CLOSE (filled by handlers).
	opens []openRec
	// owner is the open-owner of this COMPOUND's transient opens: each
	// COMPOUND has its own, so that COMPOUNDs in flight together never
	// share (and close) each other's open state.
	owner []byte
}

type mark struct {
	ops, hs, resp int
	cur, saved    pos
}

func (b *batch) mark() mark {
	return mark{b.cp.Len(), len(b.hs), b.resp, b.cur, b.saved}
}

func (b *batch) rollback(m mark) {
	b.cp.Truncate(m.ops)
	b.hs = b.hs[:m.hs]
	b.resp, b.cur, b.saved = m.resp, m.cur, m.saved
}

func (b *batch) empty() bool { return b.cp.Len() == 0 }

func (b *batch) over() bool {
	return b.cp.Len() > b.maxOps || b.cp.Size()+rpcCallHdr > b.maxReq || b.resp+rpcReplyHdr > b.maxResp
}

// roomReq is the number of request bytes still free.
func (b *batch) roomReq() int { return b.maxReq - rpcCallHdr - b.cp.Size() }

// roomResp is the number of reply bytes still free.
func (b *batch) roomResp() int { return b.maxResp - rpcReplyHdr - b.resp }

// roomOps is the number of operations still free.
func (b *batch) roomOps() int { return b.maxOps - b.cp.Len() }

func (b *batch) track(task, resp int, fn resFn) {
	b.hs = append(b.hs, opHandler{task, fn})
	b.resp += resp
}

// components splits a relative path.
func components(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// depth returns len(components(p)) without building the slice.
func depth(p string) int {
	if p == "" {
		return 0
	}
	return strings.Count(p, "/") + 1
}

// firstComponent splits p into its first component and the rest; ok is
// false for the empty path.
func firstComponent(p string) (c, rest string, ok bool) {
	if p == "" {
		return "", "", false
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:], true
	}
	return p, "", true
}

// dist returns the LOOKUPPs and LOOKUPs needed to go from a to b. It runs
// for every candidate position of every task a batch plans, so it walks
// the paths in place (splitting them was 3-4% of the vectorized tar's
// CPU).
func dist(a, b string) (ups, downs int) {
	for {
		ca, ra, oka := firstComponent(a)
		cb, rb, okb := firstComponent(b)
		if !oka || !okb || ca != cb {
			return depth(a), depth(b)
		}
		a, b = ra, rb
	}
}

// costFrom returns the operations needed to reach dir from p (-1 if p
// cannot be used: going up requires p to be a directory).
func costFrom(p pos, dir string) int {
	if !p.valid {
		return -1
	}
	ups, downs := dist(p.path, dir)
	if ups > 0 && !p.dir {
		return -1
	}
	return ups + downs
}

// cd makes the current file handle the directory dir.
func (b *batch) cd(task int, dir string) {
	if b.cur.valid && b.cur.path == dir {
		b.cur.dir = true
		return
	}
	best, how := 1+depth(dir), 0
	var cfh []byte
	var canc string
	if b.compress {
		if fh, anc, ok := b.n.dirs().nearest(dir); ok {
			if c := 1 + depth(dir) - depth(anc); c < best {
				best, how, cfh, canc = c, 3, fh, anc
			}
		}
		if c := costFrom(b.cur, dir); c >= 0 && c < best {
			best, how = c, 1
		}
		if c := costFrom(b.saved, dir); c >= 0 && c+1 < best {
			best, how = c+1, 2
		}
	}
	var from string
	switch how {
	case 0:
		b.putRoot(task)
	case 1:
		from = b.cur.path
	case 2:
		b.cp.RestoreFH()
		b.track(task, respSmall, nil)
		from = b.saved.path
	case 3:
		b.cp.PutFH(cfh)
		b.track(task, respSmall, nil)
		from = canc
	}
	ups, _ := dist(from, dir)
	for i := 0; i < ups; i++ {
		b.cp.LookupP()
		b.track(task, respSmall, nil)
	}
	cf, cd := components(from), components(dir)
	for _, c := range cd[len(cf)-ups:] {
		b.cp.Lookup(c)
		b.track(task, respSmall, nil)
	}
	b.cur = pos{path: dir, valid: true, dir: true}
}

func (b *batch) putRoot(task int) {
	if b.n.rootFH != nil {
		b.cp.PutFH(b.n.rootFH)
	} else {
		b.cp.PutRootFH()
	}
	b.track(task, respSmall, nil)
	b.cur = pos{path: "", valid: true, dir: true}
}

// putFH makes the current file handle fh (an object at p, or unknown).
func (b *batch) putFH(task int, fh []byte, p string) {
	b.cp.PutFH(fh)
	b.track(task, respSmall, nil)
	b.cur = pos{path: p, valid: p != "", dir: false}
}

// baseCost is the operations needed to reach dir without the current or
// saved handle: from the root, or from a cached directory handle.
func (b *batch) baseCost(dir string) int {
	c := 1 + depth(dir)
	if _, anc, ok := b.n.dirs().nearest(dir); ok {
		c = min(c, 1+depth(dir)-depth(anc))
	}
	return c
}

// keepDir is called by a task whose current file handle is dir and that
// is about to move it to a non-directory. It saves dir when that makes the
// next tasks cheaper.
func (b *batch) keepDir(task int, dir string) {
	if !b.compress || (b.saved.valid && b.saved.path == dir) {
		return
	}
	gain := -1 // the SAVEFH itself
	for _, next := range b.lookahead {
		without := b.baseCost(next)
		if c := costFrom(b.saved, next); c >= 0 && c+1 < without {
			without = c + 1
		}
		with := 1 + costFrom(pos{path: dir, valid: true, dir: true}, next)
		if with < without {
			gain += without - with
		}
	}
	if gain > 0 {
		b.cp.SaveFH()
		b.track(task, respSmall, nil)
		b.saved = pos{path: dir, valid: true, dir: true}
	}
}

// invalidate forgets file-handle positions at or below p (renamed or
// removed: the handles may now be elsewhere or stale).
func (b *batch) invalidate(p string) {
	b.n.dirs().drop(p)
	for _, q := range []*pos{&b.cur, &b.saved} {
		if q.valid && (q.path == p || strings.HasPrefix(q.path, p+"/")) {
			*q = pos{}
		}
	}
}

// lookup moves the current file handle to name in the current directory.
func (b *batch) lookup(task int, name string) {
	b.cp.Lookup(name)
	b.track(task, respSmall, nil)
	b.cur = pos{path: path.Join(b.cur.path, name), valid: b.cur.valid}
}

// emitResult is what a task's emit reports.
type emitResult int

const (
	// emitDone: the task emitted all its operations.
	emitDone emitResult = iota
	// emitMore: the task emitted part of its operations; call again
	// with a new batch after this one is sent.
	emitMore
	// emitFull: nothing was emitted because it does not fit.
	emitFull
)

// task is one item of a vector call.
type task interface {
	// emit adds the task's (next) operations to b; ti is its index.
	emit(b *batch, ti int) emitResult
	// navDir is the directory the task will navigate to first, if any.
	navDir() (string, bool)
}

// runOpts configure a run.
type runOpts struct {
	op    string             // for errors: "read", "mkdir", ...
	names func(i int) string // path of item i, for errors
	txn   bool               // atomic: one transactional COMPOUND, or a multi-compound transaction if larger
	// readOnly allows pipelining all COMPOUNDs: the vector has no side
	// effects, so running items after a failure is harmless.
	readOnly bool
	// reset clears the outputs of item i (called for items after a
	// failure, whose results are discarded).
	reset func(i int)
	// retryDelay: an item that failed with NFS4ERR_DELAY on one of the
	// operations retryOp accepts had no effect (its only operation with
	// an effect is the last it sends), so it is sent again, with the
	// items the failure kept from running (see runRetry).
	retryDelay bool
	// attempt counts the retries of a run (internal).
	attempt int
}

// maxDelayRetries bounds the resends of items refused with NFS4ERR_DELAY;
// the pauses between them double from 1 ms (about 0.5 s in all).
var maxDelayRetries = 9

// maxDelayRetriesForTest sets maxDelayRetries and returns the old value.
func maxDelayRetriesForTest(v int) int {
	old := maxDelayRetries
	maxDelayRetries = v
	return old
}

// retryOp reports whether an item whose op failed with NFS4ERR_DELAY can
// be sent again when the item's only effect is its last operation
// (REMOVE, RENAME, CREATE) and it failed there or while navigating.
func retryOp(op nfsv4.NfsOpnum4) bool {
	switch op {
	case nfsv4.OP_PUTFH, nfsv4.OP_PUTROOTFH, nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP, nfsv4.OP_SAVEFH,
		nfsv4.OP_RESTOREFH, nfsv4.OP_REMOVE, nfsv4.OP_RENAME, nfsv4.OP_CREATE:
		return true
	}
	return false
}

// delayed reports whether err is a retryable NFS4ERR_DELAY of o.
func delayed(o runOpts, err error) bool {
	if !o.retryDelay || o.txn || o.attempt >= maxDelayRetries {
		return false
	}
	var se *client.StatusError
	return errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_DELAY && retryOp(se.Op)
}

// runRetry sends tasks[redo...] again after a pause (their COMPOUNDs
// failed with a retryable NFS4ERR_DELAY) and maps the result back: it
// returns the index, in tasks, of the first item that failed, or -1.
func (n *nfsFS) runRetry(ctx context.Context, o runOpts, tasks []task, redo []int) (int, error) {
	n.sh.delayRetries.Add(1)
	pause := time.Millisecond << o.attempt
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return redo[0], n.itemErr(o, redo[0], ctx.Err())
	}
	sub := make([]task, len(redo))
	for j, i := range redo {
		sub[j] = tasks[i]
	}
	o2 := o
	o2.attempt++
	if o.names != nil {
		o2.names = func(j int) string { return o.names(redo[j]) }
	}
	if o.reset != nil {
		o2.reset = func(j int) { o.reset(redo[j]) }
	}
	k, err := n.run(ctx, o2, sub)
	if err == nil {
		return -1, nil
	}
	var e *Error
	if errors.As(err, &e) && e.Index < len(redo) {
		e.Index = redo[e.Index]
	}
	if k < len(redo) {
		return redo[k], err
	}
	return redo[len(redo)-1], err
}

// run executes tasks in order, splitting them over as many COMPOUNDs as
// needed. It returns the number of tasks that succeeded and, on failure,
// an *Error for the first failed task.
//
// COMPOUNDs are pipelined (up to Config.Window in flight) when that cannot
// break the failure semantics: always for read-only vectors (o.readOnly;
// results after a failure are discarded); for ordered vectors, when the
// server chains COMPOUNDs (docs/protocol.md §4: it runs them in order and
// refuses, running nothing, those after one that stopped early); and
// otherwise only for COMPOUNDs that continue an item already in flight
// (the later chunks of a large write) — a COMPOUND that starts a new item
// waits until every earlier one has succeeded, so items after a failure
// are never executed.
//
// Whether the server chains is learnt from the first chained COMPOUND,
// sent alone; a refused COMPOUND (nothing of it ran) is sent again
// unchained once those before it succeeded, and the rest of the run is
// unchained.
func (n *nfsFS) run(ctx context.Context, o runOpts, tasks []task) (int, error) {
	if len(tasks) == 0 {
		return 0, nil
	}
	window := n.window
	if o.txn || window < 1 {
		window = 1
	}
	do := n.c.Do
	if n.sh.do != nil {
		do = n.sh.do
	}
	// chain: ordered COMPOUNDs of this run are sent as one chain.
	chain := window > 1 && !o.readOnly && !n.unordered && !o.txn && n.join.IsZero() && n.sh.chainOK.Load() != 2
	if chain {
		window = max(window, n.chainWindow)
	}
	var chainID uint64
	var chainSeq uint32
	if chain {
		chainID = n.c.NewChainID()
	}
	var q []*flight
	failIdx, failErr := -1, error(nil)
	// redo lists the tasks of unordered COMPOUNDs refused with a
	// retryable NFS4ERR_DELAY: the failed item and the rest of its
	// COMPOUND, which did not run.
	var redo []int
	redoIdx, redoErr := -1, error(nil) // the first of them
	// multi is the multi-compound transaction of a transactional vector
	// too large for one COMPOUND (begun when the first COMPOUND turns
	// out not to hold it all); it is aborted unless committed below.
	var multi client.TxnID
	defer func() {
		if !multi.IsZero() {
			if err := n.c.TxnEnd(context.WithoutCancel(ctx), multi, false); err != nil {
				n.cfg.Logger.Debug("vnfs: aborting transaction", "err", err)
			}
		}
	}()
	finish := func() {
		f := q[0]
		q = q[1:]
		<-f.done
		if f.b.cp.Chain != nil {
			switch {
			case f.err == nil:
				n.sh.chainOK.Store(1)
			case failIdx < 0 && (errors.Is(f.err, client.ErrChainRefused) || errors.Is(f.err, client.ErrChainUnsupported)):
				// Nothing of it ran and everything before it
				// succeeded: send it again, unchained, and the
				// rest of the run too (the COMPOUNDs after it in
				// flight were refused as well).
				if errors.Is(f.err, client.ErrChainUnsupported) {
					n.sh.chainOK.Store(2)
				} else {
					n.cfg.Logger.Debug("vnfs: chain refused; sending unchained", "err", f.err)
				}
				chain = false
				f.b.cp.Chain = nil
				f.rep, f.err = do(ctx, &f.b.cp)
			}
		}
		idx, err := n.processQuiet(ctx, o, f, failIdx >= 0)
		if idx >= 0 && failIdx < 0 && n.unordered && delayed(o, err) && len(f.b.hs) > 0 {
			for i := idx; i <= f.b.hs[len(f.b.hs)-1].task; i++ {
				redo = append(redo, i)
			}
			if redoErr == nil || idx < redoIdx {
				redoIdx, redoErr = idx, err
			}
			return
		}
		if idx >= 0 && failIdx < 0 {
			failIdx, failErr = idx, err
		}
	}
	prevLast := -1          // last task of the previous COMPOUND
	var startOfLast *flight // the COMPOUND that started task prevLast
	inQueue := func(f *flight) bool {
		for _, x := range q {
			if x == f {
				return true
			}
		}
		return false
	}
	launch := func(b *batch, first int, startsNew, last bool) {
		// A COMPOUND starting an item waits for all earlier ones; one
		// continuing an item waits for the COMPOUND that started it
		// (which may create the file); later parts of one item may be
		// in flight together. Chained, the server keeps the order; the
		// first chained COMPOUND goes alone while the server's support
		// is unknown.
		ordered := !o.readOnly && !n.unordered
		continues := len(b.hs) > 0 && b.hs[0].task == prevLast
		if chain && chainSeq > 0 && n.sh.chainOK.Load() == 0 {
			for len(q) > 0 && failIdx < 0 {
				finish()
			}
		}
		wait := func() {
			if chain {
				return
			}
			if ordered && startsNew {
				for len(q) > 0 && failIdx < 0 {
					finish()
				}
			} else if !o.readOnly && continues {
				for inQueue(startOfLast) && failIdx < 0 {
					finish()
				}
			}
		}
		wait()
		for len(q) >= window && failIdx < 0 {
			finish()
		}
		wait() // finish may have ended the chain
		if failIdx >= 0 {
			return
		}
		if chain {
			b.cp.Chain = &client.Chain{ID: chainID, Seq: chainSeq, Last: last}
			chainSeq++
		}
		b.cp.Txn = o.txn && multi.IsZero()
		b.cp.TxnID = n.join
		if !multi.IsZero() {
			b.cp.TxnID = multi
		}
		b.cp.Tag = "vnfs " + o.op
		f := &flight{b: b, first: first, done: make(chan struct{})}
		go func() {
			f.rep, f.err = do(ctx, &f.b.cp)
			close(f.done)
		}()
		q = append(q, f)
		if len(b.hs) > 0 {
			last := b.hs[len(b.hs)-1].task
			if last != prevLast || !continues {
				startOfLast = f
			}
			prevLast = last
		}
	}
	b := n.newBatch()
	if chain {
		b.maxOps-- // OP_CHAIN
	}
	first, started, startsNew := 0, -1, false
	for i := 0; i < len(tasks) && failIdx < 0; {
		b.lookahead = b.lookahead[:0]
		for j := i + 1; j < len(tasks) && len(b.lookahead) < 2; j++ {
			if d, ok := tasks[j].navDir(); ok {
				b.lookahead = append(b.lookahead, d)
			}
		}
		r := tasks[i].emit(b, i)
		if r != emitFull && i > started {
			started, startsNew = i, true
		}
		if r == emitDone {
			i++
			if i < len(tasks) {
				continue
			}
		}
		if r == emitFull && b.empty() && chain {
			// The item needs every operation a COMPOUND may have:
			// none is left for OP_CHAIN. It and the rest of the run
			// go unchained (after the chained COMPOUNDs in flight).
			chain = false
			b = n.newBatch()
			continue
		}
		if r == emitFull && b.empty() {
			for len(q) > 0 {
				finish()
			}
			if failIdx >= 0 {
				break
			}
			return i, n.itemErr(o, i, fmt.Errorf("item does not fit one COMPOUND (limits %d ops, %d/%d bytes)", b.maxOps, b.maxReq, b.maxResp))
		}
		if o.txn && multi.IsZero() && (r != emitDone || i < len(tasks)) {
			// Too large for one transactional COMPOUND: this one and
			// the next run in a multi-compound transaction
			// (docs/protocol.md §3). A server without it refuses
			// before anything ran.
			id, err := n.c.TxnBegin(ctx)
			if err != nil {
				return 0, fmt.Errorf("vnfs: %s: %w (%d items, more than one COMPOUND)", o.op, err, len(tasks))
			}
			multi = id
		}
		launch(b, first, startsNew, r == emitDone && i >= len(tasks))
		b = n.newBatch()
		if chain {
			b.maxOps-- // OP_CHAIN
		}
		first, startsNew = i, false
	}
	for len(q) > 0 {
		finish()
	}
	if failIdx >= 0 && redoErr != nil && redoIdx < failIdx {
		// An earlier item was refused and not retried.
		failIdx, failErr = redoIdx, redoErr
	}
	// Attempts are counted while no item gets through.
	if failIdx < 0 && len(redo) > 0 {
		if len(redo) < len(tasks) {
			o.attempt = 0
		}
		sort.Ints(redo)
		failIdx, failErr = n.runRetry(ctx, o, tasks, redo)
	} else if failIdx > 0 && !n.unordered && delayed(runOpts{retryDelay: o.retryDelay, txn: o.txn}, failErr) {
		o.attempt = 0
		rest := make([]int, 0, len(tasks)-failIdx)
		for i := failIdx; i < len(tasks); i++ {
			rest = append(rest, i)
		}
		failIdx, failErr = n.runRetry(ctx, o, tasks, rest)
	} else if failIdx >= 0 && !n.unordered && delayed(o, failErr) {
		// In order: nothing after the failed item ran.
		rest := make([]int, 0, len(tasks)-failIdx)
		for i := failIdx; i < len(tasks); i++ {
			rest = append(rest, i)
		}
		failIdx, failErr = n.runRetry(ctx, o, tasks, rest)
	}
	if failIdx >= 0 {
		if o.reset != nil {
			for i := failIdx + 1; i < len(tasks); i++ {
				o.reset(i)
			}
		}
		if o.txn {
			return 0, failErr // the deferred abort discards a multi-compound transaction
		}
		return failIdx, failErr
	}
	if !multi.IsZero() {
		id := multi
		multi = client.TxnID{}
		if err := n.c.TxnEnd(ctx, id, true); err != nil {
			return 0, fmt.Errorf("vnfs: %s: %w", o.op, err)
		}
	}
	return len(tasks), nil
}

// flight is a COMPOUND in flight.
type flight struct {
	b     *batch
	first int // first task in b
	done  chan struct{}
	rep   *client.Reply
	err   error
}

// processQuiet runs the handlers of a completed COMPOUND and closes files it
// left open. It returns the index of the failed task (-1 if none) and its
// error. With quiet, an earlier COMPOUND already failed: handler errors
// are ignored (only the cleanup matters).
func (n *nfsFS) processQuiet(ctx context.Context, o runOpts, f *flight, quiet bool) (int, error) {
	b := f.b
	if f.err != nil {
		if errors.Is(f.err, client.ErrTxnUnsupported) {
			return f.first, fmt.Errorf("vnfs: %s: %w", o.op, ErrTxnUnsupported)
		}
		return f.first, n.itemErr(o, f.first, f.err)
	}
	rep := f.rep
	defer n.closeDangling(ctx, b)
	for k, res := range rep.Results {
		h := b.hs[k]
		if st := rep.Statuses[k]; st != nfsv4.NFS4_OK {
			if staleHandle(st) {
				n.sh.dirs.clear()
			}
			return h.task, n.itemErr(o, h.task, &client.StatusError{Op: res.GetResop(), Index: k, Status: st})
		}
		if h.fn != nil {
			if err := h.fn(res); err != nil && !quiet {
				return h.task, n.itemErr(o, h.task, err)
			}
		}
	}
	if rep.Status != nfsv4.NFS4_OK || len(rep.Results) != len(b.hs) {
		t := f.first
		if len(rep.Results) < len(b.hs) {
			t = b.hs[len(rep.Results)].task
		}
		return t, n.itemErr(o, t, &client.StatusError{Op: nfsv4.OP_ILLEGAL, Status: rep.Status})
	}
	return -1, nil
}

func (n *nfsFS) itemErr(o runOpts, i int, err error) error {
	name := ""
	if o.names != nil {
		name = o.names(i)
	}
	return &Error{Op: o.op, Index: i, Path: name, Err: err}
}

// closeDangling closes files a failed COMPOUND opened but did not close.
func (n *nfsFS) closeDangling(ctx context.Context, b *batch) {
	if len(b.opens) == 0 {
		return
	}
	cp := client.Compound{TxnID: b.cp.TxnID} // opens of a transaction are closed in it
	for _, o := range b.opens {
		if n.rootFH != nil {
			cp.PutFH(n.rootFH)
		} else {
			cp.PutRootFH()
		}
		for _, c := range components(o.path) {
			cp.Lookup(c)
		}
		cp.Close(o.sid)
		// Each close in its own COMPOUND so that one failure does not
		// leave the others open.
		if _, err := n.c.Do(context.WithoutCancel(ctx), &cp); err != nil {
			n.cfg.Logger.Debug("vnfs: closing dangling open", "path", o.path, "err", err)
		}
		cp.Reset()
	}
	b.opens = nil
}

func (n *nfsFS) newBatch() *batch {
	return &batch{n: n, compress: !n.cfg.NoPathCompression,
		maxOps: n.maxOps, maxReq: n.maxReq, maxResp: n.maxResp}
}

// openOwner returns the open-owner for transient opens in b.
func (b *batch) openOwner() []byte {
	if b.owner == nil {
		b.owner = b.n.owner()
	}
	return b.owner
}
