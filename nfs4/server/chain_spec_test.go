package server_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// holdFirstUntilSpeculated lets COMPOUNDs run speculatively up to ahead
// after the chain's next one and installs a chain-enter hook that holds
// the COMPOUND of seq 0 at its turn until want later ones began to run
// speculatively (or hold passed, if want is 0); it records which seqs
// speculated, and how many had when the hold ended (*whileHeld).
func holdFirstUntilSpeculated(t *testing.T, ahead uint32, want int, hold time.Duration, whileHeld *int) (speculated func() map[uint32]bool) {
	t.Helper()
	old := server.SetSpecAheadForTest(ahead)
	var mu sync.Mutex
	spec := map[uint32]bool{}
	var n atomic.Int32
	server.SetChainEnterHookForTest(func(seq uint32, turn bool) {
		if !turn {
			mu.Lock()
			spec[seq] = true
			mu.Unlock()
			n.Add(1)
			return
		}
		if seq != 0 {
			return
		}
		deadline := time.Now().Add(hold)
		for (want == 0 || int(n.Load()) < want) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if whileHeld != nil {
			*whileHeld = int(n.Load())
		}
	})
	t.Cleanup(func() {
		server.SetChainEnterHookForTest(nil)
		server.SetSpecAheadForTest(old)
	})
	return func() map[uint32]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[uint32]bool{}
		for k, v := range spec {
			out[k] = v
		}
		return out
	}
}

// sendFirstLast sends cps[1:] and, once they wait at the server, cps[0],
// and returns every outcome.
func sendFirstLast(t *testing.T, c *client.Client, cps []*client.Compound) ([]*client.Reply, []error) {
	t.Helper()
	wait := sendAll(c, cps[1:])
	time.Sleep(20 * time.Millisecond)
	rep0, err0 := c.Do(context.Background(), cps[0])
	reps, errs := wait()
	return append([]*client.Reply{rep0}, reps...), append([]error{err0}, errs...)
}

func putFile(t *testing.T, c *client.Client, name string, data []byte) {
	t.Helper()
	var cp client.Compound
	cp.PutRootFH()
	cp.Open(c.ClientID(), []byte("setup"), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	cp.Write(client.CurrentStateid, 0, data, true)
	cp.Close(client.CurrentStateid)
	if rep, err := c.Do(context.Background(), &cp); err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("writing %s: %v %v", name, err, rep)
	}
}

func getFile(t *testing.T, c *client.Client, name string) []byte {
	t.Helper()
	var cp client.Compound
	cp.PutRootFH()
	cp.Open(c.ClientID(), []byte("reader"), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	ri := cp.Read(client.CurrentStateid, 0, 1<<16)
	cp.Close(client.CurrentStateid)
	rep, err := c.Do(context.Background(), &cp)
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("reading %s: %v %v", name, err, rep)
	}
	return rep.Results[ri].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data
}

// TestChainSpeculationCommits: chained COMPOUNDs rewriting files of their
// own (OPEN with truncation, WRITE, CLOSE: the vectorized write) run
// speculatively while the chain's first one waits, and commit in turn
// without running again; every file holds its data.
func TestChainSpeculationCommits(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	const n = 6
	for i := range n {
		putFile(t, c, fmt.Sprintf("f%d", i), []byte("old data, longer than the new"))
	}
	speculated := holdFirstUntilSpeculated(t, n, n-1, 5*time.Second, nil)
	id := c.NewChainID()
	trunc := (&client.SetAttrs{SetSize: true}).Encode()
	var cps []*client.Compound
	for i := range n {
		cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(i), Last: i == n-1}}
		cp.PutRootFH()
		cp.Open(c.ClientID(), []byte(fmt.Sprintf("owner%d", i)), client.OpenArgs{
			Name: fmt.Sprintf("f%d", i), Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true, CreateAttrs: trunc})
		cp.Write(client.CurrentStateid, 0, []byte(fmt.Sprintf("new %d", i)), true)
		cp.Close(client.CurrentStateid)
		cps = append(cps, cp)
	}
	reps, errs := sendFirstLast(t, c, cps)
	for i := range cps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", i, errs[i], reps[i])
		}
	}
	for i := range n {
		if got, want := getFile(t, c, fmt.Sprintf("f%d", i)), fmt.Sprintf("new %d", i); string(got) != want {
			t.Fatalf("f%d holds %q, want %q", i, got, want)
		}
	}
	if got := len(speculated()); got != n-1 {
		t.Fatalf("%d COMPOUNDs speculated, want %d", got, n-1)
	}
	if got := server.ChainSpecForTest(ts.srv, "committed"); got != n-1 {
		t.Fatalf("%v speculative runs committed, want %d (conflict %v, failed %v, void %v)", got, n-1,
			server.ChainSpecForTest(ts.srv, "conflict"), server.ChainSpecForTest(ts.srv, "failed"), server.ChainSpecForTest(ts.srv, "void"))
	}
}

