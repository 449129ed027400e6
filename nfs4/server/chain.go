package server

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/state"
)

// OpChain is the private operation that makes a COMPOUND part of an
// ordered chain (docs/protocol.md §4): the server runs a chain's
// COMPOUNDs in the client's order and refuses, running nothing, every
// one after a COMPOUND of the chain that stopped early.
const OpChain nfsv4.NfsOpnum4 = 0x74786e05 // "txn\5"

// chainLast is the CHAIN4args flag of a chain's last COMPOUND.
const chainLast = 0x1

// errChainNotDurable fails the reply of a chained COMPOUND that ran
// while the sync of an earlier one of its chain failed (or could not be
// waited for): its effects are visible but may not survive a crash
// (NFS4ERR_IO, docs/protocol.md §4).
var errChainNotDurable = fmt.Errorf("%w: an earlier COMPOUND of the chain was not made durable", fs.ErrIO)

// chainArgs are the arguments of OpChain.
type chainArgs struct {
	id    uint64
	seq   uint32
	flags uint32
}

// chainWait bounds how long a COMPOUND waits for the previous one of its
// chain to arrive and execute (not for its sync: see replyTurn); chainIdle is how long an unfinished chain's
// state is kept without activity. Variables for tests.
var (
	chainWait = 10 * time.Second
	chainIdle = time.Minute
)

// chainEnterHook, if set (tests), is called when a chained COMPOUND may
// run: in its turn, or speculatively (turn false). Atomic: a test sets it
// while the server of an earlier test may still run COMPOUNDs.
var chainEnterHook atomic.Pointer[func(seq uint32, turn bool)]

type chainKey struct {
	sess [16]byte
	id   uint64
}

// chainState is one live chain: next is the seq of the COMPOUND that may
// run now, running whether it does (so another COMPOUND with the same seq
// is refused: the seq is used), broken the first seq refused (noSeq:
// none). replied is the seq of the COMPOUND whose reply is settled next
// (in the chain's order: see replyTurn), syncing the number of COMPOUNDs
// between executed and replyTurn, durFailed the first seq whose commits
// were not made durable (noSeq: none). changed is closed (and replaced)
// whenever one of them changes.
type chainState struct {
	next, broken       uint32
	running            bool
	replied, durFailed uint32
	syncing            int
	changed            chan struct{}
	waiters            int
	touched            time.Time
	// pending holds the COMPOUNDs that arrived (enterSpec) and did not
	// execute yet, by seq; unsafeAt is the last seq that executed
	// without being speculation-safe (noSeq: none). See speculation.
	pending  map[uint32]*specInfo
	unsafeAt uint32
}

const noSeq = ^uint32(0)

// maxChains bounds the live chains the server keeps.
const maxChains = 4096

// chainTable holds the server's live chains.
type chainTable struct {
	mu sync.Mutex
	m  map[chainKey]*chainState
}

func newChainTable() *chainTable { return &chainTable{m: map[chainKey]*chainState{}} }

