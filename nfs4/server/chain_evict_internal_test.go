package server

import (
	"context"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

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
