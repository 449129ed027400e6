package server

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestChainTableKeepsRunningChains: making room in the chain table (idle
// expiry, the maxChains bound) never forgets a chain whose COMPOUND is
// running: forgotten, a second COMPOUND with that seq would run alongside
// it (the duplicate check of enter needs the state).
func TestChainTableKeepsRunningChains(t *testing.T) {
	defer func(d time.Duration) { chainIdle = d }(chainIdle)
	chainIdle = time.Nanosecond
	tab := newChainTable()
	ctx := context.Background()
	sess := [16]byte{1}
	running := &chainArgs{id: 1, seq: 0}
	if st := tab.enter(ctx, sess, running); st != nfsv4.NFS4_OK {
		t.Fatalf("enter: %d", st)
	}
	time.Sleep(time.Millisecond) // idle for longer than chainIdle
	// New chains, each finished at once, until the table was full.
	for i := uint64(2); i < maxChains+100; i++ {
		a := &chainArgs{id: i, seq: 0}
		if st := tab.enter(ctx, sess, a); st != nfsv4.NFS4_OK {
			t.Fatalf("enter %d: %d", i, st)
		}
		tab.executed(sess, a, nfsv4.NFS4_OK)
		tab.replyTurn(ctx, sess, a, false)
	}
	if st := tab.enter(ctx, sess, &chainArgs{id: 1, seq: 0}); st != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Fatalf("a second COMPOUND with the running seq: %d, want SEQ_MISORDERED", st)
	}
	// Executed, its sync in flight: the chain is kept (its reply needs
	// the state) while the table fills again.
	tab.executed(sess, running, nfsv4.NFS4_OK)
	time.Sleep(time.Millisecond)
	for i := uint64(maxChains + 100); i < 2*maxChains+200; i++ {
		a := &chainArgs{id: i, seq: 0}
		if st := tab.enter(ctx, sess, a); st != nfsv4.NFS4_OK {
			t.Fatalf("enter %d: %d", i, st)
		}
		tab.executed(sess, a, nfsv4.NFS4_OK)
		tab.replyTurn(ctx, sess, a, false)
	}
	if st := tab.enter(ctx, sess, &chainArgs{id: 1, seq: 1, flags: chainLast}); st != nfsv4.NFS4_OK {
		t.Fatalf("the next seq: %d", st)
	}
	if tab.replyTurn(ctx, sess, running, false) {
		t.Fatal("the syncing COMPOUND's reply fails: its chain was forgotten")
	}
}

// TestChainTableRandomSchedules drives the chain table with random
// schedules: a chain's COMPOUNDs (some failing, some sent twice on
// different slots, some preceded by a refused retransmission of an
// earlier seq) arrive in random order with random delays, run a random
// time, sync a random time (the next one may run meanwhile) and settle
// their replies. Invariants: a COMPOUND runs only after every earlier
// one of its chain ran and succeeded, in order; no seq runs twice; after
// a failure nothing of the chain runs; every seq up to the first failure
// runs (a refused retransmission breaks nothing). (After
// its last COMPOUND the chain is forgotten: a late duplicate starts a new
// chain with that id, as docs/protocol.md §4 allows.)
func TestChainTableRandomSchedules(t *testing.T) {
	defer func(d time.Duration) { chainWait = d }(chainWait)
	chainWait = 2 * time.Second // never expires here
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	tab := newChainTable()
	sess := [16]byte{2}
	for round := range rounds {
		n := 1 + rng.IntN(8)
		fail := -1
		if rng.IntN(3) == 0 {
			fail = rng.IntN(n)
		}
		type send struct {
			seq   uint32
			delay time.Duration
			work  time.Duration
			sync  time.Duration // between executed and replyTurn
			retx  bool          // a retransmission refused at SEQUENCE (a used seq)
		}
		var sends []send
		for k := range n {
			sends = append(sends, send{seq: uint32(k), delay: time.Duration(rng.IntN(3000)) * time.Microsecond,
				work: time.Duration(rng.IntN(500)) * time.Microsecond, sync: time.Duration(rng.IntN(800)) * time.Microsecond})
			if rng.IntN(5) == 0 {
				sends = append(sends, send{seq: uint32(k), delay: time.Duration(rng.IntN(3000)) * time.Microsecond})
			}
			if rng.IntN(5) == 0 {
				sends = append(sends, send{seq: uint32(k), delay: time.Duration(3000+rng.IntN(2000)) * time.Microsecond, retx: true})
			}
		}
		id := uint64(round + 1)
		var mu sync.Mutex
		var ran []uint32 // in the order they entered, until the last one left
		done := map[uint32]bool{}
		over := false // the last COMPOUND left: the id names a new chain
		var wg sync.WaitGroup
		for _, sd := range sends {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(sd.delay)
				a := &chainArgs{id: id, seq: sd.seq}
				if sd.seq == uint32(n-1) {
					a.flags = chainLast
				}
				if sd.retx {
					mu.Lock()
					used := done[sd.seq]
					mu.Unlock()
					if used { // only a seq that ran can be retransmitted
						tab.refuse(sess, a, true)
					}
					return
				}
				if tab.enter(context.Background(), sess, a) != nfsv4.NFS4_OK {
					return
				}
				mu.Lock()
				if !over {
					ran = append(ran, sd.seq)
				}
				mu.Unlock()
				time.Sleep(sd.work)
				st := nfsv4.NFS4_OK
				if int(sd.seq) == fail {
					st = nfsv4.NFS4ERR_NOENT
				}
				mu.Lock()
				done[sd.seq] = true
				tab.executed(sess, a, st)
				mu.Unlock()
				time.Sleep(sd.sync) // the next one may run meanwhile
				last := a.flags&chainLast != 0
				if last {
					mu.Lock() // the chain is forgotten once it returns
					defer mu.Unlock()
				}
				if tab.replyTurn(context.Background(), sess, a, false) {
					t.Errorf("seed %d round %d: seq %d: reply failed without a failed sync", seed, round, sd.seq)
				}
				if last {
					over = true
				}
			}()
		}
		wg.Wait()
		want := n // with no failure (and no wait expiring) each seq ran
		if fail >= 0 {
			want = fail + 1
		}
		for i, s := range ran {
			if s != uint32(i) || i >= want {
				t.Fatalf("seed %d round %d: %d COMPOUNDs, failing %d: ran %v", seed, round, n, fail, ran)
			}
		}
		if len(ran) != want {
			t.Fatalf("seed %d round %d: %d COMPOUNDs, failing %d: only %v ran", seed, round, n, fail, ran)
		}
	}
}

