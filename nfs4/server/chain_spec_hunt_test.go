package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

// openStateid returns the stateid an OPEN result carries.
func openStateid(t *testing.T, r nfsv4.NfsResop4) nfsv4.Stateid4 {
	t.Helper()
	ok, isOK := r.(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK)
	if !isOK {
		t.Fatalf("OPEN failed: %v", r)
	}
	return ok.Resok4.Stateid
}

// TestChainSpecOwnerIgnoresClientidField: in NFSv4.1 the server ignores
// the clientid field of an OPEN's open_owner4 (the session names the
// client, RFC 8881 §18.16.3), so two OPENs whose owners differ only in
// that field are the same open-owner. COMPOUND 1 must then not speculate
// past COMPOUND 0: serially, COMPOUND 0's OPEN makes the open state
// (seqid 1), COMPOUND 1's OPEN of the same file by the same owner
// upgrades it (seqid 2) and its CLOSE closes it. Speculated, COMPOUND 1
// made the state first: COMPOUND 0 got seqid 2 and COMPOUND 1's CLOSE,
// applied at its commit with the stale seqid 1, failed silently — the
// state stayed open although COMPOUND 1's reply says it closed it.
func TestChainSpecOwnerIgnoresClientidField(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	putFile(t, c, "f", nil)
	holdFirstUntilSpeculated(t, 8, 0, 200*time.Millisecond, nil)
	id := c.NewChainID()
	cp0 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 0}}
	cp0.PutRootFH()
	open0 := cp0.Open(c.ClientID(), []byte("o"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH})
	cp0.Write(client.CurrentStateid, 0, []byte("aaaa"), true)
	cp1 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 1, Last: true}}
	cp1.PutRootFH()
	open1 := cp1.Open(c.ClientID()+1, []byte("o"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH})
	cp1.Write(client.CurrentStateid, 4, []byte("bbbb"), true)
	cp1.Close(client.CurrentStateid)
	reps, errs := sendFirstLast(t, c, []*client.Compound{cp0, cp1})
	for i := range reps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", i, errs[i], reps[i])
		}
	}
	sid0, sid1 := openStateid(t, reps[0].Results[open0]), openStateid(t, reps[1].Results[open1])
	if sid0.Other != sid1.Other || sid0.Seqid != 1 || sid1.Seqid != 2 {
		t.Errorf("OPEN stateids %v then %v, want one state with seqid 1 then 2 (serial order)", sid0, sid1)
	}
	// COMPOUND 1 closed the owner's state: COMPOUND 0's stateid is bad.
	var cp client.Compound
	cp.PutRootFH()
	cp.Lookup("f")
	cp.Write(nfsv4.Stateid4{Other: sid0.Other}, 8, []byte("cccc"), true)
	rep, err := c.Do(context.Background(), &cp)
	if err != nil || rep.Status != nfsv4.NFS4ERR_BAD_STATEID {
		t.Errorf("WRITE with the closed state: %v %v, want NFS4ERR_BAD_STATEID", err, rep)
	}
	if got := string(getFile(t, c, "f")); got != "aaaabbbb" {
		t.Errorf("f holds %q, want aaaabbbb", got)
	}
}

// TestChainSpecUndoneOpenKeepsOthersStateid: a speculative OPEN makes
// its owner's open state of f (seqid 1), or upgrades the one the owner
// already has (seqid 1 → 2). While it waits for its turn, a plain
// COMPOUND of the same owner opens f again and gets that state, upgraded
// (seqid 2, or 3). The speculative run then conflicts (its GETATTR read
// the size its predecessor changes) and is undone: the undo freed the
// state, or put back its seqid 1 and access as before the speculative
// OPEN, erasing the plain OPEN's upgrade — the plain OPEN's stateid
// became NFS4ERR_BAD_STATEID, which no serial order gives. (A grouped
// run's window between its OPEN and its commit is microseconds; a
// speculative run's lasts its predecessors' execution.)
func TestChainSpecUndoneOpenKeepsOthersStateid(t *testing.T) {
	for _, had := range []bool{false, true} {
		t.Run(fmt.Sprintf("had=%v", had), func(t *testing.T) { testUndoneOpenKeepsOthersStateid(t, had) })
	}
}