// TestChainSpeculationSerialResults: COMPOUNDs that each read what their
// predecessor wrote run speculatively before it, yet every result is the
// serial execution's: COMPOUND i sees the file i × 4 bytes long and
// appends its 4 bytes there (its speculative run saw an empty file; the
// commit's replay sees the difference and the run executes again in
// turn). With the file missing until COMPOUND 0 creates it, the
// speculative OPENs fail and run again in turn.
func TestChainSpeculationSerialResults(t *testing.T) {
	for _, exists := range []bool{true, false} {
		t.Run(fmt.Sprintf("exists=%v", exists), func(t *testing.T) {
			ts := startServer(t)
			c := ts.dialClient(t)
			if exists {
				putFile(t, c, "f", nil)
			}
			const n = 6
			speculated := holdFirstUntilSpeculated(t, n, n-1, 5*time.Second, nil)
			id := c.NewChainID()
			var cps []*client.Compound
			var sizeAt int
			for i := range n {
				cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(i), Last: i == n-1}}
				cp.PutRootFH()
				cp.Open(c.ClientID(), []byte(fmt.Sprintf("owner%d", i)), client.OpenArgs{
					Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: i == 0})
				sizeAt = cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SIZE))
				cp.Write(client.CurrentStateid, uint64(4*i), bytes.Repeat([]byte{byte('a' + i)}, 4), true)
				cp.Close(client.CurrentStateid)
				cps = append(cps, cp)
			}
			reps, errs := sendFirstLast(t, c, cps)
			for i := range cps {
				if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
					t.Fatalf("COMPOUND %d: %v %v", i, errs[i], reps[i])
				}
				a, err := client.DecodeAttrs(attrVals(t, reps[i].Results[sizeAt]))
				if err != nil || a.Size != uint64(4*i) {
					t.Fatalf("COMPOUND %d saw size %d (%v), want %d", i, a.Size, err, 4*i)
				}
			}
			if got, want := string(getFile(t, c, "f")), "aaaabbbbccccddddeeeeffff"; got != want {
				t.Fatalf("f holds %q, want %q", got, want)
			}
			if got := len(speculated()); got != n-1 {
				t.Fatalf("%d COMPOUNDs speculated, want %d", got, n-1)
			}
			outcome := "conflict"
			if !exists {
				outcome = "failed"
			}
			if got := server.ChainSpecForTest(ts.srv, outcome); got < 1 {
				t.Fatalf("no speculative run ended with %s (committed %v)", outcome, server.ChainSpecForTest(ts.srv, "committed"))
			}
		})
	}
}

// TestChainSpeculationNotPastDeny: a COMPOUND does not speculate past a
// predecessor whose OPEN denies others (OPEN4_SHARE_DENY_WRITE), whose
// outcome its own open could change: COMPOUND 0 opens f denying writes
// and keeps it open, COMPOUND 1's OPEN for writing is then refused, as
// in a serial execution — had it run first, COMPOUND 0 would have been
// refused instead.
func TestChainSpeculationNotPastDeny(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	putFile(t, c, "f", []byte("data"))
	speculated := holdFirstUntilSpeculated(t, 8, 0, 100*time.Millisecond, nil)
	id := c.NewChainID()
	cp0 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 0}}
	cp0.PutRootFH()
	cp0.Add(&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_READ | nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
		ShareDeny:   nfsv4.OPEN4_SHARE_DENY_WRITE,
		Owner:       nfsv4.StateOwner4{Clientid: c.ClientID(), Owner: []byte("denier")},
		Openhow:     &nfsv4.Openflag4_default{},
		Claim:       &nfsv4.OpenClaim4_CLAIM_NULL{File: "f"},
	}})
	cp1 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 1, Last: true}}
	cp1.PutRootFH()
	cp1.Open(c.ClientID(), []byte("writer"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE})
	cp1.Write(client.CurrentStateid, 0, []byte("new!"), true)
	cp1.Close(client.CurrentStateid)
	reps, errs := sendFirstLast(t, c, []*client.Compound{cp0, cp1})
	if errs[0] != nil || reps[0].Status != nfsv4.NFS4_OK {
		t.Fatalf("COMPOUND 0 (deny write): %v %v", errs[0], reps[0])
	}
	if errs[1] != nil || reps[1].Status != nfsv4.NFS4ERR_SHARE_DENIED {
		t.Fatalf("COMPOUND 1 (open for writing): %v %v, want NFS4ERR_SHARE_DENIED", errs[1], reps[1])
	}
	if s := speculated(); s[1] {
		t.Fatal("COMPOUND 1 speculated past a denying OPEN")
	}
	if got := string(getFile(t, c, "f")); got != "data" {
		t.Fatalf("f holds %q", got)
	}
}

// TestChainSpeculationAhead: COMPOUNDs run speculatively at most
// SpecAhead after the chain's next one (by default one per CPU but one:
// more only slow the next one down), the others once it executed.
func TestChainSpeculationAhead(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	const n, ahead = 6, 2
	for i := range n {
		putFile(t, c, fmt.Sprintf("f%d", i), []byte("old"))
	}
	var whileHeld int
	speculated := holdFirstUntilSpeculated(t, ahead, 0, 100*time.Millisecond, &whileHeld)
	id := c.NewChainID()
	var cps []*client.Compound
	for i := range n {
		cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(i), Last: i == n-1}}
		cp.PutRootFH()
		cp.Open(c.ClientID(), []byte(fmt.Sprintf("owner%d", i)), client.OpenArgs{Name: fmt.Sprintf("f%d", i), Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE})
		cp.Write(client.CurrentStateid, 0, []byte("new"), true)
		cp.Close(client.CurrentStateid)
		cps = append(cps, cp)
	}
	reps, errs := sendFirstLast(t, c, cps)
	for i := range cps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", i, errs[i], reps[i])
		}
	}
	s := speculated()
	if whileHeld != ahead || !s[1] || !s[2] {
		t.Fatalf("%d COMPOUNDs ran speculatively while the first waited (%v), want %d: 1 and 2", whileHeld, s, ahead)
	}
}