// len reports the number of live chains (for tests).
func (t *chainTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// get returns the state of k, creating it; t.mu is held.
func (t *chainTable) get(k chainKey, now time.Time) *chainState {
	s := t.m[k]
	if s == nil {
		if len(t.m) >= 64 {
			for k2, s2 := range t.m {
				if !s2.busy() && now.Sub(s2.touched) > chainIdle {
					delete(t.m, k2)
				}
			}
		}
		for k2, s2 := range t.m {
			if len(t.m) < maxChains {
				break
			}
			// Too many live chains: forget one nobody waits or runs
			// in (its next COMPOUND waits for a first one, times out
			// and is refused: the client sends it again unchained).
			if !s2.busy() {
				delete(t.m, k2)
			}
		}
		s = &chainState{broken: noSeq, durFailed: noSeq, unsafeAt: noSeq, changed: make(chan struct{})}
		t.m[k] = s
	}
	s.touched = now
	return s
}

// busy reports whether a COMPOUND waits, runs or syncs in the chain.
func (s *chainState) busy() bool { return s.waiters > 0 || s.running || s.syncing > 0 }

func (s *chainState) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// enter waits until the COMPOUND a of session sess may run. It returns
// NFS4_OK if it may (the caller must then call executed and replyTurn:
// chainRun), or the status refusing it: nothing of it may run.
func (t *chainTable) enter(ctx context.Context, sess [16]byte, a *chainArgs) nfsv4.Nfsstat4 {
	st, _, _ := t.enterSpec(ctx, sess, a, nil)
	return st
}

// enterSpec is enter for a COMPOUND that may run speculatively (info
// not nil: info.ok, see speculation). It records the COMPOUND as arrived
// (info, which executed consumes) and returns as soon as it may run in
// turn (turn set, as enter) or speculatively: turn false, and from is
// the seq of the chain's next COMPOUND then — the caller must call enter
// before its commit, and then specValid(from). A refusal (not NFS4_OK)
// is as enter's.
func (t *chainTable) enterSpec(ctx context.Context, sess [16]byte, a *chainArgs, info *specInfo) (st nfsv4.Nfsstat4, turn bool, from uint32) {
	if a.flags&^chainLast != 0 {
		return nfsv4.NFS4ERR_INVAL, false, 0
	}
	k := chainKey{sess, a.id}
	timer := time.NewTimer(chainWait)
	defer timer.Stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(k, time.Now())
	s.waiters++
	defer func() { s.waiters-- }()
	if info != nil && a.seq >= s.next {
		if s.pending == nil {
			s.pending = map[uint32]*specInfo{}
		}
		if _, dup := s.pending[a.seq]; dup {
			// Two COMPOUNDs claim the seq: no speculation past it.
			s.pending[a.seq] = &specInfo{}
		} else {
			s.pending[a.seq] = info
		}
		s.signal() // a later COMPOUND may speculate now
	}
	defer func() {
		if st != nfsv4.NFS4_OK && info != nil && s.pending[a.seq] == info {
			delete(s.pending, a.seq)
		}
	}()
	for {
		switch {
		case a.seq >= s.broken || a.seq < s.next || a.seq == s.next && s.running:
			return nfsv4.NFS4ERR_SEQ_MISORDERED, false, 0
		case a.seq == s.next:
			s.running = true
			return nfsv4.NFS4_OK, true, 0
		case info != nil && s.maySpeculate(a.seq, info):
			return nfsv4.NFS4_OK, false, s.next
		}
		ch := s.changed
		t.mu.Unlock()
		var expired bool
		select {
		case <-ch:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			expired = true
		}
		t.mu.Lock()
		if expired && a.seq > s.next && a.seq < s.broken {
			// The previous COMPOUND did not come: this one and every
			// later one are refused.
			s.broken = a.seq
			s.touched = time.Now()
			s.signal()
			return nfsv4.NFS4ERR_DELAY, false, 0
		}
	}
}

// maySpeculate reports whether the COMPOUND seq, described by info, may
// run before its predecessors executed: it is at most specAhead() after
// the chain's next COMPOUND, each of its predecessors arrived and is
// speculation-safe, and none opens files with one of its open-owners.
func (s *chainState) maySpeculate(seq uint32, info *specInfo) bool {
	if !info.ok || seq-s.next > specAhead() {
		return false
	}
	for p := s.next; p != seq; p++ {
		pi := s.pending[p]
		if pi == nil || !pi.ok {
			return false
		}
		for _, o := range pi.owners {
			if slices.Contains(info.owners, o) {
				return false
			}
		}
	}
	return true
}

// specAhead is how far ahead of the chain's next COMPOUND one may run
// speculatively: one per CPU besides the one running the next. More only
// share the same CPUs — and slow the next COMPOUND, which everything
// after it waits for, and the connection's other work: with 15 running
// speculatively on 2 CPUs (1,000 small-file writes, 16 COMPOUNDs in
// flight), the first one executed in 6 ms instead of 1.3 and the
// requests behind them were read 30 ms late.
func specAhead() uint32 {
	if n := specAheadForTest.Load(); n > 0 {
		return n
	}
	return uint32(max(1, runtime.GOMAXPROCS(0)-1))
}

// specAheadForTest, if not 0, replaces specAhead's value (tests; atomic
// as chainEnterHook).
var specAheadForTest atomic.Uint32

// specValid reports whether the speculative execution of the COMPOUND a,
// begun when the chain's next COMPOUND was from, still stands now that a
// runs in turn (after enter): every COMPOUND that executed meanwhile was
// one it took for speculation-safe.
func (t *chainTable) specValid(sess [16]byte, a *chainArgs, from uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(chainKey{sess, a.id}, time.Now())
	return s.unsafeAt == noSeq || s.unsafeAt < from
}

// executed records that the COMPOUND a of session sess, which enter let
// run, executed its operations with status st (before the sync that makes
// them durable): the next one may run, or, if st is not NFS4_OK, every
// later one is refused. The caller must then call replyTurn.
func (t *chainTable) executed(sess [16]byte, a *chainArgs, info *specInfo, st nfsv4.Nfsstat4) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(chainKey{sess, a.id}, time.Now())
	if a.seq == s.next {
		s.next, s.running = a.seq+1, false
		if pi := s.pending[a.seq]; info == nil || pi != info || !pi.ok {
			s.unsafeAt = a.seq
		}
		delete(s.pending, a.seq)
	}
	s.syncing++
	if st != nfsv4.NFS4_OK && a.seq+1 < s.broken {
		s.broken = a.seq + 1
	}
	s.signal()
}