func testUndoneOpenKeepsOthersStateid(t *testing.T, had bool) {
	ts := startServer(t)
	c := ts.dialClient(t)
	putFile(t, c, "f", []byte("x"))
	var rep *client.Reply
	var err error
	if had {
		var cp client.Compound
		cp.PutRootFH()
		o := cp.Open(c.ClientID(), []byte("p"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
		rep, err = c.Do(context.Background(), &cp)
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("OPEN: %v %v", err, rep)
		}
		if sid := openStateid(t, rep.Results[o]); sid.Seqid != 1 {
			t.Fatalf("first OPEN: seqid %d", sid.Seqid)
		}
	}
	holdFirstUntilSpeculated(t, 8, 0, 300*time.Millisecond, nil)
	id := c.NewChainID()
	cp0 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 0}}
	cp0.PutRootFH()
	cp0.Open(c.ClientID(), []byte("u0"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH})
	cp0.Write(client.CurrentStateid, 0, []byte("0000000000"), true)
	cp0.Close(client.CurrentStateid)
	cp1 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 1, Last: true}}
	cp1.PutRootFH()
	cp1.Open(c.ClientID(), []byte("p"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH})
	cp1.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SIZE))
	cp1.Write(client.CurrentStateid, 0, []byte("1"), true)
	wait1 := sendAll(c, []*client.Compound{cp1})
	time.Sleep(20 * time.Millisecond)
	wait0 := sendAll(c, []*client.Compound{cp0})
	time.Sleep(150 * time.Millisecond) // COMPOUND 1 ran speculatively; 0 is held
	var plain client.Compound
	plain.PutRootFH()
	po := plain.Open(c.ClientID(), []byte("p"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH})
	rep, err = c.Do(context.Background(), &plain)
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("plain OPEN: %v %v", err, rep)
	}
	psid := openStateid(t, rep.Results[po])
	for i, w := range []func() ([]*client.Reply, []error){wait0, wait1} {
		reps, errs := w()
		if errs[0] != nil || reps[0].Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", i, errs[0], reps[0])
		}
	}
	var wr client.Compound
	wr.PutRootFH()
	wr.Lookup("f")
	wr.Write(psid, 0, []byte("2"), true)
	rep, err = c.Do(context.Background(), &wr)
	if err != nil || rep.Status == nfsv4.NFS4ERR_BAD_STATEID {
		t.Fatalf("WRITE with the plain OPEN's stateid %v: %v %v (no serial order makes it bad)", psid, err, rep)
	}
}

// specWrite is the ops of a speculation-safe COMPOUND: OPEN name
// (creating it) with its own owner, WRITE data, CLOSE.
func specWrite(c *testclient.Client, name string, data []byte) []nfsv4.NfsArgop4 {
	return []nfsv4.NfsArgop4{putroot(),
		openWith(c, name, "w-"+name, nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_NONE, &nfsv4.Createhow4_UNCHECKED4{}),
		write(current, 0, data), closeOp(current)}
}

// TestChainSpecClientGoneWhileWaiting: the connection of a COMPOUND that
// ran speculatively closes while it waits for its turn. Whether it then
// commits or is refused, the chain stays consistent: its file exists
// exactly if the chain goes on after it (the next COMPOUND runs), and
// nothing of a refused one remains.
func TestChainSpecClientGoneWhileWaiting(t *testing.T) {
	ts := startServer(t)
	base := ts.session(t, 1, "chain-gone")
	cs := chainSender{t, ts, base}
	holdFirstUntilSpeculated(t, 8, 0, 300*time.Millisecond, nil)
	gone := ts.dial(t)
	goneDone := make(chan struct{})
	go func() {
		defer close(goneDone)
		gone.CompoundRaw(1, false, cs.req(5, 1, 0, 1, 1, specWrite(base, "g", []byte("gone"))...)...)
	}()
	time.Sleep(20 * time.Millisecond)
	first := cs.send(cs.req(5, 0, 0, 2, 1, specWrite(base, "f", []byte("first"))...))
	time.Sleep(100 * time.Millisecond) // COMPOUND 1 ran speculatively
	gone.Close()
	<-goneDone
	if rep := cs.wait(first); rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("seq 0: status %d", rep.Status)
	}
	time.Sleep(50 * time.Millisecond)
	last := cs.wait(cs.send(cs.req(5, 2, 1, 3, 1, specWrite(base, "h", []byte("last"))...)))
	g, h := cs.exists("g"), cs.exists("h")
	t.Logf("g exists %v, seq 2: chain status %d, status %d", g, chainStatus(last), last.Status)
	switch {
	case g && (chainStatus(last) != nfsv4.NFS4_OK || !h):
		t.Fatalf("seq 1 ran (g exists) but seq 2 was refused (chain status %d) or did not run (h %v)", chainStatus(last), h)
	case !g && (chainStatus(last) == nfsv4.NFS4_OK || h):
		t.Fatalf("seq 1 did not run (no g) but seq 2 ran (chain status %d, h %v)", chainStatus(last), h)
	}
	if g {
		if got := string(readFile(t, base, "g")); got != "gone" {
			t.Fatalf("g holds %q", got)
		}
	}
}

