// Package rpc is an ONC RPC v2 (RFC 5531) server for stream transports:
// record marking, call header decoding with the generated types of
// github.com/buildbarn/go-xdr/pkg/protocols/rpcv2, AUTH_NONE and AUTH_SYS,
// bounded per-connection concurrency and serialized reply writes.
//
// # Wire format
//
// Each message is a record made of fragments; each fragment starts with a
// 4-byte big-endian header whose top bit marks the last fragment and whose
// low 31 bits give the fragment length:
//
//	+--------+------------------+--------+------------------+
//	|1|len=n1| n1 bytes (last)  |   or   |0|len| ... |1|len| ...
//	+--------+------------------+--------+------------------+
//
// A record longer than Config.MaxRecord closes the connection (the stream
// cannot be resynchronized without reading it). A record whose call header
// does not decode is answered GARBAGE_ARGS when its xid can be read, and
// otherwise ignored.
//
// # Concurrency
//
// Each connection is served by up to Config.MaxInflight worker
// goroutines, leader/follower style: one worker at a time reads a record,
// lets the next worker read, and runs the call itself (no hand-off
// between reading and running). The next worker is let read only when
// the handler calls Call.Release (before any work that may take long) or
// when the call returns, or at once if another request is already
// buffered: a quick call from a client with one request in flight then
// costs no goroutine wake-up at all. When all workers are busy nobody
// reads, so a flooding client is throttled by TCP flow control. Replies are written whole,
// under a per-connection mutex, with a write deadline (re-armed once half
// of it has passed, so a write may block for WriteTimeout/2 to
// WriteTimeout): a client that does not read its replies loses its
// connection and never blocks other connections.
package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/internal/bufpool"
	"github.com/txnfs/txnfs/internal/hugepage"
)

// Cred is the caller's identity from the RPC credential.
type Cred struct {
	Flavor      rpcv2.AuthFlavor // AUTH_NONE or AUTH_SYS
	Uid, Gid    uint32
	Gids        []uint32
	MachineName string
}

// Call is one decoded RPC call.
type Call struct {
	Xid  uint32
	Prog uint32
	Vers uint32
	Proc uint32
	Cred Cred
	// Args holds the procedure arguments. The handler owns it unless it
	// calls ReuseArgs (see there).
	Args []byte
	// Size is the size of the whole call message (RPC header,
	// credential and arguments, without record marks).
	Size int
	// Conn identifies the connection the call arrived on (stable for the
	// life of the connection, unique within the server process).
	Conn uint64

	release func()
	// overlapping: the connection's client had calls overlap lately
	// (conn.overlap), so Release releases at once.
	overlapping bool
	// declined: Release did not release (the connection was not seen
	// to overlap and nothing waited).
	declined bool
	reuse    bool       // ReuseArgs was called
	rec      []byte     // the whole record Args lies in (see AlignPayload)
	crc      *recordCRC // the record's CRC32C from the payload offset on, or nil
	cn       *conn      // the connection, nil for a Call not from a Server
}

// PayloadAlign is the memory alignment AlignPayload arranges: what an
// O_DIRECT write needs (the slice store writes such a payload straight
// from the record, without a staging copy).
const PayloadAlign = 4096

// Aligned reports whether p is non-empty and starts PayloadAlign-aligned
// in memory.
func Aligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))%PayloadAlign == 0
}

// alignMinRecord: records shorter than this are never shifted for
// alignment (a small record gains nothing and would take a larger pool
// class).
const alignMinRecord = 64 << 10

// AlignPayload reports whether p, a part of Args (e.g. a WRITE's data),
// starts PayloadAlign-aligned in memory, and asks the connection to place
// its later records of at least 64 KiB so that the byte at p's offset in
// this record is aligned: clients repeat the layout of their WRITE
// compounds (same tag, file handle length and operations), so the next
// WRITE's payload then lands aligned without a copy. A record of another
// layout is simply read at a shifted start, which costs nothing. Safe to
// call from the handler's goroutine; p outside Args is ignored.
func (c *Call) AlignPayload(p []byte) bool {
	aligned := Aligned(p)
	if c.cn == nil || len(p) == 0 || len(c.rec) == 0 {
		return aligned
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(p))) - uintptr(unsafe.Pointer(unsafe.SliceData(c.rec)))
	if off < uintptr(len(c.rec)) {
		c.cn.alignOff.Store(int64(off) + 1)
	}
	return aligned
}

