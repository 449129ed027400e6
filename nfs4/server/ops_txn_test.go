package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/internal/rpc"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

// ---- raw encodings of the multi-compound transaction operations ----

type txnBeginOp struct {
	nfsv4.NfsArgop4_OP_ILLEGAL
	flags    uint32
	clientID uint64
}

func (a *txnBeginOp) GetArgop() nfsv4.NfsOpnum4 { return server.OpTxnBegin }
func (a *txnBeginOp) GetEncodedSizeBytes() int  { return 16 }
func (a *txnBeginOp) WriteTo(w io.Writer) (int64, error) {
	var b [16]byte
	binary.BigEndian.PutUint32(b[:], uint32(server.OpTxnBegin))
	binary.BigEndian.PutUint32(b[4:], a.flags)
	binary.BigEndian.PutUint64(b[8:], a.clientID)
	n, err := w.Write(b[:])
	return int64(n), err
}

type txnJoinOp struct {
	nfsv4.NfsArgop4_OP_ILLEGAL
	id       [16]byte
	clientID uint64
}

func (a *txnJoinOp) GetArgop() nfsv4.NfsOpnum4 { return server.OpTxnJoin }
func (a *txnJoinOp) GetEncodedSizeBytes() int  { return 28 }
func (a *txnJoinOp) WriteTo(w io.Writer) (int64, error) {
	var b [28]byte
	binary.BigEndian.PutUint32(b[:], uint32(server.OpTxnJoin))
	copy(b[4:], a.id[:])
	binary.BigEndian.PutUint64(b[20:], a.clientID)
	n, err := w.Write(b[:])
	return int64(n), err
}

type txnEndOp struct {
	nfsv4.NfsArgop4_OP_ILLEGAL
	id       [16]byte
	clientID uint64
	commit   uint32 // 1 commits; other values than 0/1 are malformed
}

func (a *txnEndOp) GetArgop() nfsv4.NfsOpnum4 { return server.OpTxnEnd }
func (a *txnEndOp) GetEncodedSizeBytes() int  { return 32 }
func (a *txnEndOp) WriteTo(w io.Writer) (int64, error) {
	var b [32]byte
	binary.BigEndian.PutUint32(b[:], uint32(server.OpTxnEnd))
	copy(b[4:], a.id[:])
	binary.BigEndian.PutUint64(b[20:], a.clientID)
	binary.BigEndian.PutUint32(b[28:], a.commit)
	n, err := w.Write(b[:])
	return int64(n), err
}

// rawRes is one result of a raw reply.
type rawRes struct {
	op     nfsv4.NfsOpnum4
	status nfsv4.Nfsstat4
	id     [16]byte // TXN_BEGIN
	report string   // TXN_END conflict
	res    nfsv4.NfsResop4
}

type rawReply struct {
	status  nfsv4.Nfsstat4
	results []rawRes
	body    []byte
}

// decodeRaw decodes a COMPOUND reply that may hold transaction results.
func decodeRaw(b []byte) (*rawReply, error) {
	r := bytes.NewReader(b)
	st, _, err := runtime.ReadInt(r)
	if err != nil {
		return nil, err
	}
	if _, _, err := runtime.ReadUTF8String(r, 1024); err != nil {
		return nil, err
	}
	n, _, err := runtime.ReadUnsignedInt(r)
	if err != nil {
		return nil, err
	}
	rep := &rawReply{status: nfsv4.Nfsstat4(st), body: b}
	for i := uint32(0); i < n; i++ {
		p := b[len(b)-r.Len():]
		if len(p) < 8 {
			return nil, fmt.Errorf("result %d truncated", i)
		}
		x := rawRes{op: nfsv4.NfsOpnum4(binary.BigEndian.Uint32(p)), status: nfsv4.Nfsstat4(binary.BigEndian.Uint32(p[4:]))}
		switch x.op {
		case server.OpTxnJoin, server.OpTxn:
			r.Seek(8, io.SeekCurrent)
		case server.OpAppendOffset:
			r.Seek(8, io.SeekCurrent)
			if x.status == nfsv4.NFS4_OK {
				r.Seek(8, io.SeekCurrent)
			}
		case server.OpTxnBegin:
			r.Seek(8, io.SeekCurrent)
			if x.status == nfsv4.NFS4_OK {
				if _, err := io.ReadFull(r, x.id[:]); err != nil {
					return nil, err
				}
			}
		case server.OpTxnEnd:
			r.Seek(8, io.SeekCurrent)
			if x.status == nfsv4.NFS4ERR_NOT_SAME {
				if x.report, _, err = runtime.ReadUTF8String(r, 1<<16); err != nil {
					return nil, err
				}
			}
		default:
			if x.res, _, err = nfsv4.ReadNfsResop4(r); err != nil {
				return nil, fmt.Errorf("result %d: %w", i, err)
			}
		}
		rep.results = append(rep.results, x)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", r.Len())
	}
	return rep, nil
}

