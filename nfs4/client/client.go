package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Config configures a Client. Zero fields take the defaults noted.
type Config struct {
	// Addr is the server's host:port (required).
	Addr string
	// Dial opens the TCP connection (default net.Dialer.DialContext).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// UID, GID and GIDs are sent with AUTH_SYS (default: the process's).
	UID, GID *uint32
	GIDs     []uint32
	// MachineName is sent with AUTH_SYS (default: the host name).
	MachineName string
	// Owner identifies this client to the server (EXCHANGE_ID
	// co_ownerid); default: host name, pid and random bytes, so each
	// Client is a distinct NFSv4 client.
	Owner string
	// MinorVersion is 1 or 2; 0 tries 2 and falls back to 1.
	MinorVersion uint32
	// MaxRequestSize and MaxResponseSize are asked of the server in
	// CREATE_SESSION (default 1 MiB + 64 KiB of headroom for headers);
	// the server may lower them: see Limits.
	MaxRequestSize, MaxResponseSize uint32
	// MaxOps is the ca_maxoperations asked for (default 1024).
	MaxOps uint32
	// Slots is the number of session slots asked for, i.e. how many
	// COMPOUNDs may be outstanding at once (default 16).
	Slots uint32
	// Logger receives debug logs (default: discard).
	Logger *slog.Logger
	// Clock tells the time for lease bookkeeping (default time.Now).
	Clock func() time.Time
	// Rand supplies the verifier and owner bytes (default crypto/rand).
	Rand io.Reader
	// NoRenew disables the background lease renewal (tests).
	NoRenew bool
	// RetryFor bounds how long Do keeps resending a COMPOUND whose
	// failing operation answered NFS4ERR_GRACE (the server restarted and
	// is in its grace period) or NFS4ERR_DELAY, when resending is safe
	// (see Do); default: twice the lease; negative: never resend.
	RetryFor time.Duration
	// Hard makes an established client keep trying to reach a server
	// that stopped answering (connection refused or broken), with
	// backoff up to HardRetryMax between attempts, until the call's
	// context ends — the NFS "hard" mount semantics, so a server
	// restart or a network outage delays requests instead of failing
	// them. The outage is logged at warning level once ("not
	// responding, still trying") and its end at info level. Dial itself
	// fails fast (three attempts) either way. Default false: a call
	// fails after three connection attempts (ErrTransport).
	Hard bool
}

// HardRetryMax is the longest wait between two connection attempts of a
// Hard client.
const HardRetryMax = 5 * time.Second