// PayloadCRC returns the CRC32C (Castagnoli) of p, a part of Args (e.g. a
// WRITE's data), computed while the record arrived: ok=false unless p
// starts at the offset the connection hashes records from, which is the
// payload offset AlignPayload learnt (records of at least 64 KiB are
// hashed from there on in 64 KiB blocks right after each read(2), while the
// bytes are in the CPU cache; the rest of p, at most one partial block, is
// hashed now). The result is what p holds at the time of the call, as
// long as nobody wrote into Args: the server never does, and a handler
// must not before it calls this (valid only while Handle runs).
func (c *Call) PayloadCRC(p []byte) (uint32, bool) {
	if c.crc == nil {
		return 0, false
	}
	return c.crc.sum(c.rec, p)
}

// ReuseArgs tells the server that the handler keeps no reference to
// Args (or any part of it) once its reply has been written, so the
// record's buffer may serve a later request of any connection. Without
// it the buffer is left to the garbage collector, as if Args were a fresh
// slice. Records are pooled because a fresh buffer per request costs its
// zeroing, and on this project's VM a page fault per 4 KiB touched (a
// 1 MiB WRITE's record: docs/nfs-server.md, "Session 4").
func (c *Call) ReuseArgs() { c.reuse = true }

// Release lets the connection read (and run) its next request while this
// call runs, if the client has one waiting or recently had calls running
// at once (see conn.overlap): a client with one call in flight at a time
// would only wake a worker that finds nothing to read. A handler calls it
// before anything that may take long (disk I/O, waiting for durability);
// until then, or until the handler returns, later requests of the same
// connection wait. It must be called from the goroutine running Handle,
// before Handle returns. Calling it more than once, or on a Call not from
// a Server, is harmless.
func (c *Call) Release() {
	if c.release == nil {
		return
	}
	if c.overlapping || c.cn == nil || c.cn.waiting() {
		c.ReleaseNow()
		return
	}
	c.declined = true
}

// ReleaseNow is Release whatever the client's past: for a call that may
// wait for a later request of the same connection.
func (c *Call) ReleaseNow() {
	if c.release != nil {
		c.release()
		c.release = nil
	}
}

// Reply is a handler's answer: Stat is the accept status; Body holds the
// encoded results when Stat is SUCCESS.
type Reply struct {
	Stat rpcv2.AcceptStat
	Body []byte
	// More holds further result bytes sent after Body (with writev, not
	// copied), e.g. READ data referenced where it was read into.
	More [][]byte
	// Done, if set, is called once the reply has been written (or
	// dropped); the handler may then reuse the buffers of Body and More.
	Done func()
	// MismatchLow/High are sent with PROG_MISMATCH.
	MismatchLow, MismatchHigh uint32
	// RPCMismatch denies the call (MSG_DENIED, RPC_MISMATCH 2..2).
	RPCMismatch bool
	// AuthErr, if not AUTH_OK, denies the call with this auth_stat.
	AuthErr rpcv2.AuthStat
}

// Handler serves calls. Handle may be called concurrently (up to
// MaxInflight per connection). It owns call.Args and may keep it, unless
// it calls call.ReuseArgs.
type Handler interface {
	Handle(ctx context.Context, call *Call) Reply
}

// ConnObserver is an optional Handler upgrade told when connections close.
type ConnObserver interface {
	ConnClosed(conn uint64)
}

