package server_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/nfs4/internal/rpc"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

// chainSender sends chained COMPOUNDs of base's session with explicit
// slots and sequence ids, each on its own connection (so several can be in
// flight at once, and a retransmission can come on another connection as
// after a reconnection).
type chainSender struct {
	t    *testing.T
	ts   *testServer
	base *testclient.Client
}

// chainReq is OP_CHAIN(id, seq, flags), SEQUENCE(slot, seqid), ops.
func (cs chainSender) req(id uint64, seq, flags, slot, seqid uint32, ops ...nfsv4.NfsArgop4) []nfsv4.NfsArgop4 {
	return append([]nfsv4.NfsArgop4{
		&testclient.ChainArgs{ID: id, Seq: seq, Flags: flags},
		&nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{
			SaSessionid: cs.base.SessionID, SaSequenceid: seqid, SaSlotid: slot, SaHighestSlotid: 7, SaCachethis: true}},
	}, ops...)
}

// send sends ops on a new connection and returns the reply's channel.
func (cs chainSender) send(ops []nfsv4.NfsArgop4) <-chan *testclient.Reply {
	cs.t.Helper()
	c := cs.ts.dial(cs.t)
	ch := make(chan *testclient.Reply, 1)
	go func() {
		rep, err := c.CompoundRaw(cs.base.Minor, false, ops...)
		if err != nil {
			cs.t.Error(err)
		}
		ch <- rep
	}()
	return ch
}

// wait returns the reply from ch (failing after 20 s).
func (cs chainSender) wait(ch <-chan *testclient.Reply) *testclient.Reply {
	cs.t.Helper()
	select {
	case rep := <-ch:
		if rep == nil {
			cs.t.FailNow()
		}
		return rep
	case <-time.After(20 * time.Second):
		cs.t.Fatal("no reply")
		return nil
	}
}

// waitChains waits until the server has n live chains (a COMPOUND sent
// has arrived and waits).
func (cs chainSender) waitChains(n int) {
	cs.t.Helper()
	for start := time.Now(); server.ChainsForTest(cs.ts.srv) != n; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			cs.t.Fatalf("%d live chains, want %d", server.ChainsForTest(cs.ts.srv), n)
		}
	}
}

func chainStatus(rep *testclient.Reply) nfsv4.Nfsstat4 {
	if rep.Chain == nil {
		return 0xffff
	}
	return *rep.Chain
}

func (cs chainSender) exists(name string) bool {
	rep, err := cs.base.Compound(putroot(), lookup(name))
	if err != nil {
		cs.t.Fatal(err)
	}
	return rep.Status == nfsv4.NFS4_OK
}

// TestChainRetransmissionDoesNotBreakChain: a chained COMPOUND resent on
// its slot and sequence id (on a new connection, as after a reconnection)
// while the first copy waits for its predecessor is answered
// NFS4ERR_DELAY by SEQUENCE (RFC 8881 §2.10.6.2) — it is not a new
// COMPOUND of the chain (docs/protocol.md §4), so the first copy still
// runs once its predecessor did. (It broke the chain: the waiting copy
// was refused with SEQ_MISORDERED.)
func TestChainRetransmissionDoesNotBreakChain(t *testing.T) {
	ts := startServer(t)
	cs := chainSender{t, ts, ts.session(t, 1, "chain-rx")}
	second := cs.req(7, 1, 0, 1, 1, putroot(), mkdir("b"))
	first := cs.send(second)
	cs.waitChains(1) // it waits for seq 0
	resent := cs.wait(cs.send(second))
	if len(resent.Results) == 0 || resent.Status != nfsv4.NFS4ERR_DELAY {
		t.Fatalf("retransmission while in progress: status %d, want DELAY", resent.Status)
	}
	if rep := cs.wait(cs.send(cs.req(7, 0, 0, 2, 1, putroot(), mkdir("a")))); rep.Status != nfsv4.NFS4_OK || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("seq 0: status %d chain %d", rep.Status, chainStatus(rep))
	}
	rep := cs.wait(first)
	if rep.Status != nfsv4.NFS4_OK || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("seq 1 (first copy): status %d chain %d, want OK", rep.Status, chainStatus(rep))
	}
	if !cs.exists("b") {
		t.Fatal("seq 1 did not run")
	}
	// And the retransmission now gets the first copy's reply.
	if rep := cs.wait(cs.send(second)); rep.Status != nfsv4.NFS4_OK || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("retransmission after: status %d chain %d, want the cached OK", rep.Status, chainStatus(rep))
	}
	// The chain goes on.
	if rep := cs.wait(cs.send(cs.req(7, 2, 1, 3, 1, putroot(), mkdir("c")))); rep.Status != nfsv4.NFS4_OK || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("seq 2: status %d chain %d", rep.Status, chainStatus(rep))
	}
}