// Validate checks c and fills in defaults.
func (c *Config) Validate() error {
	if c.Addr == "" {
		return errors.New("nfs4 client: Config.Addr is required")
	}
	if c.MinorVersion > 2 {
		return fmt.Errorf("nfs4 client: unsupported minor version %d", c.MinorVersion)
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.UID == nil {
		u := uint32(os.Getuid())
		c.UID = &u
	}
	if c.GID == nil {
		g := uint32(os.Getgid())
		c.GID = &g
	}
	if c.MachineName == "" {
		c.MachineName, _ = os.Hostname()
		if c.MachineName == "" {
			c.MachineName = "localhost"
		}
	}
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	if c.Owner == "" {
		var b [8]byte
		if _, err := io.ReadFull(c.Rand, b[:]); err != nil {
			return fmt.Errorf("nfs4 client: random owner: %w", err)
		}
		c.Owner = fmt.Sprintf("txnfs-vnfs/%s/%d/%s", c.MachineName, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.MaxRequestSize == 0 {
		c.MaxRequestSize = 1<<20 + 64<<10
	}
	if c.MaxResponseSize == 0 {
		c.MaxResponseSize = 1<<20 + 64<<10
	}
	if c.MaxOps == 0 {
		c.MaxOps = 1024
	}
	if c.Slots == 0 {
		c.Slots = 16
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}

// Limits are the negotiated session limits.
type Limits struct {
	MinorVersion    uint32
	MaxRequestSize  uint32 // whole RPC call, headers included
	MaxResponseSize uint32 // whole RPC reply, headers included
	// MaxResponseSizeCached is the largest reply the server keeps in
	// its reply cache for a resend (see sa_cachethis in replay.go).
	MaxResponseSizeCached uint32
	MaxOps                uint32 // operations per COMPOUND, SEQUENCE included
	Slots                 uint32
	Lease                 time.Duration
	// ServerImpl is the server's implementation name from EXCHANGE_ID
	// (e.g. "txnfs"); empty if the server sent none.
	ServerImpl string
}

// Stats counts the traffic of a Client since it was created.
type Stats struct {
	Compounds uint64 // COMPOUND RPCs sent (including session management)
	Ops       uint64 // operations sent, SEQUENCE excluded
	BytesOut  uint64 // call bytes
	BytesIn   uint64 // reply bytes
}

// Client is an NFSv4.1/4.2 client: one TCP connection (re-dialed when it
// breaks), one client ID and one session with a slot table. All methods
// are safe for concurrent use; up to Limits().Slots COMPOUNDs are in flight
// at once.
//
// Lifecycle: Dial returns a ready Client; Close destroys the session and
// client ID and closes the connection. Exactly one Close must be called.
type Client struct {
	cfg   Config
	cred  []byte
	verf  [8]byte
	owner []byte // open-owner
	// chainIDs numbers the client's chains (NewChainID); chainSlots
	// orders their COMPOUNDs' slots.
	chainIDs   atomic.Uint64
	chainSlots chainSlots

	mu struct {
		sync.Mutex
		tr       *transport
		xid      uint32
		sess     *session
		clientID uint64
		limits   Limits
		closed   bool
		lastUse  time.Time
		// stale is a session to replace before the next COMPOUND.
		stale *session
		// txns are the transactions TxnBegin opened and TxnEnd did
		// not end (aborted by Close).
		txns map[TxnID]bool
		// reclaim is the hook SetReclaim installed (nil: none).
		reclaim ReclaimFunc
	}
	// sessMu serializes session (re)establishment.
	sessMu sync.Mutex

	stats struct {
		compounds, ops, out, in atomic.Uint64
	}
	stop chan struct{}
	wg   sync.WaitGroup
	// established is set once Dial returned (Hard applies from then on);
	// unreachable while a Hard client is waiting for the server.
	established, unreachable atomic.Bool
}

// session is one NFSv4.1 session and its slot table.
type session struct {
	retired atomic.Int32
	id      [16]byte
	seq     []uint32 // last sequence id used per slot
	free    chan uint32
	// dead is closed when every slot is retired: COMPOUNDs waiting for
	// a free slot then go on to the session that replaces it.
	dead  chan struct{}
	gen   uint64
	limit Limits
}

// Dial connects to the server, establishes a client ID and a session
// (EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE) and starts lease renewal.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, stop: make(chan struct{})}
	var err error
	if c.cred, err = authSys(cfg.MachineName, *cfg.UID, *cfg.GID, cfg.GIDs); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(cfg.Rand, c.verf[:]); err != nil {
		return nil, err
	}
	var xb [4]byte
	io.ReadFull(cfg.Rand, xb[:])
	c.mu.xid = uint32(xb[0])<<24 | uint32(xb[1])<<16 | uint32(xb[2])<<8 | uint32(xb[3])
	c.owner = []byte("open-" + cfg.Owner)
	if err := c.establish(ctx, nil); err != nil {
		c.closeTransport()
		return nil, err
	}
	if !cfg.NoRenew {
		c.wg.Add(1)
		go c.renewLoop()
	}
	c.established.Store(true)
	return c, nil
}

// ReclaimFunc re-acquires a client's open and lock state after the server
// lost it (a restart): OPEN with Reclaim set (CLAIM_PREVIOUS) and LOCK
// with reclaim set, sent with do, in the new session, before the client
// sends RECLAIM_COMPLETE. Other COMPOUNDs wait until it returns, so they
// run after the state was reclaimed; a stateid they carry from before the
// restart is answered NFS4ERR_BAD_STATEID, and the caller resends it with
// the reclaimed one. It must not call Do (which would wait for it). Its
// error is logged; RECLAIM_COMPLETE is sent anyway.
type ReclaimFunc func(ctx context.Context, do func(context.Context, *Compound) (*Reply, error)) error

// SetReclaim installs fn (nil removes it), called whenever the client
// re-establishes itself with a server that no longer knows it
// (EXCHANGE_ID without EXCHGID4_FLAG_CONFIRMED_R after a lost session:
// the server restarted, or the lease expired), inside its grace period
// if it has one (RFC 8881 §8.4.2.1).
func (c *Client) SetReclaim(fn ReclaimFunc) {
	c.mu.Lock()
	c.mu.reclaim = fn
	c.mu.Unlock()
}

// ClientID returns the current client ID (for OPEN owners).
func (c *Client) ClientID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.clientID
}

// OpenOwner returns the open-owner this client uses.
func (c *Client) OpenOwner() []byte { return c.owner }

// Limits returns the negotiated limits.
func (c *Client) Limits() Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.limits
}

// Stats returns traffic counters.
func (c *Client) Stats() Stats {
	return Stats{Compounds: c.stats.compounds.Load(), Ops: c.stats.ops.Load(),
		BytesOut: c.stats.out.Load(), BytesIn: c.stats.in.Load()}
}

// transport returns the live connection, dialing a new one if needed.
func (c *Client) transport(ctx context.Context) (*transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	if c.mu.tr != nil && c.mu.tr.dead() == nil {
		return c.mu.tr, nil
	}
	if c.mu.tr != nil {
		c.cfg.Logger.Debug("nfs4 client: reconnecting", "addr", c.cfg.Addr, "reason", c.mu.tr.dead())
	}
	conn, err := c.cfg.Dial(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrTransport, c.cfg.Addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	maxReply := int(c.cfg.MaxResponseSize) + 64<<10
	if c.mu.limits.MaxResponseSize != 0 {
		maxReply = int(c.mu.limits.MaxResponseSize) + 64<<10
	}
	// Each connection continues the xid sequence so that retransmitted
	// calls on a new connection do not collide with old xids.
	c.mu.xid += 1 << 20
	c.mu.tr = newTransport(conn, c.cred, maxReply, c.mu.xid)
	return c.mu.tr, nil
}

func (c *Client) closeTransport() {
	c.mu.Lock()
	tr := c.mu.tr
	c.mu.tr = nil
	c.mu.Unlock()
	if tr != nil {
		tr.close(ErrClosed)
	}
}

// rawCall sends COMPOUND args (already encoded) and returns the decoded
// reply. Transport failures are retried on a new connection up to twice,
// or until ctx ends for a Hard client (see Config.Hard): the session's
// reply cache makes that safe for SEQUENCE compounds.
func (c *Client) rawCall(ctx context.Context, args encodedArgs, nops int, cred []byte) (*rawReply, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt >= 3 {
			if !c.cfg.Hard || !c.established.Load() {
				return nil, lastErr
			}
			if err := c.waitForServer(ctx, attempt-3, lastErr); err != nil {
				return nil, err
			}
		}
		tr, err := c.transport(ctx)
		if err != nil {
			lastErr = err
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
			continue
		}
		c.stats.compounds.Add(1)
		c.stats.ops.Add(uint64(nops))
		c.stats.out.Add(uint64(args.size()))
		body, err := tr.call(ctx, 1, cred, args)
		if err != nil {
			if errors.Is(err, ErrTransport) {
				lastErr = err
				continue
			}
			return nil, err
		}
		if c.unreachable.CompareAndSwap(true, false) {
			c.cfg.Logger.Info("nfs4 client: server OK", "addr", c.cfg.Addr)
		}
		c.stats.in.Add(uint64(len(body)))
		rep, err := decodeReply(body)
		if err != nil {
			return nil, fmt.Errorf("%w: undecodable COMPOUND reply: %v", ErrTransport, err)
		}
		return rep, nil
	}
}

// waitForServer sleeps before the n-th extra connection attempt of a Hard
// client (100 ms doubling up to HardRetryMax), logging the start of an
// outage once. It returns an error wrapping ctx's and the last transport
// error if ctx ends first, or ErrClosed if the client is closed.
func (c *Client) waitForServer(ctx context.Context, n int, lastErr error) error {
	if c.unreachable.CompareAndSwap(false, true) {
		c.cfg.Logger.Warn("nfs4 client: server not responding, still trying", "addr", c.cfg.Addr, "err", lastErr)
	}
	d := HardRetryMax
	if n < 6 {
		d = min(HardRetryMax, 100*time.Millisecond<<n)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w (%w)", ctx.Err(), lastErr)
	case <-c.stop:
		return ErrClosed
	case <-t.C:
		return nil
	}
}

// sessionless runs a COMPOUND of one session-management op (EXCHANGE_ID,
// CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID).
func (c *Client) sessionless(ctx context.Context, minor uint32, op nfsv4.NfsArgop4) (nfsv4.NfsResop4, error) {
	args, err := encodeArgs("vnfs", minor, false, nil, []nfsv4.NfsArgop4{op}, op.GetEncodedSizeBytes())
	if err != nil {
		return nil, err
	}
	rep, err := c.rawCall(ctx, args, 1, nil)
	if err != nil {
		return nil, err
	}
	if rep.status != nfsv4.NFS4_OK {
		return nil, &StatusError{Op: op.GetArgop(), Status: rep.status}
	}
	if len(rep.results) != 1 || rep.results[0].GetResop() != op.GetArgop() || rep.statuses[0] != nfsv4.NFS4_OK {
		return nil, fmt.Errorf("%w: %s reply is not its result (%d results)", ErrTransport, OpName(op.GetArgop()), len(rep.results))
	}
	return rep.results[0], nil
}

// establish creates a client ID (if needed) and a session. old is the
// session that failed (nil at start); if another goroutine already
// replaced it, establish returns at once.
func (c *Client) establish(ctx context.Context, old *session) error {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	c.mu.Lock()
	cur := c.mu.sess
	c.mu.Unlock()
	if cur != old {
		return nil
	}
	minors := []uint32{c.cfg.MinorVersion}
	if c.cfg.MinorVersion == 0 {
		minors = []uint32{2, 1}
	}
	var (
		eid   *nfsv4.ExchangeId4resok
		minor uint32
		err   error
	)
	for _, minor = range minors {
		var res nfsv4.NfsResop4
		res, err = c.sessionless(ctx, minor, &nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
			EiaClientowner:  nfsv4.ClientOwner4{CoVerifier: c.verf, CoOwnerid: []byte(c.cfg.Owner)},
			EiaFlags:        0,
			EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{},
			EiaClientImplId: []nfsv4.NfsImplId4{{NiiDomain: "txnfs.dev", NiiName: "txnfs vnfs client"}},
		}})
		var se *StatusError
		if errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_MINOR_VERS_MISMATCH {
			continue
		}
		if err != nil {
			return fmt.Errorf("nfs4 client: EXCHANGE_ID: %w", err)
		}
		ok, isOK := res.(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK)
		if !isOK {
			return fmt.Errorf("nfs4 client: EXCHANGE_ID: unexpected result")
		}
		eid = &ok.EirResok4
		break
	}
	if eid == nil {
		return fmt.Errorf("nfs4 client: server supports neither NFSv4.2 nor NFSv4.1: %w", err)
	}
	fore := nfsv4.ChannelAttrs4{
		CaMaxrequestsize:        c.cfg.MaxRequestSize,
		CaMaxresponsesize:       c.cfg.MaxResponseSize,
		CaMaxresponsesizeCached: 64 << 10,
		CaMaxoperations:         c.cfg.MaxOps,
		CaMaxrequests:           c.cfg.Slots,
	}
	back := nfsv4.ChannelAttrs4{CaMaxrequestsize: 4096, CaMaxresponsesize: 4096,
		CaMaxresponsesizeCached: 0, CaMaxoperations: 2, CaMaxrequests: 1}
	res, err := c.sessionless(ctx, minor, &nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{
		CsaClientid: eid.EirClientid, CsaSequence: eid.EirSequenceid, CsaFlags: 0,
		CsaForeChanAttrs: fore, CsaBackChanAttrs: back, CsaCbProgram: 0x40000000,
		CsaSecParms: []nfsv4.CallbackSecParms4{&nfsv4.CallbackSecParms4_AUTH_NONE{}},
	}})
	if err != nil {
		return fmt.Errorf("nfs4 client: CREATE_SESSION: %w", err)
	}
	cs, ok := res.(*nfsv4.NfsResop4_OP_CREATE_SESSION).OpcreateSession.(*nfsv4.CreateSession4res_NFS4_OK)
	if !ok {
		return fmt.Errorf("nfs4 client: CREATE_SESSION: unexpected result")
	}
	fa := cs.CsrResok4.CsrForeChanAttrs
	lim := Limits{
		MinorVersion:          minor,
		MaxRequestSize:        fa.CaMaxrequestsize,
		MaxResponseSize:       fa.CaMaxresponsesize,
		MaxResponseSizeCached: fa.CaMaxresponsesizeCached,
		MaxOps:                fa.CaMaxoperations,
		Slots:                 max(1, min(fa.CaMaxrequests, c.cfg.Slots)),
		Lease:                 90 * time.Second,
	}
	if len(eid.EirServerImplId) > 0 {
		lim.ServerImpl = eid.EirServerImplId[0].NiiName
	}
	s := &session{id: cs.CsrResok4.CsrSessionid, seq: make([]uint32, lim.Slots), free: make(chan uint32, lim.Slots),
		dead: make(chan struct{})}
	for i := uint32(0); i < lim.Slots; i++ {
		s.free <- i
	}
	if old != nil {
		s.gen = old.gen + 1
	}
	s.limit = lim
	c.mu.Lock()
	c.mu.clientID = eid.EirClientid
	c.mu.limits = lim
	c.mu.lastUse = c.cfg.Clock()
	reclaim := c.mu.reclaim
	c.mu.Unlock()
	c.cfg.Logger.Debug("nfs4 client: session established", "minor", minor, "server", lim.ServerImpl,
		"maxreq", lim.MaxRequestSize, "maxresp", lim.MaxResponseSize, "maxops", lim.MaxOps, "slots", lim.Slots)

	// Reclaim (RFC 8881 §8.4.2.1) when the server lost this client's
	// state. The session is published only afterwards: COMPOUNDs of other
	// goroutines find the old one dead and wait in establish (sessMu).
	if old != nil && reclaim != nil && eid.EirFlags&nfsv4.EXCHGID4_FLAG_CONFIRMED_R == 0 {
		do := func(ctx context.Context, cp *Compound) (*Reply, error) { return c.doSession(ctx, cp, s) }
		if err := reclaim(ctx, do); err != nil {
			c.cfg.Logger.Warn("nfs4 client: reclaiming state after a server restart", "err", err)
		}
	}
	c.mu.Lock()
	c.mu.sess = s
	c.mu.Unlock()

	// The lease time (for renewal) and RECLAIM_COMPLETE (all state is
	// reclaimed, or there was none; RFC 8881 §18.51) in one round trip.
	// RECLAIM_COMPLETE comes last so that its COMPLETE_ALREADY does not
	// hide the lease; if an earlier operation fails it is sent alone.
	var rc Compound
	rc.PutRootFH()
	ai := rc.GetAttr(MakeBitmap(nfsv4.FATTR4_LEASE_TIME))
	ri := rc.Add(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{OpreclaimComplete: nfsv4.ReclaimComplete4args{}})
	rep, err := c.doSession(ctx, &rc, s)
	if err != nil {
		return fmt.Errorf("nfs4 client: RECLAIM_COMPLETE: %w", err)
	}
	if len(rep.Results) > ai && rep.Statuses[ai] == nfsv4.NFS4_OK {
		if g, ok := rep.Results[ai].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK); ok {
			if a, err := DecodeAttrs(g.Resok4.ObjAttributes); err == nil && a.LeaseTime > 0 {
				c.mu.Lock()
				c.mu.limits.Lease = time.Duration(a.LeaseTime) * time.Second
				s.limit.Lease = c.mu.limits.Lease
				c.mu.Unlock()
			}
		}
	}
	if len(rep.Results) <= ri {
		var rc Compound
		rc.Add(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{OpreclaimComplete: nfsv4.ReclaimComplete4args{}})
		if rep, err = c.doSession(ctx, &rc, s); err != nil {
			return fmt.Errorf("nfs4 client: RECLAIM_COMPLETE: %w", err)
		}
	}
	if rep.Status != nfsv4.NFS4_OK && rep.Status != nfsv4.NFS4ERR_COMPLETE_ALREADY {
		// Nothing depends on it; a server that refuses it will say so
		// again on the operations that matter.
		c.cfg.Logger.Warn("nfs4 client: RECLAIM_COMPLETE failed", "err", rep.Err())
	}
	return nil
}