// Config configures a Server.
type Config struct {
	Handler Handler
	Logger  *slog.Logger
	// MaxRecord caps one request record in bytes (default 4 MiB + 64 KiB).
	MaxRecord int
	// MaxInflight caps concurrent calls per connection (default 32).
	MaxInflight int
	// WriteTimeout bounds the time to write one reply (default 30s; a
	// write may fail after half of it, see refreshDeadline).
	WriteTimeout time.Duration
	// IdleTimeout closes a connection that sends nothing for this long
	// (0: never).
	IdleTimeout time.Duration
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Handler == nil {
		return errors.New("rpc: Config.Handler is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxRecord <= 0 {
		c.MaxRecord = 4<<20 + 64<<10
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 32
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	return nil
}

// Server serves RPC over stream connections.
type Server struct {
	cfg Config

	mu struct {
		sync.Mutex
		nextConn uint64
		conns    map[uint64]net.Conn
	}
}

// NewServer returns a server; cfg is validated.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg}
	s.mu.conns = make(map[uint64]net.Conn)
	return s, nil
}

// Serve accepts connections until ctx is done or the listener fails. It
// closes the listener and all connections before returning, and waits for
// their goroutines.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer func() {
		s.mu.Lock()
		for _, c := range s.mu.conns {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.mu.Lock()
		s.mu.nextConn++
		id := s.mu.nextConn
		s.mu.conns[id] = c
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ServeConn(ctx, id, c)
			s.mu.Lock()
			delete(s.mu.conns, id)
			s.mu.Unlock()
		}()
	}
}

// ServeConn serves one connection until it fails or ctx is done, then
// closes it. id must be unique among live connections.
//
// Requests run under ctx, not under the connection: one whose connection
// drops runs to completion, so that an NFSv4.1 session's slot caches its
// real reply for the client's retransmission on a new connection (RFC
// 8881 §2.10.6.2) instead of a cancellation (NFS4ERR_DELAY at whatever
// operation was running, which the retransmission would then get).
func (s *Server) ServeConn(ctx context.Context, id uint64, c net.Conn) {
	reqCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	cn := &conn{srv: s, id: id, c: c, done: make(chan error, 1)}
	r := io.Reader(c)
	if s.cfg.IdleTimeout > 0 {
		r = deadlineReader{c, s.cfg.IdleTimeout}
	}
	cn.rd = newBufReader(r)
	if sc, ok := c.(syscall.Conn); ok {
		cn.raw, _ = sc.SyscallConn()
	}
	defer func() {
		cancel()
		c.Close()
		cn.wg.Wait()
		if o, ok := s.cfg.Handler.(ConnObserver); ok {
			o.ConnClosed(id)
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	cn.mu.Lock()
	cn.mu.workers = 1
	cn.mu.Unlock()
	cn.wg.Add(1)
	go cn.worker(reqCtx)
	if err := <-cn.done; err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.cfg.Logger.Debug("rpc: connection closed", "remote", c.RemoteAddr().String(), "err", err)
	}
}

// conn is one connection served by leader/follower workers: the worker
// holding rmu reads the next request, releases rmu (waking the next
// reader) and runs the request itself, so no goroutine hand-off lies
// between reading a request and running it. A worker is started when
// the last idle one takes a request, up to MaxInflight; when all are busy
// nobody reads, and TCP flow control throttles the client.
type conn struct {
	srv  *Server
	id   uint64
	c    net.Conn
	wg   sync.WaitGroup
	done chan error // the first read error ends the connection

	rmu  sync.Mutex // held by the worker reading a request
	rd   io.Reader
	rerr error // guarded by rmu: reading failed, workers exit

	mu struct {
		sync.Mutex
		workers, busy int
		// overlap counts down the calls, from overlapCalls at the last
		// call that started while another ran or was waiting (or
		// during which a request came that its declined Release held
		// back), for which Release lets the next request be read at
		// once. When it is 0 the client has sent one call at a time:
		// Release then releases only if a request is waiting
		// (conn.waiting).
		overlap int
	}
	// raw is the socket, for FIONREAD (nil: unknown, assume data waits).
	raw      syscall.RawConn
	wmu      sync.Mutex // serializes reply writes
	wbuf     []byte     // guarded by wmu: small replies are assembled here
	deadline time.Time  // guarded by wmu: the write deadline set last

	// alignOff is 1 + the record offset that records of at least
	// alignMinRecord bytes are placed to make PayloadAlign-aligned in
	// memory (set by Call.AlignPayload), or 0 for none.
	alignOff atomic.Int64
}

// ErrRecordTooLarge is returned by ReadRecord when a record exceeds the cap.
var ErrRecordTooLarge = errors.New("rpc: record too large")

// ReadRecord reads one record-marked record of at most max bytes from r.
// It returns io.EOF only if r ends cleanly before the first header. The
// record is read straight into its final buffer (one allocation for the
// usual single-fragment record).
func ReadRecord(r io.Reader, max int) ([]byte, error) {
	return readRecord(r, max, nil, nil, nil)
}

// readRecord is ReadRecord taking the buffer of the first fragment from
// get (nil: a fresh allocation). A record of several fragments grows by
// slices.Grow; the caller tells a pooled buffer by its capacity. If hc is
// set, hashStart(n) is asked, with the first fragment's length, from which
// record offset to hash the record (-1: not at all), and the bytes are
// hashed into hc as they arrive (readHashed).
func readRecord(r io.Reader, max int, get func(n int) []byte, hc *recordCRC, hashStart func(n int) int) ([]byte, error) {
	var rec []byte
	first := true
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) && !first {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		first = false
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h & 0x7fffffff)
		if len(rec)+n > max {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrRecordTooLarge, max)
		}
		old := len(rec)
		if rec == nil && hc != nil {
			hc.reset(hashStart(n))
		}
		switch {
		case rec == nil && get != nil:
			rec = get(n)
		case rec == nil:
			rec = make([]byte, n)
		default:
			rec = slices.Grow(rec, n)[:old+n]
		}
		var err error
		if hc != nil && hc.start >= 0 {
			err = readHashed(r, rec, old, hc)
		} else {
			_, err = io.ReadFull(r, rec[old:])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if h&0x80000000 != 0 {
			return rec, nil
		}
	}
}