// TestChainDuplicateSeqRunsOnce: two COMPOUNDs with the same chain seq
// (on different slots, so neither is a retransmission) both waiting for
// their predecessor: exactly one runs, the other is refused with
// SEQ_MISORDERED ("seq was already used", docs/protocol.md §4). (Both
// ran, concurrently.)
func TestChainDuplicateSeqRunsOnce(t *testing.T) {
	ts := startServer(t)
	cs := chainSender{t, ts, ts.session(t, 1, "chain-dup")}
	b := cs.send(cs.req(9, 1, 0, 1, 1, putroot(), mkdir("b")))
	c := cs.send(cs.req(9, 1, 0, 2, 1, putroot(), mkdir("c")))
	time.Sleep(50 * time.Millisecond)
	if rep := cs.wait(cs.send(cs.req(9, 0, 0, 3, 1, putroot(), mkdir("a")))); rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("seq 0: status %d", rep.Status)
	}
	rb, rc := cs.wait(b), cs.wait(c)
	ran := 0
	for _, r := range []*testclient.Reply{rb, rc} {
		switch chainStatus(r) {
		case nfsv4.NFS4_OK:
			ran++
		case nfsv4.NFS4ERR_SEQ_MISORDERED:
			if len(r.Results) != 1 {
				t.Fatalf("refused COMPOUND has %d results, want SEQUENCE's only", len(r.Results))
			}
		default:
			t.Fatalf("chain status %d", chainStatus(r))
		}
	}
	if ran != 1 || cs.exists("b") == cs.exists("c") {
		t.Fatalf("%d COMPOUNDs with seq 1 ran (b %v, c %v), want 1", ran, cs.exists("b"), cs.exists("c"))
	}
}

// FuzzChain feeds COMPOUNDs made of OP_CHAIN (arbitrary arguments), a
// SEQUENCE of a live session (the slot's next sequence id, so the rest
// runs) and arbitrary operation bytes to the server. Every input must get
// a decodable reply or GARBAGE_ARGS (no crash, no hang), and a COMPOUND
// whose OP_CHAIN failed must have run nothing (SEQUENCE's result at
// most).
func FuzzChain(f *testing.F) {
	defer server.SetChainWaitForTest(server.SetChainWaitForTest(20 * time.Millisecond))
	ts := startServer(f)
	sess := ts.session(f, 1, "fuzz-chain")
	enc := func(ops ...nfsv4.NfsArgop4) []byte {
		var b bytes.Buffer
		for _, op := range ops {
			op.WriteTo(&b)
		}
		return b.Bytes()
	}
	f.Add(uint64(1), uint32(0), uint32(1), uint8(2), enc(putroot(), mkdir("a")))
	f.Add(uint64(1), uint32(1), uint32(0), uint8(1), enc(putroot()))
	f.Add(uint64(2), uint32(0), uint32(2), uint8(1), enc(putroot()))
	f.Add(uint64(3), uint32(0), uint32(0), uint8(2), enc(&testclient.ChainArgs{ID: 3}, putroot()))
	f.Add(uint64(4), uint32(0), uint32(0), uint8(2), append([]byte{0x74, 0x78, 0x6e, 0, 0, 0, 0, 0}, enc(putroot())...)) // OP_TXN

	f.Add(uint64(5), uint32(0), uint32(1), uint8(3), enc(putroot(), lookup("a"), remove("a")))
	f.Add(uint64(6), uint32(0xffffffff), uint32(1), uint8(0), []byte{})
	slotSeq := uint32(0)
	f.Fuzz(func(t *testing.T, id uint64, seq, flags uint32, nops uint8, tail []byte) {
		var b bytes.Buffer
		runtime.WriteUTF8String(&b, 1024, "")
		runtime.WriteUnsignedInt(&b, 1)
		runtime.WriteUnsignedInt(&b, 2+uint32(nops))
		(&testclient.ChainArgs{ID: id, Seq: seq, Flags: flags}).WriteTo(&b)
		(&nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: sess.SessionID,
			SaSequenceid: slotSeq + 1, SaHighestSlotid: 0, SaCachethis: true}}).WriteTo(&b)
		b.Write(tail)
		rep := ts.srv.Handle(context.Background(), &rpc.Call{Prog: 100003, Vers: 4, Proc: 1, Args: b.Bytes(),
			Cred: rpc.Cred{Flavor: rpcv2.AUTH_SYS}})
		switch rep.Stat {
		case rpcv2.GARBAGE_ARGS:
			return
		case rpcv2.SUCCESS:
		default:
			t.Fatalf("accept stat %d", rep.Stat)
		}
		body := rep.Body
		for _, m := range rep.More {
			body = append(body[:len(body):len(body)], m...)
		}
		if rep.Done != nil {
			rep.Done()
		}
		r, err := testclient.DecodeCompound(body)
		if err != nil {
			t.Fatalf("reply does not decode: %v", err)
		}
		if len(r.Results) > 0 {
			if sr, ok := r.Results[0].(*nfsv4.NfsResop4_OP_SEQUENCE); ok {
				if _, ok := sr.Opsequence.(*nfsv4.Sequence4res_NFS4_OK); ok {
					slotSeq++
				}
			}
		}
		if r.Chain == nil {
			if r.Status == nfsv4.NFS4_OK {
				t.Fatal("OP_CHAIN first, but no CHAIN result in a successful reply")
			}
			return
		}
		if *r.Chain != nfsv4.NFS4_OK && len(r.Results) > 1 {
			t.Fatalf("chain status %d with %d results: something ran", *r.Chain, len(r.Results))
		}
		if n := server.ChainsForTest(ts.srv); n > 4096 {
			t.Fatalf("%d live chains", n)
		}
	})
}