// raw sends ops exactly as given.
func raw(t testing.TB, c *testclient.Client, ops ...nfsv4.NfsArgop4) *rawReply {
	t.Helper()
	rr, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, testclient.EncodeCompound(c.Minor, false, ops))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := decodeRaw(rr.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// seq returns the next SEQUENCE of a 4.1 testclient.
func seq(c *testclient.Client) nfsv4.NfsArgop4 {
	c.Seq++
	return c.SequenceOp(c.Seq)
}

// begin41 opens a transaction with a 4.1 testclient.
func begin41(t testing.TB, c *testclient.Client) [16]byte {
	t.Helper()
	rep := raw(t, c, seq(c), &txnBeginOp{})
	if rep.status != nfsv4.NFS4_OK {
		t.Fatalf("TXN_BEGIN: %d", rep.status)
	}
	return rep.results[1].id
}

// join41 runs ops in transaction id (4.1); results exclude TXN_JOIN and
// SEQUENCE when the join succeeded.
func join41(t testing.TB, c *testclient.Client, id [16]byte, ops ...nfsv4.NfsArgop4) *rawReply {
	t.Helper()
	rep := raw(t, c, append([]nfsv4.NfsArgop4{&txnJoinOp{id: id}, seq(c)}, ops...)...)
	if len(rep.results) < 2 || rep.results[0].op != server.OpTxnJoin || rep.results[1].op != nfsv4.OP_SEQUENCE {
		t.Fatalf("joined reply: status %d, %d results", rep.status, len(rep.results))
	}
	return rep
}

func end41(t testing.TB, c *testclient.Client, id [16]byte, commit bool) *rawReply {
	t.Helper()
	var cm uint32
	if commit {
		cm = 1
	}
	return raw(t, c, seq(c), &txnEndOp{id: id, commit: cm})
}

func rootHas(t testing.TB, c *testclient.Client, name string) bool {
	t.Helper()
	rep, err := c.Compound(putroot(), lookup(name))
	if err != nil {
		t.Fatal(err)
	}
	return rep.Status == nfsv4.NFS4_OK
}

func waitOpenTxns(t testing.TB, s *server.Server, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for server.OpenTxnsForTest(s) != want {
		if time.Now().After(deadline) {
			t.Fatalf("open transactions: %d, want %d", server.OpenTxnsForTest(s), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTxnMultiBasic41(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-a")
	other := ts.session(t, 1, "mt-b")
	id := begin41(t, c)

	// A directory created in the first compound, a file in it in the
	// second, through the directory's handle.
	rep := join41(t, c, id, putroot(), mkdir("d"), getfh())
	if rep.status != nfsv4.NFS4_OK {
		t.Fatalf("mkdir in txn: %d", rep.status)
	}
	dfh := fhOf(t, rep.results[4].res)
	rep = join41(t, c, id, putfh(dfh), openCreate(c, "f"), write(current, 0, []byte("hello")), closeOp(current), getfh())
	if rep.status != nfsv4.NFS4_OK {
		t.Fatalf("create in txn: %d", rep.status)
	}
	ffh := fhOf(t, rep.results[6].res)
	rep = join41(t, c, id, putfh(ffh), read(anon, 0, 100))
	if d, _ := readData(t, rep.results[3].res); string(d) != "hello" {
		t.Fatalf("read in txn: %q", d)
	}
	if rootHas(t, other, "d") || rootHas(t, c, "d") {
		t.Fatal("uncommitted directory visible outside the transaction")
	}
	// A failing operation stops the compound, not the transaction; the
	// operations before it stay.
	rep = join41(t, c, id, putroot(), mkdir("e"), lookup("nope"), mkdir("never"))
	if rep.status != nfsv4.NFS4ERR_NOENT || len(rep.results) != 5 {
		t.Fatalf("failing compound: status %d, %d results", rep.status, len(rep.results))
	}
	// JOIN anywhere but first is illegal.
	rep = raw(t, c, seq(c), putroot(), &txnJoinOp{id: id})
	if rep.status != nfsv4.NFS4ERR_OP_ILLEGAL {
		t.Fatalf("JOIN not first: %d", rep.status)
	}
	// BEGIN / END inside a joined compound or an OP_TXN compound.
	rep = join41(t, c, id, &txnEndOp{id: id, commit: 1})
	if rep.status != nfsv4.NFS4ERR_NOTSUPP {
		t.Fatalf("END in joined compound: %d", rep.status)
	}
	if r := end41(t, c, id, true); r.status != nfsv4.NFS4_OK {
		t.Fatalf("commit: %d", r.status)
	}
	for _, n := range []string{"d", "e"} {
		if !rootHas(t, other, n) {
			t.Fatalf("%s not visible after commit", n)
		}
	}
	if rootHas(t, other, "never") {
		t.Fatal("operation after the failing one ran")
	}
	if d := okT(t)(other.Compound(putfh(ffh), read(anon, 0, 100))); len(d.Results) != 2 {
		t.Fatal("file handle from the transaction does not work after commit")
	}
	if r := end41(t, c, id, true); r.status != nfsv4.NFS4ERR_EXPIRED {
		t.Fatalf("second END: %d, want EXPIRED", r.status)
	}
	if r := raw(t, c, &txnJoinOp{id: id}, seq(c), putroot()); r.status != nfsv4.NFS4ERR_EXPIRED {
		t.Fatalf("JOIN after END: %d, want EXPIRED", r.status)
	}
}

func TestTxnMultiOPTXNHasNoBegin(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-optxn")
	b := testclient.EncodeCompound(1, true, []nfsv4.NfsArgop4{seq(c), putroot(), &txnBeginOp{}})
	rr, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, b)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRaw(rr.Body)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != nfsv4.NFS4ERR_NOTSUPP {
		t.Fatalf("TXN_BEGIN in an OP_TXN compound: %d, want NOTSUPP", r.status)
	}
}

func TestTxnMultiAbortDiscardsState(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-abort")
	other := ts.session(t, 1, "mt-abort-b")
	id := begin41(t, c)
	rep := join41(t, c, id, putroot(), openCreate(c, "f"), write(current, 0, []byte("x")))
	if rep.status != nfsv4.NFS4_OK {
		t.Fatalf("open in txn: %d", rep.status)
	}
	sid := openSid(t, rep.results[3].res)
	if r := end41(t, c, id, false); r.status != nfsv4.NFS4_OK {
		t.Fatalf("abort: %d", r.status)
	}
	if rootHas(t, other, "f") {
		t.Fatal("aborted transaction left a file")
	}
	// The open stateid created in the aborted transaction is gone.
	r, err := c.Compound(&nfsv4.NfsArgop4_OP_TEST_STATEID{OptestStateid: nfsv4.TestStateid4args{TsStateids: []nfsv4.Stateid4{sid}}})
	if err != nil {
		t.Fatal(err)
	}
	codes := r.Results[0].(*nfsv4.NfsResop4_OP_TEST_STATEID).OptestStateid.(*nfsv4.TestStateid4res_NFS4_OK).TsrResok4.TsrStatusCodes
	if codes[0] == nfsv4.NFS4_OK {
		t.Fatal("open stateid of an aborted transaction is still valid")
	}
	waitOpenTxns(t, ts.srv, 0)
}

func TestTxnMultiWrongClient(t *testing.T) {
	ts := startServer(t)
	a := ts.session(t, 1, "mt-owner")
	b := ts.session(t, 1, "mt-intruder")
	id := begin41(t, a)
	if r := raw(t, b, &txnJoinOp{id: id}, seq(b), putroot(), mkdir("x")); r.status != nfsv4.NFS4ERR_WRONG_CRED || len(r.results) != 2 {
		t.Fatalf("JOIN by another client: %d (%d results), want WRONG_CRED", r.status, len(r.results))
	}
	if r := end41(t, b, id, true); r.status != nfsv4.NFS4ERR_WRONG_CRED {
		t.Fatalf("END by another client: %d, want WRONG_CRED", r.status)
	}
	if rootHas(t, a, "x") {
		t.Fatal("refused JOIN ran operations")
	}
	// Unknown id of this server instance.
	bogus := id
	bogus[15] ^= 0xff
	if r := end41(t, a, bogus, true); r.status != nfsv4.NFS4ERR_EXPIRED {
		t.Fatalf("END of unknown id: %d, want EXPIRED", r.status)
	}
	if r := end41(t, a, id, true); r.status != nfsv4.NFS4_OK {
		t.Fatalf("END by owner: %d", r.status)
	}
}

func TestTxnMulti40(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	if err := c.SetClientID("mt-40"); err != nil {
		t.Fatal(err)
	}
	o := ts.dial(t)
	if err := o.SetClientID("mt-40-other"); err != nil {
		t.Fatal(err)
	}
	if r := raw(t, c, &txnBeginOp{clientID: 12345}); r.status != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Fatalf("BEGIN with a bogus client id: %d", r.status)
	}
	if r := raw(t, c, &txnBeginOp{flags: 1, clientID: c.ClientID}); r.status != nfsv4.NFS4ERR_INVAL {
		t.Fatalf("BEGIN with flags: %d", r.status)
	}
	r := raw(t, c, &txnBeginOp{clientID: c.ClientID})
	if r.status != nfsv4.NFS4_OK {
		t.Fatalf("BEGIN: %d", r.status)
	}
	id := r.results[0].id
	// An OPEN with 4.0 seqids inside the transaction, then CLOSE.
	open := openWith(c, "f40", "o40", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_NONE, &nfsv4.Createhow4_UNCHECKED4{})
	r = raw(t, c, &txnJoinOp{id: id, clientID: c.ClientID}, putroot(), mkdir("d40"), putroot(), open)
	if r.status != nfsv4.NFS4_OK {
		t.Fatalf("joined 4.0 compound: %d", r.status)
	}
	if r := raw(t, o, &txnJoinOp{id: id, clientID: o.ClientID}, putroot()); r.status != nfsv4.NFS4ERR_WRONG_CRED {
		t.Fatalf("JOIN by another 4.0 client: %d", r.status)
	}
	rep, err := o.Compound(putroot(), lookup("d40"))
	if err != nil || rep.Status != nfsv4.NFS4ERR_NOENT {
		t.Fatalf("uncommitted directory visible to 4.0 client: %v %d", err, rep.Status)
	}
	if r := raw(t, c, &txnEndOp{id: id, clientID: c.ClientID, commit: 1}); r.status != nfsv4.NFS4_OK {
		t.Fatalf("END: %d", r.status)
	}
	okT(t)(o.Compound(putroot(), lookup("d40")))
	okT(t)(o.Compound(putroot(), lookup("f40")))
}

func TestTxnMultiReplayCache(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-replay")
	id := begin41(t, c)
	sq := seq(c)
	ops := []nfsv4.NfsArgop4{&txnJoinOp{id: id}, sq, putroot(), mkdir("once"), getfh()}
	args := testclient.EncodeCompound(1, false, ops)
	r1, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r1.Body, r2.Body) {
		t.Fatal("retransmitted joined compound was not answered from the reply cache")
	}
	if rep, _ := decodeRaw(r2.Body); rep.status != nfsv4.NFS4_OK {
		t.Fatalf("joined compound: %d (re-executed?)", rep.status)
	}
	// END, retransmitted: the second answer is the cached success, not
	// EXPIRED.
	sq = seq(c)
	args = testclient.EncodeCompound(1, false, []nfsv4.NfsArgop4{sq, &txnEndOp{id: id, commit: 1}})
	r1, err = c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	r2, err = c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	if rep, _ := decodeRaw(r2.Body); !bytes.Equal(r1.Body, r2.Body) || rep.status != nfsv4.NFS4_OK {
		t.Fatalf("retransmitted TXN_END: status %d, identical %v", rep.status, bytes.Equal(r1.Body, r2.Body))
	}
	if !rootHas(t, c, "once") {
		t.Fatal("committed directory missing")
	}
}

func TestTxnMultiBadXDR(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-xdr")
	id := begin41(t, c)
	cases := []struct {
		name string
		ops  []nfsv4.NfsArgop4
		cut  int
	}{
		{"join", []nfsv4.NfsArgop4{&txnJoinOp{id: id}}, 5},
		{"begin", []nfsv4.NfsArgop4{seq(c), &txnBeginOp{}}, 3},
		{"end", []nfsv4.NfsArgop4{seq(c), &txnEndOp{id: id}}, 1},
		{"end-bool", []nfsv4.NfsArgop4{seq(c), &txnEndOp{id: id, commit: 2}}, 0},
	}
	for _, tc := range cases {
		b := testclient.EncodeCompound(1, false, tc.ops)
		b = b[:len(b)-tc.cut]
		rr, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, b)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := decodeRaw(rr.Body)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rep.status != nfsv4.NFS4ERR_BADXDR || len(rep.results) != 0 {
			t.Fatalf("%s: status %d, %d results; want BADXDR and none", tc.name, rep.status, len(rep.results))
		}
	}
	// Nothing ran: the transaction is still open and the slot unused.
	c.Seq -= 3
	if r := end41(t, c, id, true); r.status != nfsv4.NFS4_OK {
		t.Fatalf("END after malformed requests: %d", r.status)
	}
}

func TestTxnMultiLimits(t *testing.T) {
	ts := startServerDir(t, t.TempDir(), func(cfg *server.Config) { cfg.TxnMaxPerClient, cfg.TxnMaxOpen = 2, 3 })
	a := ts.session(t, 1, "mt-lim-a")
	b := ts.session(t, 1, "mt-lim-b")
	begin41(t, a)
	ida := begin41(t, a)
	if r := raw(t, a, seq(a), &txnBeginOp{}); r.status != nfsv4.NFS4ERR_RESOURCE {
		t.Fatalf("third BEGIN of a client: %d, want RESOURCE", r.status)
	}
	begin41(t, b)
	if r := raw(t, b, seq(b), &txnBeginOp{}); r.status != nfsv4.NFS4ERR_RESOURCE {
		t.Fatalf("fourth BEGIN of the server: %d, want RESOURCE", r.status)
	}
	end41(t, a, ida, false)
	begin41(t, b)
}

func TestTxnMultiLeaseExpiry(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-lease")
	id := begin41(t, c)
	if r := join41(t, c, id, putroot(), mkdir("leased")); r.status != nfsv4.NFS4_OK {
		t.Fatalf("mkdir in txn: %d", r.status)
	}
	ts.clock.Advance(3 * time.Minute) // past the 90 s lease
	waitOpenTxns(t, ts.srv, 0)
	o := ts.session(t, 1, "mt-lease-other")
	if rootHas(t, o, "leased") {
		t.Fatal("transaction of an expired client committed")
	}
}

func TestTxnMultiIdleTimeout(t *testing.T) {
	ts := startServerDir(t, t.TempDir(), func(cfg *server.Config) { cfg.TxnIdleTimeout = 30 * time.Second })
	c := ts.session(t, 1, "mt-idle")
	id := begin41(t, c)
	ts.clock.Advance(20 * time.Second)
	join41(t, c, id, putroot()) // use resets the idle timer
	ts.clock.Advance(20 * time.Second)
	time.Sleep(1500 * time.Millisecond)
	if n := server.OpenTxnsForTest(ts.srv); n != 1 {
		t.Fatalf("transaction used 20 s ago was expired (%d open)", n)
	}
	ts.clock.Advance(20 * time.Second)
	waitOpenTxns(t, ts.srv, 0)
	if r := end41(t, c, id, true); r.status != nfsv4.NFS4ERR_EXPIRED {
		t.Fatalf("END of idle-expired txn: %d", r.status)
	}
}

func TestTxnMultiDestroyClientID(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-destroy")
	id := begin41(t, c)
	if r := join41(t, c, id, putroot(), mkdir("destroyed")); r.status != nfsv4.NFS4_OK {
		t.Fatalf("mkdir in txn: %d", r.status)
	}
	okT(t)(c.CompoundRaw(1, false, &nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: c.SessionID}}))
	okT(t)(c.CompoundRaw(1, false, &nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: c.ClientID}}))
	waitOpenTxns(t, ts.srv, 0)
	o := ts.session(t, 1, "mt-destroy-other")
	if rootHas(t, o, "destroyed") {
		t.Fatal("transaction of a destroyed client committed")
	}
}