// readHashed fills rec[from:] from r like io.ReadFull, in reads of at
// most crcReadMax bytes, hashing into h what has arrived after each one.
func readHashed(r io.Reader, rec []byte, from int, h *recordCRC) error {
	for got := from; got < len(rec); {
		m, err := r.Read(rec[got:min(len(rec), got+crcReadMax)])
		got += m
		if m > 0 {
			h.update(rec[:got])
		}
		if err != nil && got < len(rec) {
			return err
		}
		if m == 0 && err == nil {
			return io.ErrNoProgress // as io.ReadFull would loop on forever
		}
	}
	return nil
}

type deadlineReader struct {
	c       net.Conn
	timeout time.Duration
}

func (d deadlineReader) Read(p []byte) (int, error) {
	if d.timeout > 0 {
		d.c.SetReadDeadline(time.Now().Add(d.timeout))
	}
	return d.c.Read(p)
}

// worker reads and runs requests (under ctx) until the connection fails. It holds
// rmu while reading and until the call releases the connection (or, if
// it never does, across the call and on to reading the next request: a
// worker that keeps the connection wakes nobody).
func (cn *conn) worker(ctx context.Context) {
	defer cn.wg.Done()
	// base is the pooled buffer the record being read lies in (or was
	// read into before a later fragment grew it elsewhere).
	var base []byte
	get := func(n int) []byte {
		var rec []byte
		rec, base = cn.recordBuffer(n)
		return rec
	}
	// crc is this worker's: the worker that reads a record runs it.
	crc := &recordCRC{}
	hashStart := func(n int) int {
		off := cn.alignOff.Load() - 1
		if off < 0 || n < alignMinRecord || off >= int64(n) {
			return -1
		}
		return int(off)
	}
	cn.rmu.Lock()
	for {
		if cn.rerr != nil {
			cn.rmu.Unlock()
			return
		}
		base = nil
		rec, err := readRecord(cn.rd, cn.srv.cfg.MaxRecord, get, crc, hashStart)
		if err != nil {
			if base != nil {
				// A record cut short (the client went away): its buffer
				// is nobody's. Huge records must come back, or a client
				// that hangs up mid-record would use them all up.
				putRecord(base)
			}
			cn.rerr = err
			cn.rmu.Unlock()
			cn.c.Close() // ends the reads of nobody else; writers fail fast
			cn.done <- err
			return
		}
		waiting := cn.buffered()
		cn.mu.Lock()
		cn.mu.busy++
		if cn.mu.busy > 1 || waiting {
			cn.mu.overlap = overlapCalls
		} else if cn.mu.overlap > 0 {
			cn.mu.overlap--
		}
		overlapping := cn.mu.overlap > 0
		cn.mu.Unlock()
		released := false
		release := func() {
			if released {
				return
			}
			released = true
			cn.mu.Lock()
			if cn.mu.busy == cn.mu.workers && cn.mu.workers < cn.srv.cfg.MaxInflight {
				// Nobody else is waiting to read: start a follower.
				cn.mu.workers++
				cn.wg.Add(1)
				go cn.worker(ctx)
			}
			cn.mu.Unlock()
			cn.rmu.Unlock()
		}
		if waiting {
			release() // a pipelined request is already waiting
		}

		recBase := base
		call, rep, ok := cn.srv.decodeCall(rec)
		switch {
		case !ok: // not even an xid: drop
			putRecord(recBase)
		case rep != nil:
			cn.writeReply(call.Xid, rep)
			putRecord(recBase)
		default:
			call.Conn = cn.id
			call.release, call.overlapping = release, overlapping
			call.rec, call.cn = rec, cn
			if crc.start >= 0 {
				call.crc = crc
			}
			rep := cn.srv.handle(ctx, call)
			if call.declined && !released && cn.waiting() {
				// A request came while Release held the connection
				// back: it waited for this call, so the client does
				// have calls overlap. Without this, a client keeping
				// two calls in flight, the second sent while the
				// first runs, is never seen to overlap (each request
				// is read alone, after the previous call ended).
				cn.mu.Lock()
				cn.mu.overlap = overlapCalls
				cn.mu.Unlock()
			}
			cn.writeReply(call.Xid, &rep)
			if call.reuse {
				putRecord(recBase)
			} else {
				dropRecord(recBase)
			}
		}
		cn.mu.Lock()
		cn.mu.busy--
		cn.mu.Unlock()
		if released {
			cn.rmu.Lock()
		}
	}
}

