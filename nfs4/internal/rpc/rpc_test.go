package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

func record(frags ...[]byte) []byte {
	var out []byte
	for i, f := range frags {
		h := uint32(len(f))
		if i == len(frags)-1 {
			h |= 0x80000000
		}
		out = binary.BigEndian.AppendUint32(out, h)
		out = append(out, f...)
	}
	return out
}

func TestReadRecord(t *testing.T) {
	rec, err := ReadRecord(bytes.NewReader(record([]byte("ab"), []byte("cd"), nil)), 100)
	if err != nil || string(rec) != "abcd" {
		t.Fatalf("got %q, %v", rec, err)
	}
	if _, err := ReadRecord(bytes.NewReader(nil), 100); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
	if _, err := ReadRecord(bytes.NewReader(record([]byte("abc"))[:5]), 100); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := ReadRecord(bytes.NewReader(record(make([]byte, 101))), 100); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	// Many small fragments adding up past the cap are refused too.
	frags := make([][]byte, 20)
	for i := range frags {
		frags[i] = make([]byte, 10)
	}
	if _, err := ReadRecord(bytes.NewReader(record(frags...)), 100); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("fragmented too large: %v", err)
	}
}

type echo struct{}

func (echo) Handle(ctx context.Context, c *Call) Reply {
	if c.Proc == 99 {
		panic("boom")
	}
	switch c.Proc {
	case 98: // slow, lets the connection's next request run
		c.Release()
		time.Sleep(50 * time.Millisecond)
	case 97: // slow without releasing: the next request waits
		time.Sleep(50 * time.Millisecond)
	case 96: // slow, lets the connection's next request run whatever the client's past
		c.ReleaseNow()
		time.Sleep(50 * time.Millisecond)
	case 94: // 5 ms, lets the connection's next request run
		c.Release()
		time.Sleep(5 * time.Millisecond)
	case 95: // slow, releasing after 20 ms
		time.Sleep(20 * time.Millisecond)
		c.Release()
		time.Sleep(50 * time.Millisecond)
	}
	return Reply{Stat: rpcv2.SUCCESS, Body: c.Args}
}

func call(xid, proc uint32, cred rpcv2.OpaqueAuth, args []byte) []byte {
	msg := rpcv2.RpcMsg{Xid: xid, Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: 2, Prog: 1, Vers: 1, Proc: proc, Cred: cred, Verf: rpcv2.OpaqueAuth{}}}}
	var b bytes.Buffer
	msg.WriteTo(&b)
	b.Write(args)
	return record(b.Bytes())
}

func readReply(t testing.TB, c net.Conn) (*rpcv2.RpcMsg, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, err := ReadRecord(c, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(rec)
	var m rpcv2.RpcMsg
	if _, err := m.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	return &m, rec[len(rec)-r.Len():]
}

func TestServerCallsAuthAndPanics(t *testing.T) {
	s, err := NewServer(Config{Handler: echo{}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	go s.ServeConn(context.Background(), 1, a)
	defer b.Close()
	var sys bytes.Buffer
	(&rpcv2.AuthsysParms{Machinename: "m", Uid: 5, Gid: 6}).WriteTo(&sys)

	b.Write(call(7, 1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: sys.Bytes()}, []byte{1, 2, 3, 4}))
	m, body := readReply(t, b)
	if m.Xid != 7 || !bytes.Equal(body, []byte{1, 2, 3, 4}) {
		t.Fatalf("xid %d body %v", m.Xid, body)
	}
	// An unsupported flavor is denied with AUTH_TOOWEAK.
	b.Write(call(8, 1, rpcv2.OpaqueAuth{Flavor: rpcv2.RPCSEC_GSS}, nil))
	m, _ = readReply(t, b)
	rej := m.Body.(*rpcv2.RpcMsgBody_REPLY).Rbody.(*rpcv2.ReplyBody_MSG_DENIED).Rreply.(*rpcv2.RejectedReply_AUTH_ERROR)
	if rej.Stat != rpcv2.AUTH_TOOWEAK {
		t.Fatalf("stat %d", rej.Stat)
	}
	// A malformed AUTH_SYS body is AUTH_BADCRED.
	b.Write(call(9, 1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: []byte{1}}, nil))
	m, _ = readReply(t, b)
	if m.Body.(*rpcv2.RpcMsgBody_REPLY).Rbody.(*rpcv2.ReplyBody_MSG_DENIED).Rreply.(*rpcv2.RejectedReply_AUTH_ERROR).Stat != rpcv2.AUTH_BADCRED {
		t.Fatal("want AUTH_BADCRED")
	}
	// A handler panic is SYSTEM_ERR and the connection lives on.
	b.Write(call(10, 99, rpcv2.OpaqueAuth{}, nil))
	m, _ = readReply(t, b)
	if st := m.Body.(*rpcv2.RpcMsgBody_REPLY).Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED).Areply.ReplyData.GetStat(); st != rpcv2.SYSTEM_ERR {
		t.Fatalf("stat %d", st)
	}
	// Calls run concurrently: a slow call does not delay a fast one.
	b.Write(call(11, 98, rpcv2.OpaqueAuth{}, nil))
	b.Write(call(12, 1, rpcv2.OpaqueAuth{}, nil))
	m, _ = readReply(t, b)
	if m.Xid != 12 {
		t.Fatalf("first reply xid %d, want the fast call 12", m.Xid)
	}
	readReply(t, b)
	// Bad RPC version: RPC_MISMATCH.
	msg := rpcv2.RpcMsg{Xid: 13, Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{Rpcvers: 3}}}
	var buf bytes.Buffer
	msg.WriteTo(&buf)
	b.Write(record(buf.Bytes()))
	m, _ = readReply(t, b)
	if _, ok := m.Body.(*rpcv2.RpcMsgBody_REPLY).Rbody.(*rpcv2.ReplyBody_MSG_DENIED).Rreply.(*rpcv2.RejectedReply_RPC_MISMATCH); !ok {
		t.Fatal("want RPC_MISMATCH")
	}
}