func TestTxnMultiRestartIsStale(t *testing.T) {
	dir := t.TempDir()
	ts := startServerDir(t, dir, nil)
	c := ts.session(t, 1, "mt-restart")
	id := begin41(t, c)
	join41(t, c, id, putroot(), mkdir("lost"))
	ts.stop()
	ts2 := startServerDir(t, dir, nil)
	c2 := ts2.session(t, 1, "mt-restart")
	if r := raw(t, c2, &txnJoinOp{id: id}, seq(c2), putroot()); r.status != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Fatalf("JOIN after restart: %d, want STALE_CLIENTID", r.status)
	}
	if r := end41(t, c2, id, true); r.status != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Fatalf("END after restart: %d, want STALE_CLIENTID", r.status)
	}
	if rootHas(t, c2, "lost") {
		t.Fatal("uncommitted transaction survived a restart")
	}
}

func TestTxnMultiConflictReport(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-conflict")
	o := ts.session(t, 1, "mt-conflict-b")
	writeFile(t, o, "acct", []byte("100"))
	id := begin41(t, c)
	if r := join41(t, c, id, putroot(), lookup("acct"), read(anon, 0, 10)); r.status != nfsv4.NFS4_OK {
		t.Fatalf("read in txn: %d", r.status)
	}
	if r := join41(t, c, id, putroot(), lookup("acct"), write(anon, 0, []byte("050"))); r.status != nfsv4.NFS4_OK {
		t.Fatalf("write in txn: %d", r.status)
	}
	okT(t)(o.Compound(putroot(), lookup("acct"), write(anon, 0, []byte("200"))))
	r := end41(t, c, id, true)
	if r.status != nfsv4.NFS4ERR_NOT_SAME {
		t.Fatalf("conflicting commit: %d, want NOT_SAME", r.status)
	}
	rep := r.results[1].report
	if !bytes.Contains([]byte(rep), []byte("READ /acct")) || !bytes.Contains([]byte(rep), []byte("WRITE /acct")) {
		t.Fatalf("report lacks the operations:\n%s", rep)
	}
	if got := readFile(t, o, "acct"); string(got) != "200" {
		t.Fatalf("after failed commit the file holds %q, want the concurrent write's 200", got)
	}
	if r := end41(t, c, id, false); r.status != nfsv4.NFS4ERR_EXPIRED {
		t.Fatalf("abort after failed commit: %d, want EXPIRED", r.status)
	}

	// A namespace conflict is pinpointed: the transaction looked up a
	// name (absent) that another client then created.
	id = begin41(t, c)
	join41(t, c, id, putroot(), lookup("late"))
	if r := join41(t, c, id, putroot(), mkdir("mine"), mkdir("sub"), putroot(), lookup("mine"), lookup("sub")); r.status != nfsv4.NFS4_OK {
		t.Fatalf("mkdirs in txn: %d", r.status)
	}
	okT(t)(o.Compound(putroot(), mkdir("late")))
	r = end41(t, c, id, true)
	if r.status != nfsv4.NFS4ERR_NOT_SAME {
		t.Fatalf("conflicting commit: %d, want NOT_SAME", r.status)
	}
	rep = r.results[1].report
	if !bytes.Contains([]byte(rep), []byte("/late (created by another client)")) || bytes.Contains([]byte(rep), []byte("/mine (")) ||
		bytes.Contains([]byte(rep), []byte("/mine/sub (")) {
		t.Fatalf("report does not single out /late:\n%s", rep)
	}
	t.Logf("report:\n%s", rep)
	if rootHas(t, o, "mine") {
		t.Fatal("conflicting transaction applied a change")
	}
}