// overlapCalls is how many calls after the last one that overlapped
// another (or found a request waiting) Release keeps releasing at once.
// A client that pipelines shows it within that many calls; one whose
// calls never overlap costs no goroutine wake-up per call that takes
// long (a 1 MiB WRITE: two thread switches fewer, docs/nfs-server.md
// "Session 11"). The price: a request such a client sends while its
// previous one still runs waits for that one to end, and is then seen to
// overlap.
const overlapCalls = 64

// waiting reports whether bytes of a further request are waiting, in the
// reader's buffer or the socket (called with rmu held).
func (cn *conn) waiting() bool {
	if cn.buffered() || cn.raw == nil {
		return true
	}
	n, ok := socketUnread(cn.raw)
	return !ok || n > 0
}

// buffered reports whether bytes of a further request are already
// buffered (called with rmu held).
func (cn *conn) buffered() bool {
	b, ok := cn.rd.(interface{ Buffered() int })
	return !ok || b.Buffered() > 0
}

// handle runs the handler. A panic is a server bug: it is logged with its
// stack and answered SYSTEM_ERR, so one bad request cannot take the whole
// server down.
func (s *Server) handle(ctx context.Context, call *Call) (rep Reply) {
	defer func() {
		if r := recover(); r != nil {
			s.cfg.Logger.Error("rpc: handler panic", "xid", call.Xid, "proc", call.Proc,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			rep = Reply{Stat: rpcv2.SYSTEM_ERR}
		}
	}()
	return s.cfg.Handler.Handle(ctx, call)
}

// decodeCall parses a call record with the generated rpcv2 decoder. It
// returns ok=false if the record cannot even yield an xid (or is not a
// call), and a non-nil reply if the call must be answered without
// reaching the handler.
func (s *Server) decodeCall(rec []byte) (*Call, *Reply, bool) {
	rd := bytes.NewReader(rec)
	var msg rpcv2.RpcMsg
	if _, err := msg.ReadFrom(rd); err != nil {
		// Answer GARBAGE_ARGS only to what starts as a call.
		hd := bytes.NewReader(rec)
		xid, _, err := runtime.ReadUnsignedInt(hd)
		if err != nil {
			return nil, nil, false
		}
		var mtype rpcv2.MsgType
		if _, err := mtype.ReadFrom(hd); err == nil && mtype != rpcv2.CALL {
			return nil, nil, false // a reply or junk: ignore
		}
		return &Call{Xid: xid}, &Reply{Stat: rpcv2.GARBAGE_ARGS}, true
	}
	body, ok := msg.Body.(*rpcv2.RpcMsgBody_CALL)
	if !ok {
		return nil, nil, false
	}
	cb := &body.Cbody
	call := &Call{Xid: msg.Xid, Prog: cb.Prog, Vers: cb.Vers, Proc: cb.Proc}
	if cb.Rpcvers != 2 {
		return call, &Reply{RPCMismatch: true}, true
	}
	switch cb.Cred.Flavor {
	case rpcv2.AUTH_NONE:
		call.Cred = Cred{Flavor: rpcv2.AUTH_NONE, Uid: 65534, Gid: 65534}
	case rpcv2.AUTH_SYS:
		var p rpcv2.AuthsysParms
		br := bytes.NewReader(cb.Cred.Body)
		if _, err := p.ReadFrom(br); err != nil || br.Len() != 0 {
			return call, &Reply{AuthErr: rpcv2.AUTH_BADCRED}, true
		}
		call.Cred = Cred{Flavor: rpcv2.AUTH_SYS, Uid: p.Uid, Gid: p.Gid, Gids: p.Gids, MachineName: p.Machinename}
	default:
		return call, &Reply{AuthErr: rpcv2.AUTH_TOOWEAK}, true
	}
	call.Args = rec[len(rec)-rd.Len():]
	call.Size = len(rec)
	return call, nil, true
}

// EncodeReply encodes the RPC reply message for xid (without record mark).
func EncodeReply(xid uint32, rep *Reply) []byte {
	var body rpcv2.ReplyBody
	switch {
	case rep.RPCMismatch:
		body = &rpcv2.ReplyBody_MSG_DENIED{Rreply: &rpcv2.RejectedReply_RPC_MISMATCH{
			MismatchInfo: struct {
				Low  uint32
				High uint32
			}{2, 2},
		}}
	case rep.AuthErr != rpcv2.AUTH_OK:
		body = &rpcv2.ReplyBody_MSG_DENIED{Rreply: &rpcv2.RejectedReply_AUTH_ERROR{Stat: rep.AuthErr}}
	default:
		var data rpcv2.AcceptedReplyData
		switch rep.Stat {
		case rpcv2.SUCCESS:
			data = &rpcv2.AcceptedReplyData_SUCCESS{}
		case rpcv2.PROG_MISMATCH:
			d := &rpcv2.AcceptedReplyData_PROG_MISMATCH{}
			d.MismatchInfo.Low, d.MismatchInfo.High = rep.MismatchLow, rep.MismatchHigh
			data = d
		default:
			data = &rpcv2.AcceptedReplyData_default{Stat: rep.Stat}
		}
		body = &rpcv2.ReplyBody_MSG_ACCEPTED{Areply: rpcv2.AcceptedReply{
			Verf:      rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE},
			ReplyData: data,
		}}
	}
	msg := rpcv2.RpcMsg{Xid: xid, Body: &rpcv2.RpcMsgBody_REPLY{Rbody: body}}
	n := msg.GetEncodedSizeBytes()
	buf := bytes.NewBuffer(make([]byte, 0, 4+n+len(rep.Body)))
	buf.Write([]byte{0, 0, 0, 0}) // the record mark, set below
	if _, err := msg.WriteTo(buf); err != nil {
		panic(fmt.Sprintf("rpc: encoding reply header: %v", err)) // cannot happen: fixed types
	}
	if rep.Stat == rpcv2.SUCCESS && !rep.RPCMismatch && rep.AuthErr == rpcv2.AUTH_OK {
		buf.Write(rep.Body)
	}
	b := buf.Bytes()
	PutRecordMark(b, len(b)-4)
	return b
}

