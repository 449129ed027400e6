package server

import (
	"context"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// OpChain is the private operation that makes a COMPOUND part of an
// ordered chain (docs/protocol.md §4): the server runs a chain's
// COMPOUNDs in the client's order and refuses, running nothing, every
// one after a COMPOUND of the chain that stopped early.
const OpChain nfsv4.NfsOpnum4 = 0x74786e05 // "txn\5"

// chainLast is the CHAIN4args flag of a chain's last COMPOUND.
const chainLast = 0x1

// chainArgs are the arguments of OpChain.
type chainArgs struct {
	id    uint64
	seq   uint32
	flags uint32
}

// chainWait bounds how long a COMPOUND waits for the previous one of its
// chain to arrive and finish; chainIdle is how long an unfinished chain's
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
// none). changed is closed (and replaced) whenever next or broken change.
type chainState struct {
	next, broken uint32
	running      bool
	changed      chan struct{}
	waiters      int
	touched      time.Time
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
				if s2.waiters == 0 && !s2.running && now.Sub(s2.touched) > chainIdle {
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
			if s2.waiters == 0 && !s2.running {
				delete(t.m, k2)
			}
		}
		s = &chainState{broken: noSeq, changed: make(chan struct{})}
		t.m[k] = s
	}
	s.touched = now
	return s
}

func (s *chainState) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// enter waits until the COMPOUND a of session sess may run. It returns
// NFS4_OK if it may (the caller must then call leave), or the status
// refusing it: nothing of it may run.
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

// leave records that the COMPOUND a of session sess, which enter let
// run, finished with status st: the next one may run, or, if st is not
// NFS4_OK, every later one is refused. After the chain's last COMPOUND,
// whatever its status, the chain is forgotten: every COMPOUND before it
// ran, and none may come after it.
func (t *chainTable) leave(sess [16]byte, a *chainArgs, st nfsv4.Nfsstat4) {
	t.breakAt(sess, a, a.seq+1, a.flags&chainLast != 0, st != nfsv4.NFS4_OK)
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

func (t *chainTable) breakAt(sess [16]byte, a *chainArgs, next uint32, done, broken bool) {
	k := chainKey{sess, a.id}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(k, time.Now())
	if done && s.waiters == 0 {
		delete(t.m, k)
		return
	}
	if a.seq+1 == next && a.seq == s.next {
		s.next, s.running = next, false
	}
	if broken && next < s.broken {
		s.broken = next
	}
	s.signal()
}
