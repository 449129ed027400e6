package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
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
		s = &chainState{broken: noSeq, durFailed: noSeq, changed: make(chan struct{})}
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
	if a.flags&^chainLast != 0 {
		return nfsv4.NFS4ERR_INVAL
	}
	k := chainKey{sess, a.id}
	timer := time.NewTimer(chainWait)
	defer timer.Stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(k, time.Now())
	s.waiters++
	defer func() { s.waiters-- }()
	for {
		switch {
		case a.seq >= s.broken || a.seq < s.next || a.seq == s.next && s.running:
			return nfsv4.NFS4ERR_SEQ_MISORDERED
		case a.seq == s.next:
			s.running = true
			return nfsv4.NFS4_OK
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
			return nfsv4.NFS4ERR_DELAY
		}
	}
}

// executed records that the COMPOUND a of session sess, which enter let
// run, executed its operations with status st (before the sync that makes
// them durable): the next one may run, or, if st is not NFS4_OK, every
// later one is refused. The caller must then call replyTurn.
func (t *chainTable) executed(sess [16]byte, a *chainArgs, st nfsv4.Nfsstat4) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(chainKey{sess, a.id}, time.Now())
	if a.seq == s.next {
		s.next, s.running = a.seq+1, false
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
	// ran, replied: executed and replyTurn were called.
	ran, replied bool
}

// executed: see chainTable.executed. No-op on a nil run (unchained).
func (r *chainRun) executed(st nfsv4.Nfsstat4) {
	if r != nil && !r.ran {
		r.ran = true
		r.t.executed(r.sess, r.a, st)
	}
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
	r.executed(nfsv4.NFS4ERR_SERVERFAULT)
	r.replyTurn(ctx, true)
}
