package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/internal/bufpool"
	"github.com/txnfs/txnfs/nfs4/internal/fh"
	"github.com/txnfs/txnfs/nfs4/internal/rpc"
	"github.com/txnfs/txnfs/nfs4/internal/state"
)

// Config configures a Server.
type Config struct {
	// FS is the file system to export (required). Its root is the
	// export root.
	FS *fs.FS
	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
	// Clock drives leases (default time.Now).
	Clock func() time.Time
	// Rand supplies randomness for verifiers and ids (default crypto/rand).
	Rand io.Reader
	// Registry, if set, receives the server's Prometheus metrics.
	Registry prometheus.Registerer
	// Lease is the NFSv4 lease period (default 90s).
	Lease time.Duration
	// StateDir, if set, is the directory (typically the data directory)
	// where the server keeps the records of its confirmed clients, so
	// that after a restart they can reclaim their opens and locks during
	// a grace period of Grace (default Lease; negative: none). Without
	// it there are no records and no grace period: reclaims get
	// NFS4ERR_NO_GRACE.
	StateDir string
	Grace    time.Duration
	// RootSquash maps uid 0 to AnonUID/AnonGID (default false: the
	// server is meant for trusted loopback or private networks).
	RootSquash bool
	// AnonUID and AnonGID are used for AUTH_NONE and squashed root
	// (default 65534).
	AnonUID, AnonGID uint32
	// MaxOps caps operations per COMPOUND (default 1024).
	MaxOps int
	// MaxIO is the largest READ/WRITE payload (default 1 MiB).
	MaxIO uint32
	// MaxRequest caps a COMPOUND request and its reply in bytes (RPC
	// headers included), and is offered as the session's
	// ca_maxrequestsize and ca_maxresponsesize (default 16 MiB + 64
	// KiB, so that one transactional compound can write a 16 MiB file
	// with 16 WRITEs). A connection may hold MaxInflight+1 requests in
	// memory.
	MaxRequest uint32
	// MaxInflight caps concurrent requests per connection (default 32),
	// and is the number of slots a session gets.
	MaxInflight int
	// TxnRetries is how many times a transactional compound is re-run
	// after a serialization conflict before NFS4ERR_DELAY (default 16).
	TxnRetries int
	// TxnMaxOpen and TxnMaxPerClient cap the open multi-compound
	// transactions (TXN_BEGIN, docs/protocol.md §3) of the server and of
	// one client (defaults 256 and 16); TxnIdleTimeout aborts a
	// transaction no compound used for that long (default 30 minutes).
	TxnMaxOpen, TxnMaxPerClient int
	TxnIdleTimeout              time.Duration
}

