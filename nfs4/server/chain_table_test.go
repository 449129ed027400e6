package server

import (
	"context"
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
		tab.leave(sess, a, nfsv4.NFS4_OK)
	}
	if st := tab.enter(ctx, sess, &chainArgs{id: 1, seq: 0}); st != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Fatalf("a second COMPOUND with the running seq: %d, want SEQ_MISORDERED", st)
	}
	tab.leave(sess, running, nfsv4.NFS4_OK)
	if st := tab.enter(ctx, sess, &chainArgs{id: 1, seq: 1, flags: chainLast}); st != nfsv4.NFS4_OK {
		t.Fatalf("the next seq: %d", st)
	}
}