// TestRelease checks that a call that does not release its connection
// holds back the connection's next request (read by the same worker
// afterwards), and that one that releases it does not — also when both
// requests arrive in one segment (the second is buffered) — except while
// the client has sent one call at a time (conn.overlap): then Release
// lets the next request be read only if one is waiting (in the socket:
// proc 95), and ReleaseNow always does. Each connection starts without
// overlapping calls.
func TestRelease(t *testing.T) {
	for _, steps := range [][]releaseStep{
		{
			{97, false, 1}, // held: replies in order
			{98, false, 1}, // one call at a time so far: Release does not release
			{98, true, 2},  // released: the fast call overtakes (it was buffered)
			{97, true, 2},  // the second request was already buffered: released at once
			{98, false, 2}, // the client overlapped calls lately: released
		},
		{{96, false, 2}}, // ReleaseNow
		{{95, false, 2}}, // the fast request waits in the socket at the Release
	} {
		testRelease(t, steps)
	}
}

// releaseStep: a slow call with the proc given, then a fast one, sent
// together or one after the other, and the xid whose reply comes first.
type releaseStep struct {
	slowProc  uint32
	together  bool
	wantFirst uint32
}

// stepper is the handler of the Release tests. A slow call (proc 97: no
// Release; 98: Release; 96: ReleaseNow; 95: Release once the test has
// sent the next request) reports its xid on at once past its release
// point (97 and 95: when it starts), then replies only when the test
// sends on done; other procs reply at once. The tests order every step by
// these signals: with sleeps instead (a slow call of 50 ms, the next
// request sent 10 ms after it) a loaded machine reordered them (5 of 20
// runs failed at load 20).
type stepper struct {
	at   chan uint32
	sent chan struct{} // proc 95: the next request is in the socket
	done chan struct{}
}

func (s stepper) Handle(ctx context.Context, c *Call) Reply {
	switch c.Proc {
	case 98:
		c.Release()
	case 96:
		c.ReleaseNow()
	case 97, 95:
	default:
		return Reply{Stat: rpcv2.SUCCESS, Body: c.Args}
	}
	s.at <- c.Xid
	if c.Proc == 95 {
		<-s.sent
		c.Release()
	}
	<-s.done
	return Reply{Stat: rpcv2.SUCCESS, Body: c.Args}
}

// serveStepper serves a stepper and dials it; the calls still held when
// the test ends (a failed test leaves some) reply before the server stops.
func serveStepper(t *testing.T) (net.Conn, stepper) {
	s := stepper{at: make(chan uint32, 1), sent: make(chan struct{}), done: make(chan struct{})}
	c := serveAndDial(t, Config{Handler: s})
	t.Cleanup(func() { close(s.done) }) // runs before serveAndDial's
	return c, s
}

// wantReply reads the next reply and fails unless it is xid's.
func wantReply(t *testing.T, c net.Conn, xid uint32, what string) {
	t.Helper()
	if m, _ := readReply(t, c); m.Xid != xid {
		t.Fatalf("%s: reply %d, want %d", what, m.Xid, xid)
	}
}