// TestChainSpecReplyCached: a retransmission of a COMPOUND that ran
// speculatively and committed (same slot and sequence id) gets the
// cached reply and does not run again (the file's change attribute
// stays).
func TestChainSpecReplyCached(t *testing.T) {
	ts := startServer(t)
	base := ts.session(t, 1, "chain-cache")
	cs := chainSender{t, ts, base}
	holdFirstUntilSpeculated(t, 8, 1, time.Second, nil)
	second := cs.req(6, 1, 1, 1, 1, append(specWrite(base, "g", []byte("second")), getattr(nfsv4.FATTR4_CHANGE))...)
	sent := cs.send(second)
	time.Sleep(20 * time.Millisecond)
	if rep := cs.wait(cs.send(cs.req(6, 0, 0, 2, 1, specWrite(base, "f", []byte("first"))...))); rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("seq 0: status %d", rep.Status)
	}
	rep := cs.wait(sent)
	if rep.Status != nfsv4.NFS4_OK || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("seq 1: status %d chain %d", rep.Status, chainStatus(rep))
	}
	if got := server.ChainSpecForTest(ts.srv, "committed"); got != 1 {
		t.Fatalf("%v speculative runs committed, want 1", got)
	}
	again := cs.wait(cs.send(second))
	if again.Status != rep.Status || len(again.Results) != len(rep.Results) {
		t.Fatalf("retransmission: status %d with %d results, want the cached %d with %d", again.Status, len(again.Results), rep.Status, len(rep.Results))
	}
	changeOf := func(r *testclient.Reply) string { return fmt.Sprint(attrVals(t, r.Last()).AttrVals) }
	rep2 := okT(t)(base.Compound(putroot(), lookup("g"), getattr(nfsv4.FATTR4_CHANGE)))
	if changeOf(again) != changeOf(rep) || changeOf(rep2) != changeOf(rep) {
		t.Fatalf("change attribute: first reply %s, retransmission %s, now %s: the COMPOUND ran again", changeOf(rep), changeOf(again), changeOf(rep2))
	}
}

// TestChainSpecObserverSeesChainOrder: another client must not see a
// chained COMPOUND's effects before those of an earlier COMPOUND of the
// chain. COMPOUND 0 creates a; COMPOUND 1 opens the existing f for
// writing (and keeps it open: once the chain ran, it denies the
// observer's OPEN). While COMPOUND 0 is held at its turn, COMPOUND 1 runs
// speculatively and records its open (share reservation) at once: the
// observer's OPEN of f denying writes is refused because of it — COMPOUND
// 1 happened — and then the observer's LOOKUP of a finds nothing —
// COMPOUND 0 did not. No execution in the chain's order explains both.
func TestChainSpecObserverSeesChainOrder(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	putFile(t, c, "f", []byte("data"))
	observer := ts.session(t, 1, "observer")
	holdFirstUntilSpeculated(t, 8, 0, 300*time.Millisecond, nil)
	id := c.NewChainID()
	cp0 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 0}}
	cp0.PutRootFH()
	cp0.Open(c.ClientID(), []byte("o0"), client.OpenArgs{Name: "a", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	cp0.Close(client.CurrentStateid)
	cp1 := &client.Compound{Chain: &client.Chain{ID: id, Seq: 1, Last: true}}
	cp1.PutRootFH()
	cp1.Open(c.ClientID(), []byte("o1"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE})
	cp1.Write(client.CurrentStateid, 0, []byte("DATA"), true) // and keeps f open
	wait := sendAll(c, []*client.Compound{cp1})
	time.Sleep(20 * time.Millisecond)
	wait0 := sendAll(c, []*client.Compound{cp0})
	time.Sleep(150 * time.Millisecond) // COMPOUND 1 ran speculatively; 0 is held
	denied, err := observer.Compound(putroot(), openWith(observer, "f", "obs", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE, nil))
	if err != nil {
		t.Fatal(err)
	}
	look, err := observer.Compound(putroot(), lookup("a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []func() ([]*client.Reply, []error){wait0, wait} {
		if reps, errs := w(); errs[0] != nil || reps[0].Status != nfsv4.NFS4_OK {
			t.Fatalf("chained COMPOUND: %v %v", errs[0], reps[0])
		}
	}
	if denied.Status == nfsv4.NFS4ERR_SHARE_DENIED && look.Status == nfsv4.NFS4ERR_NOENT {
		t.Fatal("the observer saw COMPOUND 1's open of f (its OPEN denying writes was refused) and then not COMPOUND 0's a")
	}
	// Now COMPOUND 1's open took effect: it denies the observer's.
	rep, err := observer.Compound(putroot(), openWith(observer, "f", "obs", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE, nil))
	if err != nil || rep.Status != nfsv4.NFS4ERR_SHARE_DENIED {
		t.Fatalf("OPEN denying writes after the chain: %v %v, want NFS4ERR_SHARE_DENIED", err, rep.Status)
	}
}