// TestChainTableForgetsDeadChains: the server keeps no state for a chain
// whose last COMPOUND stopped early (nothing of the chain can run any
// more; it was kept for a minute), nor for a chained COMPOUND of an
// unknown session (a peer without a session filled the table, evicting
// other clients' live chains).
func TestChainTableForgetsDeadChains(t *testing.T) {
	ts := startServer(t)
	cs := chainSender{t, ts, ts.session(t, 1, "chain-dead")}
	rep := cs.wait(cs.send(cs.req(11, 0, 1, 1, 1, putroot(), lookup("missing"))))
	if rep.Status != nfsv4.NFS4ERR_NOENT || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("failing last COMPOUND: status %d chain %d", rep.Status, chainStatus(rep))
	}
	if n := server.ChainsForTest(ts.srv); n != 0 {
		t.Fatalf("%d chains left after a chain's last COMPOUND failed", n)
	}
	bogus := chainSender{t, ts, &testclient.Client{Minor: 1, SessionID: [16]byte{0xba, 0xd}}}
	for i := range 10 {
		ops := bogus.req(uint64(i), 0, 0, 0, 1, putroot())
		if rep := cs.wait(cs.send(ops)); rep.Status != nfsv4.NFS4ERR_BADSESSION {
			t.Fatalf("unknown session: status %d", rep.Status)
		}
	}
	if n := server.ChainsForTest(ts.srv); n != 0 {
		t.Fatalf("%d chains recorded for an unknown session", n)
	}
}

// TestChainAcrossDestroySession: a chained COMPOUND waiting for its
// predecessor when its session is destroyed is refused as soon as the
// predecessor comes (and fails SEQUENCE with BADSESSION), not after the
// server's whole wait — and runs nothing.
func TestChainAcrossDestroySession(t *testing.T) {
	defer server.SetChainWaitForTest(server.SetChainWaitForTest(5 * time.Second))
	ts := startServer(t)
	cs := chainSender{t, ts, ts.session(t, 1, "chain-destroy")}
	waiting := cs.send(cs.req(12, 1, 1, 1, 1, putroot(), mkdir("late")))
	cs.waitChains(1)
	okT(t)(cs.base.CompoundRaw(1, false, &nfsv4.NfsArgop4_OP_DESTROY_SESSION{
		OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: cs.base.SessionID}}))
	start := time.Now()
	if rep := cs.wait(cs.send(cs.req(12, 0, 0, 2, 1, putroot(), mkdir("early")))); rep.Status != nfsv4.NFS4ERR_BADSESSION {
		t.Fatalf("seq 0 after DESTROY_SESSION: status %d", rep.Status)
	}
	rep := cs.wait(waiting)
	if chainStatus(rep) != nfsv4.NFS4ERR_SEQ_MISORDERED || len(rep.Results) != 1 {
		t.Fatalf("waiting seq 1: chain %d, %d results; want refused", chainStatus(rep), len(rep.Results))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("refused after %v: it waited out the chain wait", d)
	}
	if server.ChainsForTest(ts.srv) > 1 {
		t.Fatalf("%d chains", server.ChainsForTest(ts.srv))
	}
	c2 := ts.session(t, 1, "chain-destroy-2")
	for _, name := range []string{"late", "early"} {
		if rep, _ := c2.Compound(putroot(), lookup(name)); rep.Status != nfsv4.NFS4ERR_NOENT {
			t.Fatalf("%s: status %d, want NOENT", name, rep.Status)
		}
	}
}