// Validate checks c and fills in defaults.
func (c *Config) Validate() error {
	if c.FS == nil {
		return errors.New("server: Config.FS is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	if c.Lease <= 0 {
		c.Lease = 90 * time.Second
	}
	if c.AnonUID == 0 {
		c.AnonUID = 65534
	}
	if c.AnonGID == 0 {
		c.AnonGID = 65534
	}
	if c.MaxOps <= 0 {
		c.MaxOps = 1024
	}
	if c.MaxIO == 0 {
		c.MaxIO = 1 << 20
	}
	if c.MaxIO > 4<<20 {
		return fmt.Errorf("server: MaxIO %d above 4 MiB", c.MaxIO)
	}
	if c.MaxRequest == 0 {
		c.MaxRequest = 16<<20 + 64<<10
	}
	if c.MaxRequest < c.MaxIO+4<<10 {
		return fmt.Errorf("server: MaxRequest %d below MaxIO + 4 KiB", c.MaxRequest)
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 32
	}
	if c.TxnRetries <= 0 {
		c.TxnRetries = 16
	}
	return nil
}

// Server is an NFSv4.0/4.1/4.2 server over an fs.FS. It is safe for
// concurrent use; Serve may be called for several listeners.
type Server struct {
	cfg  Config
	fs   *fs.FS
	log  *slog.Logger
	fh   *fh.Codec
	st   *state.Manager
	rpc  *rpc.Server
	met  *metrics
	txns *txnTable // multi-compound transactions (ops_txn.go)
	// chains are the live ordered chains of compounds (chain.go).
	chains *chainTable
	// sync is the FS.Sync a compound's reply waits for (tests replace it
	// while the server runs, to delay or fail it).
	sync atomic.Pointer[func(context.Context) error]
	// dirLocks serializes grouped runs changing one directory (dirlocks.go).
	dirLocks *dirLocks
	fsid     uint64
	verf     [8]byte // write verifier and server instance id
	major    []byte  // server_owner major id / server scope
	root     []byte  // root file handle

	// readBufs hold READ buffers in power-of-two capacity classes from
	// 4 KiB to MaxIO, so that a small READ neither takes nor, when the
	// pool was emptied by a garbage collection, allocates and zeroes a
	// MaxIO buffer (1 MiB for a 12 KiB file: most of a tar's allocation).
	readBufs *bufpool.Pool

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup

	// payloadWrites counts the compounds running with a WRITE of at
	// least alignPayloadMin bytes (compound.write decides from it where
	// the next payloads of its connection are hashed).
	payloadWrites atomic.Int64
}

// New returns a server for cfg.FS. The file-handle key is the engine's
// persistent secret "nfs4-filehandle", so handles survive restarts.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, fs: cfg.FS, log: cfg.Logger, dirLocks: newDirLocks(), readBufs: bufpool.New(4<<10, int(cfg.MaxIO))}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	key, err := cfg.FS.Secret(s.bgCtx, "nfs4-filehandle")
	if err != nil {
		return nil, fmt.Errorf("server: file handle key: %w", err)
	}
	if s.fh, err = fh.NewCodec(key); err != nil {
		return nil, err
	}
	s.fsid = binary.BigEndian.Uint64(key[16:24]) // stable per data directory
	if _, err := io.ReadFull(cfg.Rand, s.verf[:]); err != nil {
		return nil, err
	}
	s.major = append([]byte("txnfs-"), fmt.Sprintf("%x", key[24:32])...)
	var recs *clientRecords
	var previous [][]byte
	if cfg.StateDir != "" {
		if recs, previous, err = openClientRecords(cfg.StateDir, cfg.Logger); err != nil {
			return nil, err
		}
		if len(previous) > 0 && cfg.Grace >= 0 {
			cfg.Logger.Info("nfs4: grace period: recorded clients may reclaim their state",
				"clients", len(previous), "grace", cmpOr(cfg.Grace, cfg.Lease))
		}
	}
	stc := state.Config{
		Clock: cfg.Clock, Rand: cfg.Rand, Lease: cfg.Lease, Grace: cfg.Grace, Previous: previous,
		// A session gets no more slots than a connection runs requests
		// at once: a chained COMPOUND waiting for its predecessor
		// (chain.go) must never keep that predecessor from being read.
		Slots: cfg.MaxInflight,
		Pin:   func(ino uint64) { s.fs.Pin(fs.Ino(ino)) },
		Unpin: func(ino uint64) { s.unpin(fs.Ino(ino)) },
	}
	if recs != nil {
		stc.Record, stc.GraceEnded = recs.record, func() {
			recs.graceEnded()
			s.log.Info("nfs4: grace period over")
		}
	}
	if s.st, err = state.New(stc); err != nil {
		return nil, err
	}
	if s.met, err = newMetrics(cfg.Registry); err != nil {
		return nil, err
	}
	s.chains = newChainTable()
	fsSync := s.fs.Sync
	s.sync.Store(&fsSync)
	if s.txns, err = newTxnTable(s, cfg.Registry); err != nil {
		return nil, err
	}
	var root fs.Attr
	if err := s.fs.View(s.bgCtx, fs.RootCred, func(t *fs.Txn) error {
		var err error
		root, err = t.GetAttr(s.bgCtx, fs.RootIno)
		return err
	}); err != nil {
		return nil, fmt.Errorf("server: root inode: %w", err)
	}
	s.root = s.fh.Encode(fh.Handle{Ino: uint64(root.Ino), Gen: root.Gen})
	s.rpc, err = rpc.NewServer(rpc.Config{
		Handler:     s,
		Logger:      cfg.Logger,
		MaxRecord:   int(cfg.MaxRequest),
		MaxInflight: cfg.MaxInflight,
	})
	if err != nil {
		return nil, err
	}
	s.bgWG.Add(1)
	go s.leaseLoop()
	return s, nil
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// Close stops background work. Call it after every Serve has returned.
func (s *Server) Close() error {
	s.bgCancel()
	s.bgWG.Wait()
	s.txns.closeAll()
	return nil
}

func (s *Server) leaseLoop() {
	defer s.bgWG.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case <-t.C:
			s.st.Tick()
			s.txns.sweep()
		}
	}
}

// Serve serves NFS on l until ctx is done (then it returns nil) or l fails.
// It closes l.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.rpc.Serve(ctx, l)
}

// Handle implements rpc.Handler: NFSv4 NULL and COMPOUND.
func (s *Server) Handle(ctx context.Context, call *rpc.Call) rpc.Reply {
	if call.Prog != nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER {
		return rpc.Reply{Stat: rpcv2.PROG_UNAVAIL}
	}
	if call.Vers != 4 {
		return rpc.Reply{Stat: rpcv2.PROG_MISMATCH, MismatchLow: 4, MismatchHigh: 4}
	}
	switch call.Proc {
	case 0: // NULL
		return rpc.Reply{Stat: rpcv2.SUCCESS}
	case 1: // COMPOUND
		rep, ok := s.compound(ctx, call)
		if !ok {
			return rpc.Reply{Stat: rpcv2.GARBAGE_ARGS}
		}
		return rep
	}
	return rpc.Reply{Stat: rpcv2.PROC_UNAVAIL}
}

// getBuf returns a READ buffer of n ≤ MaxIO bytes (contents undefined);
// putBuf returns it once nothing references it.
func (s *Server) getBuf(n uint32) *[]byte { return s.readBufs.Get(int(n)) }

func (s *Server) putBuf(b *[]byte) { s.readBufs.Put(b) }

// cred maps an RPC credential to the engine's, applying AUTH_NONE and
// root squashing.
func (s *Server) cred(c *rpc.Cred) fs.Cred {
	if c.Flavor != rpcv2.AUTH_SYS {
		return fs.Cred{Uid: s.cfg.AnonUID, Gid: s.cfg.AnonGID}
	}
	out := fs.Cred{Uid: c.Uid, Gid: c.Gid, Groups: c.Gids}
	if s.cfg.RootSquash && c.Uid == 0 {
		out.Uid, out.Gid = s.cfg.AnonUID, s.cfg.AnonGID
	}
	return out
}

func principal(c *rpc.Cred) string {
	if c.Flavor != rpcv2.AUTH_SYS {
		return "none"
	}
	return "sys:" + strconv.FormatUint(uint64(c.Uid), 10)
}

// unpin releases one engine pin of ino (the last of an orphan deletes
// it; the engine re-checks the pins when it reclaims, so a concurrent Pin
// keeps the inode: fs TestRepinDuringReclaim).
func (s *Server) unpin(ino fs.Ino) {
	if err := s.fs.Unpin(s.bgCtx, ino); err != nil {
		s.log.Warn("nfs4: unpin failed", "ino", ino, "err", err)
	}
}