// TestChainTableSyncFailure: once the sync of a chain's COMPOUND failed,
// the reply of a later one that already ran fails too, even though its
// own sync succeeded and it settles first, and a later one that had not
// run is refused; replies before the failed one are unaffected.
func TestChainTableSyncFailure(t *testing.T) {
	tab := newChainTable()
	ctx := context.Background()
	sess := [16]byte{3}
	a := []*chainArgs{{id: 1, seq: 0}, {id: 1, seq: 1}, {id: 1, seq: 2}, {id: 1, seq: 3, flags: chainLast}}
	for _, x := range a[:3] {
		if st := tab.enter(ctx, sess, x); st != nfsv4.NFS4_OK {
			t.Fatalf("enter %d: %d", x.seq, st)
		}
		tab.executed(sess, x, nfsv4.NFS4_OK)
	}
	later := make(chan bool)
	go func() { later <- tab.replyTurn(ctx, sess, a[2], false) }() // its own sync succeeded
	select {
	case <-later:
		t.Fatal("seq 2 settled before seq 0 and 1")
	case <-time.After(10 * time.Millisecond):
	}
	if tab.replyTurn(ctx, sess, a[0], false) {
		t.Fatal("seq 0 fails")
	}
	if !tab.replyTurn(ctx, sess, a[1], true) {
		t.Fatal("seq 1, whose sync failed, does not fail")
	}
	if !<-later {
		t.Fatal("seq 2, which ran during the failed sync, does not fail")
	}
	if st := tab.enter(ctx, sess, a[3]); st != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Fatalf("seq 3 after the failed sync: %d, want SEQ_MISORDERED", st)
	}
}

// TestChainNotEvictedWhileRunning: a chain whose COMPOUND has run and
// syncs (nobody waits in the chain: its next COMPOUND has not arrived)
// is live; making room for new chains must not forget it, or that
// COMPOUND's reply, which waits for the replies before it in a fresh
// state that never sees them, would stall (for chainWait, then failing
// with NFS4ERR_IO, while replyTurn had a time limit; for good since). (Room is made by forgetting
// chains idle for chainIdle once there are 64, and any chain nobody
// waits in once there are maxChains; the test uses the first, with a
// short chainIdle, as a sync longer than it: the choice of the second is
// random.)
func TestChainNotEvictedWhileRunning(t *testing.T) {
	defer func(i time.Duration) { chainIdle = i }(chainIdle)
	chainIdle = time.Millisecond
	ctx := context.Background()
	tab := newChainTable()
	var sess [16]byte
	run := func(a *chainArgs) {
		if st := tab.enter(ctx, sess, a); st != nfsv4.NFS4_OK {
			t.Fatalf("chain %d seq %d refused: %v", a.id, a.seq, st)
		}
		tab.executed(sess, a, nfsv4.NFS4_OK)
	}
	a0, a1 := &chainArgs{id: 1 << 40, seq: 0}, &chainArgs{id: 1 << 40, seq: 1}
	run(a0)
	if tab.replyTurn(ctx, sess, a0, false) {
		t.Fatal("COMPOUND 0 failed")
	}
	run(a1) // runs; its sync is in flight while other chains come
	time.Sleep(5 * chainIdle)
	for i := range uint64(100) {
		a := &chainArgs{id: i, seq: 0}
		run(a)
		tab.replyTurn(ctx, sess, a, false) // idle chains (no Last)
	}
	failed := make(chan bool, 1)
	go func() { failed <- tab.replyTurn(ctx, sess, a1, false) }()
	select {
	case f := <-failed:
		if f {
			t.Fatal("COMPOUND 1 failed: its chain was forgotten while it ran")
		}
	case <-time.After(2 * time.Second):
		// replyTurn has no time limit (a sync may be slow): in a fresh
		// state it waits for good.
		t.Fatal("COMPOUND 1 still waits for the replies before it: its chain was forgotten while it ran")
	}
}