// TestTxnMultiBank runs concurrent multi-compound bank transfers between
// account files (read both balances in one compound, write each in its
// own) and audits that read all accounts over two compounds. Every audit
// must see the invariant total, and the final balances must equal the
// initial ones plus exactly the committed transfers. TXNFS_BANK_TRANSFERS
// sets the number of transfers per worker (default 25).
func TestTxnMultiBank(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TXNFS_BANK_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (TXNFS_BANK_SEED to repeat)", seed)
	perWorker := 25
	if s := os.Getenv("TXNFS_BANK_TRANSFERS"); s != "" {
		perWorker, _ = strconv.Atoi(s)
	}
	const accounts, workers, initial = 6, 4, 1000
	ts := startServer(t)
	ctx := context.Background()
	setup := ts.dialClient(t)
	fhs := make([][]byte, accounts)
	for i := range fhs {
		var cp client.Compound
		cp.PutRootFH()
		cp.Open(setup.ClientID(), setup.OpenOwner(), client.OpenArgs{Name: fmt.Sprintf("acct%d", i), Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
		cp.Write(client.CurrentStateid, 0, balance(initial), true)
		cp.GetFH()
		cp.Close(client.CurrentStateid)
		rep, err := setup.Do(ctx, &cp)
		if err != nil || rep.Err() != nil {
			t.Fatal(err, rep.Err())
		}
		fhs[i] = rep.Results[3].(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
	}
	readAll := func(c *client.Client, id client.TxnID, idx []int) ([]int64, error) {
		cp := client.Compound{TxnID: id}
		for _, i := range idx {
			cp.PutFH(fhs[i])
			cp.Read(client.AnonymousStateid, 0, 8)
		}
		rep, err := c.Do(ctx, &cp)
		if err != nil {
			return nil, err
		}
		if err := rep.Err(); err != nil {
			return nil, err
		}
		out := make([]int64, len(idx))
		for k := range idx {
			d := rep.Results[2*k+1].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data
			out[k] = int64(binary.BigEndian.Uint64(d))
		}
		return out, nil
	}
	write := func(c *client.Client, id client.TxnID, i int, v int64) error {
		cp := client.Compound{TxnID: id}
		cp.PutFH(fhs[i])
		cp.Write(client.AnonymousStateid, 0, balance(v), true)
		rep, err := c.Do(ctx, &cp)
		if err != nil {
			return err
		}
		return rep.Err()
	}
	var mu sync.Mutex
	delta := make([]int64, accounts)
	var committed, conflicts, audits int
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			c, err := client.Dial(ctx, client.Config{Addr: ts.addr})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for n := 0; n < perWorker; {
				from, to := rng.IntN(accounts), rng.IntN(accounts-1)
				if to >= from {
					to++
				}
				amount := int64(rng.IntN(50) + 1)
				id, err := c.TxnBegin(ctx)
				if err != nil {
					errs <- err
					return
				}
				bal, err := readAll(c, id, []int{from, to})
				if err == nil {
					err = write(c, id, from, bal[0]-amount)
				}
				if err == nil {
					err = write(c, id, to, bal[1]+amount)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				err = c.TxnEnd(ctx, id, true)
				var ce *client.TxnConflictError
				switch {
				case err == nil:
					mu.Lock()
					delta[from] -= amount
					delta[to] += amount
					committed++
					mu.Unlock()
					n++
				case errors.As(err, &ce):
					mu.Lock()
					conflicts++
					mu.Unlock()
				default:
					errs <- fmt.Errorf("worker %d: commit: %w", w, err)
					return
				}
			}
		}(w)
	}
	stop := make(chan struct{})
	var auditWG sync.WaitGroup
	auditWG.Add(1)
	go func() { // the auditor
		defer auditWG.Done()
		c, err := client.Dial(ctx, client.Config{Addr: ts.addr})
		if err != nil {
			errs <- err
			return
		}
		defer c.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			id, err := c.TxnBegin(ctx)
			if err != nil {
				errs <- err
				return
			}
			a, err := readAll(c, id, []int{0, 1, 2})
			var b []int64
			if err == nil {
				b, err = readAll(c, id, []int{3, 4, 5})
			}
			if err != nil {
				errs <- fmt.Errorf("audit: %w", err)
				return
			}
			var sum int64
			for _, v := range append(a, b...) {
				sum += v
			}
			if sum != accounts*initial {
				errs <- fmt.Errorf("audit saw total %d, want %d (balances %v %v)", sum, accounts*initial, a, b)
				return
			}
			if err := c.TxnEnd(ctx, id, false); err != nil {
				errs <- fmt.Errorf("audit end: %w", err)
				return
			}
			mu.Lock()
			audits++
			mu.Unlock()
		}
	}()
	wg.Wait()
	close(stop)
	auditWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	final, err := readAll(setup, client.TxnID{}, []int{0, 1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range final {
		if v != initial+delta[i] {
			t.Fatalf("account %d: %d, want %d (initial + committed transfers): lost or phantom update", i, v, initial+delta[i])
		}
	}
	t.Logf("%d transfers committed, %d conflicts (retried), %d audits", committed, conflicts, audits)
}

func balance(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// FuzzTxnOps feeds COMPOUNDs made of the transaction operations (valid,
// truncated, mutated) to the server: every input must get a decodable
// reply or GARBAGE_ARGS, never a crash or hang.
func FuzzTxnOps(f *testing.F) {
	ts := startServer(f)
	c := ts.dial(f)
	if err := c.SetClientID("fuzz-40"); err != nil {
		f.Fatal(err)
	}
	r, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, testclient.EncodeCompound(0, false, []nfsv4.NfsArgop4{&txnBeginOp{clientID: c.ClientID}}))
	if err != nil {
		f.Fatal(err)
	}
	rep, err := decodeRaw(r.Body)
	if err != nil || rep.status != nfsv4.NFS4_OK {
		f.Fatal("BEGIN", err)
	}
	id := rep.results[0].id
	seeds := [][]nfsv4.NfsArgop4{
		{&txnBeginOp{clientID: c.ClientID}},
		{&txnJoinOp{id: id, clientID: c.ClientID}, putroot(), mkdir("fz"), getfh()},
		{&txnJoinOp{id: id, clientID: c.ClientID}, putroot(), &txnEndOp{id: id, clientID: c.ClientID, commit: 1}},
		{putroot(), &txnJoinOp{id: id}},
		{&txnEndOp{id: id, clientID: c.ClientID, commit: 1}},
		{&txnEndOp{id: id, clientID: c.ClientID, commit: 7}},
		{&txnBeginOp{flags: 3}},
	}
	for _, ops := range seeds {
		b := testclient.EncodeCompound(0, false, ops)
		f.Add(b)
		f.Add(b[:len(b)-3])
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		rep := ts.srv.Handle(context.Background(), &rpc.Call{Prog: 100003, Vers: 4, Proc: 1, Args: args,
			Cred: rpc.Cred{Flavor: rpcv2.AUTH_SYS}})
		switch rep.Stat {
		case rpcv2.GARBAGE_ARGS:
		case rpcv2.SUCCESS:
			body := rep.Body
			for _, b := range rep.More {
				body = append(body[:len(body):len(body)], b...)
			}
			if rep.Done != nil {
				rep.Done()
			}
			if _, err := decodeRaw(body); err != nil {
				t.Fatalf("reply does not decode: %v", err)
			}
		default:
			t.Fatalf("accept stat %d", rep.Stat)
		}
	})
}

// TestTxnMultiConcurrentJoins sends COMPOUNDs joining one transaction
// from several goroutines at once (several slots in flight): the server
// must run them one at a time (go test -race checks the engine
// transaction is never used concurrently), and all of them commit.
func TestTxnMultiConcurrentJoins(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	c := ts.dialClient(t)
	id, err := c.TxnBegin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cp := client.Compound{TxnID: id}
			cp.PutRootFH()
			cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: fmt.Sprintf("cj%d", i), Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
			cp.Write(client.CurrentStateid, 0, []byte(strconv.Itoa(i)), true)
			cp.Close(client.CurrentStateid)
			rep, err := c.Do(ctx, &cp)
			if err == nil {
				err = rep.Err()
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	o := ts.session(t, 1, "cj-other")
	if rootHas(t, o, "cj0") {
		t.Fatal("uncommitted file visible")
	}
	if err := c.TxnEnd(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if got := readFile(t, o, fmt.Sprintf("cj%d", i)); string(got) != strconv.Itoa(i) {
			t.Fatalf("cj%d: %q", i, got)
		}
	}
}