// noReplyYet checks that no reply comes within 50 ms (a slow call holds
// the connection: the request after it must wait).
func noReplyYet(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [1]byte
	if n, err := c.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: a reply came while the slow call held the connection (%d bytes, %v)", what, n, err)
	}
}

func testRelease(t *testing.T, steps []releaseStep) {
	c, s := serveStepper(t)
	for _, tc := range steps {
		what := fmt.Sprintf("proc %d together=%v", tc.slowProc, tc.together)
		slow := call(1, tc.slowProc, rpcv2.OpaqueAuth{}, nil)
		fast := call(2, 1, rpcv2.OpaqueAuth{}, nil)
		if tc.together {
			c.Write(append(slow, fast...))
			<-s.at
		} else {
			c.Write(slow)
			<-s.at // the slow call runs, read alone
			c.Write(fast)
		}
		if tc.slowProc == 95 {
			s.sent <- struct{}{}
		}
		if tc.wantFirst == 2 {
			wantReply(t, c, 2, what+": the fast call, while the slow one runs")
			s.done <- struct{}{}
			wantReply(t, c, 1, what+": the slow call")
		} else {
			noReplyYet(t, c, what)
			s.done <- struct{}{}
			wantReply(t, c, 1, what+": the slow call")
			wantReply(t, c, 2, what+": the fast call, after the slow one")
		}
	}
}

// TestEncodeReply pins the header of a successful reply (RFC 5531): record
// mark (last fragment, 24 + body bytes), xid, REPLY, MSG_ACCEPTED, an
// empty AUTH_NONE verifier, SUCCESS; EncodeReply and successHeader agree.
func TestEncodeReply(t *testing.T) {
	body := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	want := []byte{0x80, 0, 0, 32, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	want = append(want, body...)
	if got := EncodeReply(0xdeadbeef, &Reply{Stat: rpcv2.SUCCESS, Body: body}); !bytes.Equal(got, want) {
		t.Fatalf("EncodeReply: %x, want %x", got, want)
	}
	prefix := []byte{9, 9}
	got := append(successHeader(prefix, 0xdeadbeef, len(body)), body...)
	if !bytes.Equal(got[:2], prefix) || !bytes.Equal(got[2:], want) {
		t.Fatalf("successHeader: %x, want %x after %x", got, want, prefix)
	}
}

// FuzzDecode checks that no record crashes the reader or the call
// decoder, and that a decoded call's arguments are the end of its record.
func FuzzDecode(f *testing.F) {
	var sys bytes.Buffer
	(&rpcv2.AuthsysParms{Machinename: "m", Uid: 5, Gid: 6, Gids: []uint32{1, 2}}).WriteTo(&sys)
	f.Add(call(1, 1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: sys.Bytes()}, []byte{0, 0, 0, 0}))
	f.Add(call(2, 0, rpcv2.OpaqueAuth{}, nil))
	f.Add(record([]byte{0, 0, 0, 1, 0, 0, 0, 0}))
	f.Add([]byte{0x80, 0, 0, 0})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	s, _ := NewServer(Config{Handler: echo{}})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			rec, err := ReadRecord(r, 1<<16)
			if err != nil {
				return
			}
			call, rep, ok := s.decodeCall(rec)
			if ok && rep == nil {
				if call.Size != len(rec) || len(call.Args) > len(rec) ||
					len(call.Args) > 0 && unsafe.SliceData(call.Args) != &rec[len(rec)-len(call.Args)] {
					t.Fatalf("call %+v: Args are not the end of the record", call)
				}
			}
		}
	})
}

// keeper keeps the Args of calls with proc 1 (without ReuseArgs) and lets
// the server reuse those of every other call.
type keeper struct {
	kept chan []byte
}

func (k keeper) Handle(ctx context.Context, c *Call) Reply {
	if c.Proc == 1 {
		k.kept <- c.Args
	} else {
		c.ReuseArgs()
	}
	return Reply{Stat: rpcv2.SUCCESS, Body: c.Args}
}