// PutRecordMark writes at b[0:4] the record mark (RFC 5531 §11: record
// marking, the framing of RPC on TCP, not XDR) of a record of n bytes
// sent as one last fragment.
func PutRecordMark(b []byte, n int) {
	binary.BigEndian.PutUint32(b, uint32(n)|0x80000000)
}

func (cn *conn) writeReply(xid uint32, rep *Reply) {
	if rep.Done != nil {
		defer rep.Done()
	}
	ok := rep.Stat == rpcv2.SUCCESS && !rep.RPCMismatch && rep.AuthErr == rpcv2.AUTH_OK
	if !ok {
		cn.write(net.Buffers{EncodeReply(xid, rep)})
		return
	}
	n := len(rep.Body)
	for _, b := range rep.More {
		n += len(b)
	}
	if len(rep.Body) > 4096 || len(rep.More) > 0 {
		// Large bodies are written with writev, without copying them
		// behind the header.
		hdr := successHeader(make([]byte, 0, successHeaderSize), xid, n)
		bufs := make(net.Buffers, 0, 2+len(rep.More))
		bufs = append(bufs, hdr, rep.Body)
		cn.write(append(bufs, rep.More...))
		return
	}
	// Small replies are assembled in the connection's reply buffer
	// and written with one write: no allocation per reply.
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	b := successHeader(cn.wbuf[:0], xid, n)
	b = append(b, rep.Body...)
	cn.wbuf = b
	cn.refreshDeadline()
	if _, err := cn.c.Write(b); err != nil {
		cn.c.Close() // the reader notices and ends the connection
	}
}