// TestChainArgumentErrors: the refusals of docs/protocol.md §4 that run
// nothing: NFSv4.0 (NOTSUPP), no SEQUENCE after OP_CHAIN
// (OP_NOT_IN_SESSION), unknown flags (INVAL, after SEQUENCE), OP_CHAIN
// not first (OP_ILLEGAL), OP_TXN after it, truncated arguments (BADXDR).
func TestChainArgumentErrors(t *testing.T) {
	ts := startServer(t)
	cs := chainSender{t, ts, ts.session(t, 1, "chain-args")}
	ch := &testclient.ChainArgs{ID: 1}
	check := func(name string, rep *testclient.Reply, err error, status, chain nfsv4.Nfsstat4, results int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.Status != status || chainStatus(rep) != chain || len(rep.Results) != results {
			t.Fatalf("%s: status %d chain %d, %d results; want %d, %d, %d", name, rep.Status, chainStatus(rep), len(rep.Results), status, chain, results)
		}
	}
	v40 := ts.dial(t)
	rep, err := v40.CompoundRaw(0, false, ch, putroot(), mkdir("v40"))
	check("4.0", rep, err, nfsv4.NFS4ERR_NOTSUPP, nfsv4.NFS4ERR_NOTSUPP, 0)
	rep, err = cs.base.CompoundRaw(1, false, ch, putroot(), mkdir("noseq"))
	check("no SEQUENCE", rep, err, nfsv4.NFS4ERR_OP_NOT_IN_SESSION, nfsv4.NFS4ERR_OP_NOT_IN_SESSION, 0)
	rep = cs.wait(cs.send(cs.req(1, 0, 2, 1, 1, putroot(), mkdir("flags"))))
	check("flags 2", rep, nil, nfsv4.NFS4ERR_INVAL, nfsv4.NFS4ERR_INVAL, 1)
	seq := cs.req(1, 0, 0, 2, 1)[1]
	rep, err = cs.base.CompoundRaw(1, false, seq, ch, putroot())
	check("not first", rep, err, nfsv4.NFS4ERR_OP_ILLEGAL, 0xffff, 2)
	rep, err = cs.base.CompoundRaw(1, false, ch, &testclient.AppendOffsetArgs{}, seq)
	check("extension op instead of SEQUENCE", rep, err, nfsv4.NFS4ERR_OP_NOT_IN_SESSION, nfsv4.NFS4ERR_OP_NOT_IN_SESSION, 0)
	args := testclient.EncodeCompound(1, false, []nfsv4.NfsArgop4{ch})
	rr, err := cs.base.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, args[:len(args)-3])
	if err != nil {
		t.Fatal(err)
	}
	rep, err = testclient.DecodeCompound(rr.Body)
	check("truncated", rep, err, nfsv4.NFS4ERR_BADXDR, 0xffff, 0)
	for _, name := range []string{"v40", "noseq", "flags"} {
		if cs.exists(name) {
			t.Fatalf("%s: a refused COMPOUND ran", name)
		}
	}
}

// TestChainsInterleaved: two chains of one session are independent: one
// waiting for its first COMPOUND does not hold up the other, a failure in
// one does not refuse the other, and each keeps its own order.
func TestChainsInterleaved(t *testing.T) {
	ts := startServer(t)
	cs := chainSender{t, ts, ts.session(t, 1, "chain-two")}
	a1 := cs.send(cs.req(21, 1, 1, 1, 1, putroot(), lookup("a0"), mkdir("a1")))
	cs.waitChains(1)
	if rep := cs.wait(cs.send(cs.req(22, 0, 0, 2, 1, putroot(), mkdir("b0")))); rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("b0: %d", rep.Status)
	}
	if rep := cs.wait(cs.send(cs.req(22, 1, 0, 2, 2, putroot(), lookup("missing")))); rep.Status != nfsv4.NFS4ERR_NOENT {
		t.Fatalf("b1: %d, want NOENT", rep.Status)
	}
	if rep := cs.wait(cs.send(cs.req(22, 2, 1, 2, 3, putroot(), mkdir("b2")))); chainStatus(rep) != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Fatalf("b2 after b1 failed: chain %d, want refused", chainStatus(rep))
	}
	if rep := cs.wait(cs.send(cs.req(21, 0, 0, 3, 1, putroot(), mkdir("a0")))); rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("a0: %d", rep.Status)
	}
	if rep := cs.wait(a1); rep.Status != nfsv4.NFS4_OK || chainStatus(rep) != nfsv4.NFS4_OK {
		t.Fatalf("a1: status %d chain %d", rep.Status, chainStatus(rep))
	}
	if !cs.exists("b0") || cs.exists("b2") || !cs.exists("a0") {
		t.Fatal("wrong COMPOUNDs ran")
	}
	// Chain 21 ended with its last COMPOUND; 22, refused at its last,
	// stays until idle (it refuses stragglers at once meanwhile).
	if n := server.ChainsForTest(ts.srv); n != 1 {
		t.Fatalf("%d chains left, want 1", n)
	}
}