// Do sends cp as one COMPOUND in the session (SEQUENCE is added) and
// returns the reply. A non-nil error means the COMPOUND was not executed
// or its outcome is unknown (ErrTransport, ErrUncertain, context errors),
// or, with cp.Txn, that the server lacks the extension
// (ErrTxnUnsupported) or the transaction failed to commit (*StatusError
// with Op OpTxn); a failing operation is reported in Reply.Status and
// Reply.Err, not as an error.
//
// Like the Linux client, Do resends the COMPOUND, with exponential
// backoff (100 ms doubling to 2 s), while its failing operation answers
// NFS4ERR_GRACE or NFS4ERR_DELAY, if that cannot repeat an effect: the
// COMPOUND is transactional (nothing of it took effect) or every
// operation before the failing one only sets file handles or reads (e.g.
// PUTFH, LOOKUP, GETATTR before OPEN or LOCK). It stops when ctx is done
// or Config.RetryFor has passed and then returns the last reply.
func (c *Client) Do(ctx context.Context, cp *Compound) (*Reply, error) {
	var deadline time.Time
	delay := 100 * time.Millisecond
	for {
		rep, err := c.doOnce(ctx, cp)
		if err != nil || !resendable(cp, rep) {
			return rep, err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.retryFor())
		}
		if !now.Add(delay).Before(deadline) {
			return rep, nil
		}
		c.cfg.Logger.Debug("nfs4 client: resending", "status", StatusName(rep.Status), "delay", delay)
		if cp.Chain != nil {
			// It stopped early, so the server refuses the chain's later
			// COMPOUNDs: resent unchained, it still runs after the
			// earlier ones and before nothing else of the chain.
			unchained := *cp
			unchained.Chain = nil
			cp = &unchained
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return rep, nil
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// retryFor is Config.RetryFor with its default.
func (c *Client) retryFor() time.Duration {
	if c.cfg.RetryFor != 0 {
		return max(c.cfg.RetryFor, 0)
	}
	c.mu.Lock()
	lease := c.mu.limits.Lease
	c.mu.Unlock()
	return 2 * cmp.Or(lease, 90*time.Second)
}

// resendable reports whether Do may resend cp after reply rep (see Do).
func resendable(cp *Compound, rep *Reply) bool {
	if rep == nil || (rep.Status != nfsv4.NFS4ERR_GRACE && rep.Status != nfsv4.NFS4ERR_DELAY) || len(rep.Results) == 0 {
		return false
	}
	if cp.Txn {
		return true
	}
	failed := len(rep.Results) - 1
	if failed >= len(cp.ops) {
		return false
	}
	for _, op := range cp.ops[:failed] {
		switch op.GetArgop() {
		case nfsv4.OP_PUTFH, nfsv4.OP_PUTROOTFH, nfsv4.OP_PUTPUBFH, nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP,
			nfsv4.OP_GETATTR, nfsv4.OP_GETFH, nfsv4.OP_SAVEFH, nfsv4.OP_RESTOREFH, nfsv4.OP_ACCESS,
			nfsv4.OP_READ, nfsv4.OP_READLINK, nfsv4.OP_READDIR, nfsv4.OP_VERIFY, nfsv4.OP_NVERIFY:
		default:
			return false
		}
	}
	return true
}

// doOnce is Do without resending on GRACE/DELAY.
func (c *Client) doOnce(ctx context.Context, cp *Compound) (*Reply, error) {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		s := c.mu.sess
		closed := c.mu.closed
		stale := c.mu.stale == s
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if stale {
			if err := c.establish(ctx, s); err != nil {
				return nil, err
			}
			continue
		}
		rep, err := c.doSession(ctx, cp, s)
		if errors.Is(err, errSessionDead) {
			continue // nothing was sent; s is stale now
		}
		var re *sessionError
		if errors.As(err, &re) && cp.Chain != nil {
			// The server broke the chain at this COMPOUND (its
			// SEQUENCE failed, nothing ran); on a new session the
			// chain is unknown. The caller resends it unchained.
			c.markStale(s)
			return nil, &chainRefused{re.st}
		}
		if errors.As(err, &re) && attempt < 4 {
			c.cfg.Logger.Debug("nfs4 client: re-establishing session", "reason", re.st)
			if err := c.establish(ctx, s); err != nil {
				return nil, err
			}
			continue
		}
		return rep, err
	}
}

// markStale makes the next Do replace session s.
func (c *Client) markStale(s *session) {
	c.mu.Lock()
	c.mu.stale = s
	c.mu.Unlock()
}

// sessionError asks Do to re-establish the session and retry.
type sessionError struct{ st nfsv4.Nfsstat4 }

func (e *sessionError) Error() string { return "session lost: " + StatusName(e.st) }

// errSessionDead: the session retired its last slot while a COMPOUND
// waited for one (nothing was sent); Do goes on with the next session.
var errSessionDead = errors.New("nfs4 client: every slot of the session retired")

func (c *Client) doSession(ctx context.Context, cp *Compound, s *session) (*Reply, error) {
	var slot uint32
	if cp.Chain != nil {
		c.chainSlots.wait(ctx, cp.Chain)
	}
	select {
	case slot = <-s.free:
	case <-s.dead:
		return nil, errSessionDead
	case <-ctx.Done():
		if cp.Chain != nil {
			c.chainSlots.got(cp.Chain)
		}
		return nil, ctx.Err()
	}
	if cp.Chain != nil {
		c.chainSlots.got(cp.Chain)
	}
	// A slot whose last request may or may not have reached the server
	// cannot be reused: its next sequence id is unknown, and reusing the
	// old one would fetch the cached reply of another request. Such slots
	// are retired; a session without slots is replaced.
	retire := false
	defer func() {
		if !retire {
			s.free <- slot
			return
		}
		if s.retired.Add(1) == int32(len(s.seq)) {
			c.markStale(s)
			close(s.dead)
		}
	}()
	var cred []byte
	if cp.Cred != nil {
		var err error
		if cred, err = authSys(c.cfg.MachineName, cp.Cred.UID, cp.Cred.GID, cp.Cred.GIDs); err != nil {
			return nil, err
		}
	}
	delay := 10 * time.Millisecond
	cache, safe := cacheThis(cp, s.limit), replaySafe(cp)
	for uncached := 0; ; {
		seq := nfsv4.Sequence4args{SaSessionid: s.id, SaSequenceid: s.seq[slot] + 1,
			SaSlotid: slot, SaHighestSlotid: uint32(len(s.seq) - 1), SaCachethis: cache}
		args, err := encodeArgsJoin(cp.Tag, s.limit.MinorVersion, cp.Txn, cp.TxnID, c.ClientID(), cp.Chain, &seq, cp.ops, cp.size)
		if err != nil {
			return nil, err
		}
		if uint32(args.size())+200 > s.limit.MaxRequestSize && s.limit.MaxRequestSize > 0 {
			return nil, &StatusError{Op: nfsv4.OP_SEQUENCE, Status: nfsv4.NFS4ERR_REQ_TOO_BIG}
		}
		raw, err := c.rawCall(ctx, args, len(cp.ops), cred)
		if err != nil {
			if (cp.Txn || !cp.TxnID.IsZero()) && errors.Is(err, errGarbageArgs) {
				return nil, ErrTxnUnsupported
			}
			if cp.Chain != nil && errors.Is(err, errGarbageArgs) {
				return nil, ErrChainUnsupported
			}
			var re *rpcError
			if !errors.As(err, &re) {
				retire = true // transport failure or cancellation: outcome unknown
			}
			return nil, err
		}
		if (cp.Txn || !cp.TxnID.IsZero()) && raw.txn == nil {
			return nil, txnMissingResult(cp, raw)
		}
		if cp.Chain != nil && raw.chain == nil {
			// OP_ILLEGAL (or NOT_IN_SESSION, GARBAGE_ARGS) before
			// anything ran.
			return nil, ErrChainUnsupported
		}
		if len(raw.results) == 0 || raw.results[0].GetResop() != nfsv4.OP_SEQUENCE {
			if raw.chain != nil && *raw.chain != nfsv4.NFS4_OK {
				return nil, chainErr(*raw.chain)
			}
			if raw.txn != nil && *raw.txn != nfsv4.NFS4_OK {
				if !cp.TxnID.IsZero() {
					return nil, txnJoinErr(*raw.txn)
				}
				return nil, &StatusError{Op: OpTxn, Status: *raw.txn}
			}
			return nil, &StatusError{Op: nfsv4.OP_SEQUENCE, Status: raw.status}
		}
		switch st := raw.statuses[0]; st {
		case nfsv4.NFS4_OK:
		case nfsv4.NFS4ERR_DELAY:
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			delay = min(2*delay, time.Second)
			continue
		case nfsv4.NFS4ERR_BADSESSION, nfsv4.NFS4ERR_DEADSESSION, nfsv4.NFS4ERR_STALE_CLIENTID,
			nfsv4.NFS4ERR_EXPIRED, nfsv4.NFS4ERR_SEQ_MISORDERED, nfsv4.NFS4ERR_BADSLOT:
			return nil, &sessionError{st}
		case nfsv4.NFS4ERR_RETRY_UNCACHED_REP:
			// A resend (after a reconnection) of a COMPOUND the server
			// ran but did not cache the reply of.
			s.seq[slot]++
			if safe && uncached < 3 {
				uncached++
				c.cfg.Logger.Debug("nfs4 client: reply not cached, running the COMPOUND again", "slot", slot)
				continue
			}
			return nil, ErrUncertain
		default:
			return nil, &StatusError{Op: nfsv4.OP_SEQUENCE, Status: st}
		}
		s.seq[slot]++
		if len(raw.statuses) > 1 && raw.statuses[1] == nfsv4.NFS4ERR_RETRY_UNCACHED_REP {
			// A retransmission the server did not cache the reply of
			// (RFC 8881 §2.10.6.1.3): it may or may not have run.
			if safe && uncached < 3 {
				uncached++
				c.cfg.Logger.Debug("nfs4 client: reply not cached, running the COMPOUND again", "slot", slot)
				continue
			}
			return nil, ErrUncertain
		}
		c.mu.Lock()
		c.mu.lastUse = c.cfg.Clock()
		c.mu.Unlock()
		if sr, ok := raw.results[0].(*nfsv4.NfsResop4_OP_SEQUENCE).Opsequence.(*nfsv4.Sequence4res_NFS4_OK); ok {
			if f := sr.SrResok4.SrStatusFlags; f&(nfsv4.SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED|
				nfsv4.SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED|nfsv4.SEQ4_STATUS_ADMIN_STATE_REVOKED) != 0 {
				c.cfg.Logger.Warn("nfs4 client: server revoked state", "flags", f)
			}
		}
		if raw.txn != nil && *raw.txn != nfsv4.NFS4_OK {
			if !cp.TxnID.IsZero() {
				return nil, txnJoinErr(*raw.txn)
			}
			return nil, &StatusError{Op: OpTxn, Status: *raw.txn}
		}
		if raw.chain != nil && *raw.chain != nfsv4.NFS4_OK {
			return nil, chainErr(*raw.chain)
		}
		rep := &Reply{Status: raw.status, Results: raw.results[1:], Statuses: raw.statuses[1:]}
		if err := checkReply(cp.ops, rep); err != nil {
			return nil, err
		}
		// A transaction operation's EXPIRED or STALE_CLIENTID is about
		// the transaction, not the client's state.
		txnFail := len(rep.Results) > 0 && isTxnOp(rep.Results[len(rep.Results)-1].GetResop())
		switch {
		case txnFail:
		case raw.status == nfsv4.NFS4ERR_EXPIRED, raw.status == nfsv4.NFS4ERR_STALE_CLIENTID,
			raw.status == nfsv4.NFS4ERR_BADSESSION, raw.status == nfsv4.NFS4ERR_DEADSESSION:
			// The server dropped this client's state: the next COMPOUND
			// starts a new client ID and session.
			c.cfg.Logger.Warn("nfs4 client: server dropped the client's state", "status", StatusName(raw.status))
			c.markStale(s)
		}
		return rep, nil
	}
}

// renewLoop keeps the lease alive with a SEQUENCE-only COMPOUND when the
// client has been idle for a third of the lease.
func (c *Client) renewLoop() {
	defer c.wg.Done()
	for {
		lease := c.Limits().Lease
		select {
		case <-c.stop:
			return
		case <-time.After(lease / 4):
		}
		c.mu.Lock()
		idle := c.cfg.Clock().Sub(c.mu.lastUse)
		c.mu.Unlock()
		if idle < lease/3 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), lease/2)
		var cp Compound
		_, err := c.Do(ctx, &cp)
		cancel()
		if err != nil && !errors.Is(err, ErrClosed) {
			c.cfg.Logger.Debug("nfs4 client: lease renewal failed", "err", err)
		}
	}
}