// successHeaderSize is the size of a record mark and an accepted,
// successful reply header with an AUTH_NONE verifier.
const successHeaderSize = 4 + 24

// successReply is the body of every successful reply's rpc_msg (accepted,
// AUTH_NONE verifier, SUCCESS); never modified.
var successReply = &rpcv2.RpcMsgBody_REPLY{Rbody: &rpcv2.ReplyBody_MSG_ACCEPTED{Areply: rpcv2.AcceptedReply{
	Verf:      rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE},
	ReplyData: &rpcv2.AcceptedReplyData_SUCCESS{},
}}}

// successHeader appends the record mark and reply header (encoded by the
// generated rpcv2 code) of a successful reply to xid whose results are n
// bytes long: the same bytes as EncodeReply(xid, &Reply{Stat: SUCCESS})
// without the results.
func successHeader(b []byte, xid uint32, n int) []byte {
	w := appender{b: append(b, 0, 0, 0, 0)} // the record mark, set below
	msg := rpcv2.RpcMsg{Xid: xid, Body: successReply}
	msg.WriteTo(&w) // cannot fail: fixed types, appending
	PutRecordMark(w.b[len(b):], len(w.b)-len(b)-4+n)
	return w.b
}

// appender is an io.Writer that appends to b.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// WriteByte implements io.ByteWriter (go-xdr's runtime writes integers
// through it without allocating).
func (a *appender) WriteByte(c byte) error {
	a.b = append(a.b, c)
	return nil
}

// write writes one reply whole (serialized with other replies, under the
// write deadline).
func (cn *conn) write(bufs net.Buffers) {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	cn.refreshDeadline()
	if _, err := bufs.WriteTo(cn.c); err != nil {
		cn.c.Close() // the reader notices and ends the connection
	}
}

// refreshDeadline moves the write deadline to WriteTimeout from now
// unless more than half of that is still ahead (setting a deadline
// re-arms a runtime timer: not per reply). So a reply write may block
// for between WriteTimeout/2 and WriteTimeout. wmu is held.
func (cn *conn) refreshDeadline() {
	now := time.Now()
	if cn.deadline.Sub(now) > cn.srv.cfg.WriteTimeout/2 {
		return
	}
	cn.deadline = now.Add(cn.srv.cfg.WriteTimeout)
	cn.c.SetWriteDeadline(cn.deadline)
}

func newBufReader(r io.Reader) io.Reader { return bufio.NewReaderSize(r, 64<<10) }