// replyTurn is called by the executed COMPOUND a once the sync covering
// its commits returned (durFailed: the sync failed). It waits until the
// replies of the chain's earlier COMPOUNDs are settled and reports
// whether the reply of a must fail because the commits of one of them,
// or its own, were not made durable (or it could not learn that: its
// context ended, the server stops). Such a failure breaks the chain
// after a: the COMPOUNDs that did not run yet are refused. The wait has
// no time limit: every earlier COMPOUND ran (a ran after them) and
// settles its reply once its sync returns, however slow the device; a
// limit would answer NFS4ERR_IO, "the storage failed", for a slow sync.
func (t *chainTable) replyTurn(ctx context.Context, sess [16]byte, a *chainArgs, durFailed bool) bool {
	k := chainKey{sess, a.id}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(k, time.Now())
	s.syncing--
	s.waiters++
	defer func() { s.waiters-- }()
	stopped := false
	for s.replied != a.seq && !stopped {
		ch := s.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			stopped = true
		}
		t.mu.Lock()
	}
	settled := s.replied == a.seq // else the server stopped first
	fail := durFailed || !settled || s.durFailed < a.seq
	if fail {
		s.durFailed = min(s.durFailed, a.seq)
		s.broken = min(s.broken, a.seq+1)
	}
	if settled {
		s.replied = a.seq + 1
		if a.flags&chainLast != 0 && s.waiters == 1 {
			// Every COMPOUND of the chain ran and is settled,
			// whatever their status: forget the chain.
			delete(t.m, k)
		}
	}
	s.touched = time.Now()
	s.signal()
	return fail
}

// refuse records that the COMPOUND a of session sess did not run (its
// SEQUENCE failed): it and every later one are refused — unless its seq
// was already used (ran or runs): it is then not the chain's COMPOUND of
// that seq and changes nothing. For an unknown session (!known) no
// COMPOUND can run: only waiters of a chain it had are woken, no state is
// made (a peer without a session does not grow the table).
func (t *chainTable) refuse(sess [16]byte, a *chainArgs, known bool) {
	k := chainKey{sess, a.id}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[k]
	if s == nil && !known {
		return
	}
	s = t.get(k, time.Now())
	if a.seq < s.next || a.seq == s.next && s.running {
		return
	}
	if a.seq < s.broken {
		s.broken = a.seq
	}
	s.signal()
}

// chainRun is the part a chained COMPOUND that enter let run plays in its
// chain: executed once its operations ran, replyTurn once its sync
// returned, and end (deferred) doing whichever of them a panic skipped.
type chainRun struct {
	t    *chainTable
	sess [16]byte
	a    *chainArgs
	// info describes the COMPOUND for speculation (nil: not safe).
	info *specInfo
	// spec is set while the COMPOUND runs speculatively (before its
	// turn: see speculation); from is enterSpec's.
	spec bool
	from uint32
	// ran, replied: executed and replyTurn were called.
	ran, replied bool
}

// executed: see chainTable.executed. No-op on a nil run (unchained).
func (r *chainRun) executed(st nfsv4.Nfsstat4) {
	if r != nil && !r.ran {
		r.ran = true
		r.t.executed(r.sess, r.a, r.info, st)
	}
}

// turn ends the speculation of a speculative run: it waits for the
// COMPOUND's turn. It returns NFS4_OK and whether what ran speculatively
// still stands (specValid), or the status refusing the COMPOUND: then
// nothing of it may run (or have effects) and the run is over — executed
// and replyTurn are not called.
func (r *chainRun) turn(ctx context.Context) (nfsv4.Nfsstat4, bool) {
	r.spec = false
	if st := r.t.enter(ctx, r.sess, r.a); st != nfsv4.NFS4_OK {
		r.t.mu.Lock()
		if s := r.t.m[chainKey{r.sess, r.a.id}]; s != nil && s.pending[r.a.seq] == r.info {
			delete(s.pending, r.a.seq)
		}
		r.t.mu.Unlock()
		r.ran, r.replied = true, true
		return st, false
	}
	return nfsv4.NFS4_OK, r.t.specValid(r.sess, r.a, r.from)
}