// Close destroys the session and the client ID (releasing all server
// state of this client) and closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	s, clientID := c.mu.sess, c.mu.clientID
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.abortTxns(ctx)
	var err error
	if s != nil {
		// Wait for in-flight compounds to release their slots (slots
		// retired after a transport failure never come back).
	wait:
		for got := 0; got+int(s.retired.Load()) < cap(s.free); {
			select {
			case <-s.free:
				got++
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				break wait
			}
		}
		destroy := &nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: s.id}}
		_, err = c.sessionless(ctx, s.limit.MinorVersion, destroy)
		if se := (*StatusError)(nil); errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_CONN_NOT_BOUND_TO_SESSION {
			// A connection made after the last COMPOUND (which would
			// have bound it through SEQUENCE): bind it, then destroy
			// (RFC 8881 §18.37.3; Ganesha enforces it).
			if _, err = c.sessionless(ctx, s.limit.MinorVersion, &nfsv4.NfsArgop4_OP_BIND_CONN_TO_SESSION{
				OpbindConnToSession: nfsv4.BindConnToSession4args{BctsaSessid: s.id, BctsaDir: nfsv4.CDFC4_FORE}}); err == nil {
				_, err = c.sessionless(ctx, s.limit.MinorVersion, destroy)
			}
		}
		if err == nil {
			_, err = c.sessionless(ctx, s.limit.MinorVersion, &nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{
				OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: clientID}})
		}
	}
	c.mu.Lock()
	c.mu.closed = true
	c.mu.Unlock()
	c.closeTransport()
	if err != nil {
		return fmt.Errorf("nfs4 client: close: %w", err)
	}
	return nil
}

