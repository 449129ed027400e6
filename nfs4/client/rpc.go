package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"
)

// ErrTransport wraps failures of the TCP connection (dial, write, read,
// malformed records). A call that failed with ErrTransport may or may not
// have been executed by the server.
var ErrTransport = errors.New("nfs4 client: transport failure")

// errRPCReject is an RPC-level rejection (not a COMPOUND status).
type rpcError struct {
	what string
}

func (e *rpcError) Error() string { return "nfs4 client: rpc " + e.what }

// errGarbageArgs is returned when the server answers GARBAGE_ARGS.
var errGarbageArgs = &rpcError{"GARBAGE_ARGS"}

// transport is one TCP connection carrying ONC RPC (RFC 5531) records.
// Calls may overlap: each waits for the reply carrying its xid, which a
// single reader goroutine demultiplexes.
type transport struct {
	conn     net.Conn
	cred     []byte // encoded AUTH_SYS body
	maxReply int

	wmu sync.Mutex // serializes record writes

	mu struct {
		sync.Mutex
		xid     uint32
		pending map[uint32]chan rpcReply
		err     error // set once the connection is dead
	}
	done chan struct{}
}

type rpcReply struct {
	body []byte
	err  error
}

func newTransport(conn net.Conn, cred []byte, maxReply int, xid0 uint32) *transport {
	t := &transport{conn: conn, cred: cred, maxReply: maxReply, done: make(chan struct{})}
	t.mu.pending = make(map[uint32]chan rpcReply)
	t.mu.xid = xid0
	go t.readLoop()
	return t
}

// close kills the connection; pending calls fail with ErrTransport.
func (t *transport) close(reason error) {
	t.mu.Lock()
	if t.mu.err == nil {
		t.mu.err = reason
	}
	t.mu.Unlock()
	t.conn.Close()
}

func (t *transport) dead() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.err
}

func (t *transport) readLoop() {
	defer close(t.done)
	br := bufio.NewReaderSize(quickAckReader{t.conn}, 64<<10)
	for {
		rec, err := readRecord(br, t.maxReply)
		if err != nil {
			t.fail(fmt.Errorf("%w: reading reply: %v", ErrTransport, err))
			return
		}
		// The xid (rpc_msg's first field) routes the reply to its
		// call; parseReply decodes the rest.
		xid, _, err := runtime.ReadUnsignedInt(bytes.NewReader(rec))
		if err != nil {
			t.fail(fmt.Errorf("%w: short reply record", ErrTransport))
			return
		}
		t.mu.Lock()
		ch, ok := t.mu.pending[xid]
		delete(t.mu.pending, xid)
		t.mu.Unlock()
		if !ok {
			continue // reply to an abandoned call
		}
		ch <- rpcReply{body: rec}
	}
}

func (t *transport) fail(err error) {
	t.mu.Lock()
	if t.mu.err == nil {
		t.mu.err = err
	}
	pending := t.mu.pending
	t.mu.pending = make(map[uint32]chan rpcReply)
	t.mu.Unlock()
	for _, ch := range pending {
		ch <- rpcReply{err: t.dead()}
	}
	t.conn.Close()
}

// call sends one RPC call (program NFSv4, version 4) with args as the
// procedure arguments and returns the procedure results. args is owned
// by the caller; the returned slice is owned by the caller. cred is the
// AUTH_SYS body to send (nil: the transport's).
func (t *transport) call(ctx context.Context, proc uint32, cred []byte, args [][]byte) ([]byte, error) {
	if cred == nil {
		cred = t.cred
	}
	ch := make(chan rpcReply, 1)
	t.mu.Lock()
	if t.mu.err != nil {
		err := t.mu.err
		t.mu.Unlock()
		return nil, err
	}
	t.mu.xid++
	xid := t.mu.xid
	t.mu.pending[xid] = ch
	t.mu.Unlock()

	msg := rpcv2.RpcMsg{Xid: xid, Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: 2, Prog: nfsProgram, Vers: 4, Proc: proc,
		Cred: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: cred},
		Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE},
	}}}
	var hdr bytes.Buffer
	hdr.Write([]byte{0, 0, 0, 0})
	if _, err := msg.WriteTo(&hdr); err != nil {
		return nil, fmt.Errorf("nfs4 client: encoding rpc header: %w", err)
	}
	n := hdr.Len() - 4
	for _, a := range args {
		n += len(a)
	}
	b := hdr.Bytes()
	binary.BigEndian.PutUint32(b, uint32(n)|0x80000000)
	bufs := net.Buffers{b}
	for _, a := range args {
		bufs = append(bufs, a)
	}
	t.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		t.conn.SetWriteDeadline(dl)
	}
	_, err := bufs.WriteTo(t.conn)
	t.wmu.Unlock()
	if err != nil {
		t.fail(fmt.Errorf("%w: writing call: %v", ErrTransport, err))
		return nil, t.dead()
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return parseReply(r.body)
	case <-ctx.Done():
		t.mu.Lock()
		delete(t.mu.pending, xid)
		t.mu.Unlock()
		return nil, ctx.Err()
	}
}

const nfsProgram = 100003

// parseReply checks an RPC reply header and returns the results.
func parseReply(rec []byte) ([]byte, error) {
	r := bytes.NewReader(rec)
	var msg rpcv2.RpcMsg
	if _, err := msg.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("%w: bad reply header: %v", ErrTransport, err)
	}
	body, ok := msg.Body.(*rpcv2.RpcMsgBody_REPLY)
	if !ok {
		return nil, fmt.Errorf("%w: record is not a reply", ErrTransport)
	}
	acc, ok := body.Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
	if !ok {
		return nil, &rpcError{"call rejected (RPC version or authentication)"}
	}
	switch st := acc.Areply.ReplyData.GetStat(); st {
	case rpcv2.SUCCESS:
	case rpcv2.GARBAGE_ARGS:
		return nil, errGarbageArgs
	case rpcv2.PROG_MISMATCH:
		return nil, &rpcError{"PROG_MISMATCH (server does not speak NFSv4)"}
	default:
		return nil, &rpcError{fmt.Sprintf("accept status %d", st)}
	}
	return rec[len(rec)-r.Len():], nil
}

// readRecord reads one record-marked record (RFC 5531 §11).
func readRecord(r io.Reader, max int) ([]byte, error) {
	var rec []byte
	for {
		var h [4]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil, err
		}
		v := binary.BigEndian.Uint32(h[:])
		n := int(v & 0x7fffffff)
		if len(rec)+n > max {
			return nil, fmt.Errorf("record of more than %d bytes", max)
		}
		start := len(rec)
		rec = append(rec, make([]byte, n)...)
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			return nil, err
		}
		if v&0x80000000 != 0 {
			return rec, nil
		}
	}
}

// authSys encodes an AUTH_SYS credential body.
func authSys(machine string, uid, gid uint32, gids []uint32) ([]byte, error) {
	if len(gids) > 16 {
		gids = gids[:16] // the AUTH_SYS limit
	}
	p := rpcv2.AuthsysParms{Machinename: machine, Uid: uid, Gid: gid, Gids: gids}
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// quickAckReader sets TCP_QUICKACK before every read. A server that
// writes a reply in more than one segment without TCP_NODELAY (NFS-Ganesha
// does) otherwise waits for our delayed ACK (40 ms) between segments: each
// RPC would cost 40 ms.
type quickAckReader struct{ c net.Conn }

func (r quickAckReader) Read(p []byte) (int, error) {
	if tc, ok := r.c.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			rc.Control(setQuickAck)
		}
	}
	return r.c.Read(p)
}