// Record buffers are pooled by size class (internal/bufpool): class k
// holds buffers of capacity minPooled << k, up to maxPooled (a 1 MiB WRITE
// plus its header takes the 2 MiB class; only the bytes read are ever
// touched). Larger records are allocated per request. sync.Pool keeps a
// buffer across one garbage collection, and the server's GC runs rarely
// once records stop being allocated.
const (
	minPooled = 4 << 10
	maxPooled = 8 << 20
)

var records = bufpool.New(minPooled, maxPooled)

// getRecord returns a buffer of length n, pooled if n is small enough
// (contents undefined).
func getRecord(n int) []byte { return *records.Get(n) }

// recordBuffer returns a buffer of length n for a record's first fragment:
// a pooled one, or, when the connection asked for alignment
// (Call.AlignPayload), n is at least alignMinRecord and a huge record is
// available and large enough, a slice of a huge record whose start is
// shifted so that the byte at the asked offset is PayloadAlign-aligned.
// base is the pooled buffer, which putRecord takes back once the record is
// no longer used.
func (cn *conn) recordBuffer(n int) (rec, base []byte) {
	off := cn.alignOff.Load() - 1
	if off >= 0 && n >= alignMinRecord && off < int64(n) && n+PayloadAlign-1 <= hugeCap {
		if b, ok := getHugeRecord(); ok {
			addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(off)
			shift := int((PayloadAlign - addr%PayloadAlign) % PayloadAlign)
			return b[shift : shift+n], b
		}
	}
	// No alignment: a payload on small pages is better copied into the
	// slice store's huge-page staging buffer than written from there
	// (see hugeRecords).
	b := getRecord(n)
	return b, b
}

// putRecord returns a record's buffer to its pool if it came from one
// (its capacity is exactly a class size, or it is a huge record).
func putRecord(rec []byte) {
	if cap(rec) == hugeCap {
		select {
		case hugeRecords <- rec[:cap(rec)]:
		default: // cannot happen: at most maxHugeRecords exist
			hugeMade.Add(-1)
		}
		return
	}
	records.Put(&rec)
}

// dropRecord forgets a record's buffer that the handler kept (no
// ReuseArgs: an NFSv4.0 compound, a multi-compound transaction): the
// garbage collector frees it once nothing refers to it. A huge record no
// longer counts against maxHugeRecords, so a new one may be made (before,
// every kept huge record was lost to the bounded set for good, and 16
// large NFSv4.0 WRITEs ended payload alignment for the whole process).
func dropRecord(rec []byte) {
	if cap(rec) == hugeCap {
		hugeMade.Add(-1)
	}
}

// hugeRecords are free huge records: buffers on one transparent huge page
// each (hugeCap bytes), for the records a connection places for alignment
// (recordBuffer). Their payload goes to disk with O_DIRECT straight from
// the record, and an O_DIRECT write of a buffer on one huge page pins one
// page instead of 256 (see internal/hugepage; measured: a 1 MiB WRITE
// written from a small-page record cost 0-10% more server CPU than with
// the slice store's staging copy into its huge-page buffer, and from a
// huge record 3-19% less: docs/nfs-server.md, "Session 6, brief A"). At
// most maxHugeRecords (32 MiB) are made, and kept for the process's life
// (a sync.Pool would drop them at every GC, and a fresh one costs its page
// faults and a collapse); when all are in use, records are read unshifted
// into the ordinary pool (the slice store then stages the payload).
var hugeRecords = make(chan []byte, maxHugeRecords)

// hugeMade counts the huge records made (at most maxHugeRecords).
var hugeMade atomic.Int32

const maxHugeRecords = 16

// hugeCap is a huge record's length and capacity: one byte short of a
// huge page, so that no size class of records (powers of two) has it and
// putRecord tells huge records apart by capacity alone.
const hugeCap = hugepage.Size - 1

// getHugeRecord returns a free huge record, making one if fewer than
// maxHugeRecords exist; ok=false if all are in use.
func getHugeRecord() (b []byte, ok bool) {
	select {
	case b := <-hugeRecords:
		return b, true
	default:
	}
	if hugeMade.Add(1) <= maxHugeRecords {
		return hugepage.Aligned(hugepage.Size)[:hugeCap:hugeCap], true
	}
	hugeMade.Add(-1)
	return nil, false
}