// txnMissingResult is the error for a reply to a transactional (or
// joining) COMPOUND without a transaction result: nothing ran, not even
// SEQUENCE. Only a standard server's answer to the unknown first
// operation (OP_ILLEGAL, RFC 8881 §15.2) means the extension is missing;
// a reply refused as a whole (NFS4ERR_TOO_MANY_OPS, RESOURCE, BADXDR,
// REQ_TOO_BIG with no results) says nothing about it and is reported as
// a *StatusError for the transaction operation.
func txnMissingResult(cp *Compound, raw *rawReply) error {
	if raw.status == nfsv4.NFS4ERR_OP_ILLEGAL ||
		(len(raw.results) > 0 && raw.results[0].GetResop() == nfsv4.OP_ILLEGAL) {
		return ErrTxnUnsupported
	}
	op := OpTxn
	if !cp.TxnID.IsZero() {
		op = OpTxnJoin
	}
	st := raw.status
	if st == nfsv4.NFS4_OK {
		st = nfsv4.NFS4ERR_SERVERFAULT // a reply without the results it owes
	}
	return &StatusError{Op: op, Index: 0, Status: st}
}

// Hard reports whether the client waits for an unreachable server
// (Config.Hard).
func (c *Client) Hard() bool { return c.cfg.Hard }