// replyTurn: see chainTable.replyTurn. False on a nil run.
func (r *chainRun) replyTurn(ctx context.Context, durFailed bool) bool {
	if r == nil || r.replied {
		return false
	}
	r.replied = true
	return r.t.replyTurn(ctx, r.sess, r.a, durFailed)
}

// end finishes a run a panic interrupted: the chain stops after it.
func (r *chainRun) end(ctx context.Context) {
	if r.spec {
		if st, _ := r.turn(ctx); st != nfsv4.NFS4_OK {
			return
		}
	}
	r.executed(nfsv4.NFS4ERR_SERVERFAULT)
	r.replyTurn(ctx, true)
}

// Speculation. A chained COMPOUND waits for its predecessor to execute
// (enter), so a chain's COMPOUNDs execute one at a time — on a server
// with idle CPUs while the next ones wait. A COMPOUND whose operations
// form one grouped run of the kinds below may instead execute its run
// at once, in its own transaction, and commit it only in its turn
// (chainRun.turn, before the commit in runGroup): the engine's
// optimistic concurrency control then re-executes (fs.Txn.Commit's
// replay) what read anything its predecessors changed, and a replay
// that sees different results fails the commit, after which the run
// executes again in turn, as does one that failed or stopped early
// while speculating. So what commits is what a serial execution in the
// chain's order commits, with the same results.
//
// That covers the engine's state, not the protocol state outside it
// (open and lock states, share reservations), which a speculative run
// changes at once (undone if it does not commit) and reads when it
// runs. Speculation is therefore limited to COMPOUNDs whose protocol
// state is their own and that cannot deny one another anything
// (speculable): OPENs by name with OPEN4_SHARE_DENY_NONE, and WRITE,
// CLOSE and SETATTR only on the current stateid (the COMPOUND's own
// OPEN's), besides handle, lookup and attribute operations; and a
// COMPOUND speculates only while every predecessor that has not executed
// yet arrived and is such a COMPOUND with other open-owners
// (chainState.maySpeculate). Their executions can then neither deny nor
// change anything the others read outside the engine: the results are
// those of the serial execution. A predecessor that executes without
// having been found safe (a second COMPOUND claiming its seq) voids the
// speculation (specValid): the run executes again in turn.
//
// Other sessions and clients may see a speculative open state (a share
// reservation with access but no deny) before the COMPOUND's turn, and,
// if its run does not commit, one that never existed — as they may see
// the open state of a grouped run that conflicts and runs again.

// specInfo describes a chained COMPOUND for speculation: ok if it is
// speculation-safe (speculable), and the open-owners of its OPENs.
type specInfo struct {
	ok     bool
	owners []string
}

// speculable describes ops (a chained COMPOUND's operations after its
// SEQUENCE) for speculation: safe if they are one grouped run that
// changes something and holds only the operations the speculation
// comment allows.
func speculable(minor uint32, ops []decodedOp) *specInfo {
	info := &specInfo{}
	if minor == 0 {
		return info
	}
	changes := false
	for _, op := range ops {
		if !groupable(op) || op.arg == nil {
			return info
		}
		switch a := op.arg.(type) {
		case *nfsv4.NfsArgop4_OP_PUTFH, *nfsv4.NfsArgop4_OP_PUTROOTFH, *nfsv4.NfsArgop4_OP_GETFH,
			*nfsv4.NfsArgop4_OP_SAVEFH, *nfsv4.NfsArgop4_OP_RESTOREFH, *nfsv4.NfsArgop4_OP_LOOKUP,
			*nfsv4.NfsArgop4_OP_GETATTR, *nfsv4.NfsArgop4_OP_ACCESS:
		case *nfsv4.NfsArgop4_OP_OPEN:
			o := &a.Opopen
			if _, byName := o.Claim.(*nfsv4.OpenClaim4_CLAIM_NULL); !byName || o.ShareDeny != nfsv4.OPEN4_SHARE_DENY_NONE {
				return info
			}
			// The owner's name alone: in 4.1 the server ignores the
			// clientid field (the session names the client, and all
			// of a chain's COMPOUNDs are its session's).
			info.owners = append(info.owners, string(o.Owner.Owner))
			changes = true
		case *nfsv4.NfsArgop4_OP_WRITE:
			if !state.IsCurrent(a.Opwrite.Stateid) {
				return info
			}
			changes = true
		case *nfsv4.NfsArgop4_OP_SETATTR:
			if !state.IsCurrent(a.Opsetattr.Stateid) {
				return info
			}
			changes = true
		case *nfsv4.NfsArgop4_OP_CLOSE:
			if !state.IsCurrent(a.Opclose.OpenStateid) {
				return info
			}
		default:
			return info
		}
	}
	info.ok = changes
	return info
}