// TestReuseArgs checks the record pool: a handler that calls ReuseArgs
// gets its record's buffer back for later requests (the replies, which
// alias Args, still arrive intact), and the Args of a handler that does
// not are never overwritten. It fails if records are recycled without
// ReuseArgs or before the reply is written.
func TestReuseArgs(t *testing.T) {
	k := keeper{kept: make(chan []byte, 1)}
	c := serveAndDial(t, Config{Handler: k})
	args := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	c.Write(call(1, 1, rpcv2.OpaqueAuth{}, args('k', 3000)))
	readReply(t, c)
	kept := <-k.kept
	for i := 0; i < 50; i++ {
		b := byte('a' + i%26)
		c.Write(call(uint32(i+2), 2, rpcv2.OpaqueAuth{}, args(b, 3000+i)))
		_, body := readReply(t, c)
		if !bytes.Equal(body, args(b, 3000+i)) {
			t.Fatalf("call %d: reply body changed", i)
		}
	}
	if !bytes.Equal(kept, args('k', 3000)) {
		t.Fatal("kept Args were overwritten by a later request")
	}
	// Reused: a record of the same class comes back with the same buffer.
	rec := getRecord(3000)
	p := &rec[:1][0]
	putRecord(rec)
	if got := getRecord(2000); &got[:1][0] != p || cap(got) != minPooled {
		t.Log("pooled buffer not returned (a GC may have emptied the pool)")
	}
	class := func(n int) int { k, _ := records.Class(n); return k }
	if class(maxPooled+1) != -1 || class(1) != 0 || class(minPooled+1) != 1 {
		t.Fatal("record classes")
	}
}

// TestReadRecordPooled reads fragmented records with a pool getter.
func TestReadRecordPooled(t *testing.T) {
	rec, err := readRecord(bytes.NewReader(record([]byte("ab"), []byte("cde"), nil)), 100, getRecord, nil, nil)
	if err != nil || string(rec) != "abcde" {
		t.Fatalf("got %q, %v", rec, err)
	}
	putRecord(rec)
	rec, err = readRecord(bytes.NewReader(record(args5k())), 1<<20, getRecord, nil, nil)
	if err != nil || !bytes.Equal(rec, args5k()) || cap(rec) != 2*minPooled {
		t.Fatalf("got %d bytes (cap %d), %v", len(rec), cap(rec), err)
	}
	putRecord(rec)
}

func args5k() []byte { return bytes.Repeat([]byte("0123456789"), 500) }

// TestWriteTimeout checks that a client that sends requests but never
// reads the replies loses its connection once a reply cannot be written
// for WriteTimeout, for small replies (written from the connection's
// buffer) and large ones (writev).
func TestWriteTimeout(t *testing.T) {
	for _, size := range []int{1000, 64 << 10} {
		c := serveAndDial(t, Config{Handler: echo{}, WriteTimeout: 300 * time.Millisecond})
		start := time.Now()
		c.SetWriteDeadline(start.Add(20 * time.Second))
		req := call(1, 1, rpcv2.OpaqueAuth{}, make([]byte, size))
		var werr error
		for i := 0; werr == nil && i < 1_000_000; i++ {
			_, werr = c.Write(req)
		}
		elapsed := time.Since(start)
		c.Close()
		var ne net.Error
		if werr == nil || errors.As(werr, &ne) && ne.Timeout() {
			t.Fatalf("replies of %d bytes: writes went on for %v (%v): the server kept the connection", size, elapsed, werr)
		}
		if elapsed > 10*time.Second {
			t.Fatalf("replies of %d bytes: connection closed after %v", size, elapsed)
		}
		t.Logf("replies of %d bytes: connection closed after %v (%v)", size, elapsed, werr)
	}
}

// serveAndDial serves cfg on a loopback port for the test's duration and
// returns a connection to it (closed at the end).
func serveAndDial(t testing.TB, cfg Config) net.Conn {
	t.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	return c
}

// blocker's handler waits for release, then reports its context's error.
type blocker struct {
	started, release chan struct{}
	ctxErr           chan error
}

func (b blocker) Handle(ctx context.Context, c *Call) Reply {
	c.Release() // another worker reads on, and sees the connection close
	b.started <- struct{}{}
	<-b.release
	b.ctxErr <- ctx.Err()
	return Reply{Stat: rpcv2.SUCCESS}
}

// TestRequestOutlivesConnection: a request whose connection closes while
// it runs keeps a live context (its reply is what a session's slot cache
// must hold for the retransmission), until the server itself stops.
func TestRequestOutlivesConnection(t *testing.T) {
	b := blocker{started: make(chan struct{}, 1), release: make(chan struct{}), ctxErr: make(chan error, 1)}
	c := serveAndDial(t, Config{Handler: b})
	if _, err := c.Write(call(1, 1, rpcv2.OpaqueAuth{}, []byte("args"))); err != nil {
		t.Fatal(err)
	}
	<-b.started
	c.Close()
	time.Sleep(100 * time.Millisecond) // the server notices the close
	close(b.release)
	if err := <-b.ctxErr; err != nil {
		t.Fatalf("the request's context ended with its connection: %v", err)
	}
}
