package vnfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// Config configures an NFS FS.
type Config struct {
	// Addr is the server's host:port (required).
	Addr string
	// Root is the directory, as a path from the server's root file
	// handle, that FS paths are relative to (default "/"). For
	// NFS-Ganesha exports this is typically the export's pseudo path.
	Root string
	// Client configures the NFSv4 client (Addr is taken from above).
	Client client.Config
	// MaxOps caps the operations per COMPOUND (default 256, as in vNFS;
	// never more than the session allows).
	MaxOps int
	// MaxIO caps one READ or WRITE (default: the server's maxread and
	// maxwrite attributes, at most 1 MiB).
	MaxIO int
	// Window is how many COMPOUNDs one call may have in flight when
	// pipelining is safe (default 8, and 16 for an ordered call sent as a
	// chain; never more than the session's slots; 1 disables
	// pipelining).
	Window int
	// NoChain keeps ordered vector calls (writes, creations, removals)
	// at one COMPOUND in flight instead of chaining them with the txnfs
	// ordered-chain extension (docs/protocol.md §4; used when the server
	// has it, probed on first use). For measurements.
	NoChain bool
	// NoPathCompression reaches every directory from the root (for
	// measurements).
	NoPathCompression bool
	// Append says whether the server supports the append extension:
	// AppendAuto (default) trusts txnfs servers (by EXCHANGE_ID
	// implementation name) and probes others on first use.
	Append AppendSupport
	// Scalar makes the FS a scalar baseline client: every vector call
	// is executed one POSIX call at a time, each with the RPCs a kernel
	// client would send. For benchmarks only.
	Scalar bool
	// ScalarCache gives the scalar baseline a kernel-like data cache:
	// file data read through it is kept and served again while the
	// change attribute returned at OPEN is unchanged (close-to-open
	// revalidation). For the vNFS Figure 8 comparison only.
	ScalarCache bool
	// Cache, if positive, is the byte budget of a client data cache for
	// VRead (LRU, keyed by file handle). A cached read is revalidated
	// in the COMPOUND that would have read it (LOOKUP; VERIFY change,
	// size and fileid) and moves no data when the file is unchanged;
	// a changed file is read again. Every read revalidates (no
	// time-based trust). Transactional views (Txn, Begin) bypass it.
	// Ignored with Scalar. See docs/vnfs.md, "Data cache".
	Cache int64
	// DirCacheTTL is how long a directory's file handle, learnt from a
	// listing or a mkdir, is used to reach the directory by PUTFH
	// instead of LOOKUPs from the root (default 30 s, the kernel
	// client's acdirmin; negative disables the cache). Ignored with
	// Scalar, which has its own. See docs/vnfs.md, "Directory handles".
	DirCacheTTL time.Duration
	// Logger receives debug logs (default: discard).
	Logger *slog.Logger
}

// AppendSupport says how appends are done.
type AppendSupport int

const (
	AppendAuto AppendSupport = iota
	AppendExtension
	AppendEmulate
)

// Stats counts RPC traffic.
type Stats = client.Stats

// StatsFS is implemented by NFS file systems.
type StatsFS interface {
	Stats() Stats
	// Limits returns the negotiated session limits.
	Limits() client.Limits
}

// Dial connects to an NFSv4.1+ server.
func Dial(ctx context.Context, cfg Config) (FS, error) {
	if cfg.Addr == "" {
		return nil, errors.New("vnfs: Config.Addr is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cc := cfg.Client
	cc.Addr = cfg.Addr
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	c, err := client.Dial(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("vnfs: %w", err)
	}
	n := &nfsFS{c: c, cfg: cfg, sh: &shared{fds: map[FD]*fdEntry{}}}
	if cfg.Cache > 0 && !cfg.Scalar {
		n.sh.cache = newDataCache(cfg.Cache)
	}
	if cfg.DirCacheTTL >= 0 && !cfg.Scalar {
		ttl := cfg.DirCacheTTL
		if ttl == 0 {
			ttl = defaultDirCacheTTL
		}
		n.sh.dirs = newDirHandles(ttl)
	}
	if err := n.init(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if cfg.Scalar {
		return &scalarFS{n: n, dirs: map[string][]byte{}, changed: map[string]bool{}, cache: cfg.ScalarCache, pages: map[string]*cachedFile{}}, nil
	}
	return n, nil
}

// nfsFS is the vectorized NFS client.
type nfsFS struct {
	c      *client.Client
	cfg    Config
	rootFH []byte
	txn    bool // the Txn view
	// join, if not zero, is the multi-compound transaction every
	// COMPOUND of this view joins (the view of a Tx, txn.go).
	join client.TxnID
	// unordered: the Unordered view
	unordered bool

	maxOps, maxReq, maxResp int
	maxRead, maxWrite       int
	minor                   uint32
	window                  int
	// chainWindow is the window of a chained call (Config.Window).
	chainWindow int

	sh *shared
}

// shared is the state common to an FS and its Txn view.
type shared struct {
	mu     sync.Mutex
	fds    map[FD]*fdEntry
	nextFD FD
	owners atomic.Uint64
	// Capabilities learnt by probing: 0 unknown, 1 yes, 2 no.
	appendOK atomic.Int32
	copyOK   atomic.Int32
	cloneOK  atomic.Int32
	chainOK  atomic.Int32 // ordered chains (docs/protocol.md §4)
	// cache is the data cache (Config.Cache), or nil.
	cache *dataCache
	// dirs is the directory-handle cache (Config.DirCacheTTL), or nil.
	dirs *dirHandles
	// delayRetries counts resends after NFS4ERR_DELAY.
	delayRetries atomic.Uint64
	// do, if set, sends the COMPOUNDs of vector calls instead of the
	// client (tests inject server refusals with it).
	do func(context.Context, *client.Compound) (*client.Reply, error)
}

type fdEntry struct {
	path  string
	fh    []byte
	sid   nfsv4.Stateid4
	owner []byte
	flags OpenFlags
}

var _ FS = (*nfsFS)(nil)

// chainWindow is the default window of a chained call. The reply to a
// chained COMPOUND waits for the device flush that makes it durable
// (shared by the COMPOUNDs the server executed meanwhile), and the
// server runs the next COMPOUND while it waits only if that one was
// sent: with 8 in flight, a flush slower than 8 executions (a disk
// shared with other jobs: 15–25 ms at load 12, against ~1.5 ms to
// execute a COMPOUND of 64 small files) stalled the chain until the
// flush returned (docs/vnfs.md "Files, session 13"). The server runs
// up to 32 requests per connection; the client asks for 16 slots.
const chainWindow = 16

func (n *nfsFS) init(ctx context.Context) error {
	lim := n.c.Limits()
	n.minor = lim.MinorVersion
	n.maxOps = 256
	if n.cfg.MaxOps > 0 {
		n.maxOps = n.cfg.MaxOps
	}
	n.maxOps = min(n.maxOps, int(lim.MaxOps)-1) // SEQUENCE
	n.maxReq, n.maxResp = int(lim.MaxRequestSize), int(lim.MaxResponseSize)
	n.window, n.chainWindow = 8, chainWindow
	if n.cfg.Window > 0 {
		n.window, n.chainWindow = n.cfg.Window, n.cfg.Window
	}
	n.window = min(n.window, int(lim.Slots))
	n.chainWindow = min(n.chainWindow, int(lim.Slots))
	switch n.cfg.Append {
	case AppendExtension:
		n.sh.appendOK.Store(1)
	case AppendEmulate:
		n.sh.appendOK.Store(2)
	default:
		if lim.ServerImpl == "txnfs" {
			n.sh.appendOK.Store(1)
		}
	}
	switch {
	case n.minor < 1 || n.cfg.NoChain:
		n.sh.chainOK.Store(2)
	case lim.ServerImpl == "txnfs":
		// txnfs servers chain (docs/protocol.md §4): the first ordered
		// vector call need not send its first COMPOUND alone to learn
		// it (a round trip and the COMPOUND's sync, ~10% of a 1,000
		// small-file write at 1 ms). One that does not is still
		// handled: its chained COMPOUNDs are refused, nothing of them
		// ran, and they are sent again unchained (run).
		n.sh.chainOK.Store(1)
	}
	if n.minor < 2 {
		n.sh.copyOK.Store(2)
		n.sh.cloneOK.Store(2)
	}
	root, err := cleanPath(n.cfg.Root)
	if err != nil {
		return err
	}
	rep, fhi, ai, err := n.probeMaxOps(ctx, components(root))
	if err != nil {
		return fmt.Errorf("vnfs: resolving root %q: %w", "/"+root, err)
	}
	n.rootFH = rep.Results[fhi].(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
	a, err := client.DecodeAttrs(rep.Results[ai].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes)
	if err != nil {
		return fmt.Errorf("vnfs: root attributes: %w", err)
	}
	if a.Type != nfsv4.NF4DIR {
		return fmt.Errorf("vnfs: root %q is not a directory", "/"+root)
	}
	n.maxRead, n.maxWrite = 1<<20, 1<<20
	if a.MaxRead > 0 && a.MaxRead < uint64(n.maxRead) {
		n.maxRead = int(a.MaxRead)
	}
	if a.MaxWrite > 0 && a.MaxWrite < uint64(n.maxWrite) {
		n.maxWrite = int(a.MaxWrite)
	}
	if n.cfg.MaxIO > 0 {
		n.maxRead, n.maxWrite = min(n.maxRead, n.cfg.MaxIO), min(n.maxWrite, n.cfg.MaxIO)
	}
	return nil
}

// Stats returns RPC counters.
func (n *nfsFS) Stats() Stats { return n.c.Stats() }

// Limits returns the session limits.
func (n *nfsFS) Limits() client.Limits { return n.c.Limits() }

// Txn returns the transactional view.
func (n *nfsFS) Txn() FS {
	if n.txn {
		return n
	}
	if !n.join.IsZero() {
		return noTxn{n} // no nested transactions in a Tx
	}
	t := *n
	t.txn = true
	t.maxOps--
	return &t
}

// Unordered returns the unordered view (see Unordered).
func (n *nfsFS) Unordered() FS {
	if n.unordered || n.txn {
		return n
	}
	u := *n
	u.unordered = true
	return &u
}

// Close closes open descriptors and the connection.
func (n *nfsFS) Close() error {
	if n.txn || n.unordered || !n.join.IsZero() {
		return nil
	}
	n.sh.mu.Lock()
	var fds []FD
	for fd := range n.sh.fds {
		fds = append(fds, fd)
	}
	n.sh.mu.Unlock()
	if len(fds) > 0 {
		n.VClose(context.Background(), fds)
	}
	return n.c.Close()
}

// owner returns a fresh open-owner for one vector call, so that concurrent
// calls never share (and close) each other's open state.
func (n *nfsFS) owner() []byte {
	return fmt.Appendf(nil, "%s/%d", n.c.OpenOwner(), n.sh.owners.Add(1))
}

// cleanPath makes p relative to the root ("" is the root).
func cleanPath(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("vnfs: path %q contains NUL", p)
	}
	if isCleanRel(p) {
		return p, nil // most paths: no allocation (rm -r cleans one per file)
	}
	c := path.Clean("/" + p)
	return strings.TrimPrefix(c, "/"), nil
}

// isCleanRel reports whether cleanPath(p) is p: p is empty, or non-empty
// components other than "." and ".." joined by single slashes, without a
// leading or trailing slash.
func isCleanRel(p string) bool {
	start := 0
	for i := 0; i <= len(p) && p != ""; i++ {
		if i == len(p) || p[i] == '/' {
			if c := p[start:i]; c == "" || c == "." || c == ".." {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// splitPath returns the parent directory and the name of p ("" name for
// the root).
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func (n *nfsFS) fd(fd FD) (*fdEntry, bool) {
	n.sh.mu.Lock()
	defer n.sh.mu.Unlock()
	e, ok := n.sh.fds[fd]
	return e, ok
}

func statusOf(err error) nfsv4.Nfsstat4 {
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return nfsv4.NFS4_OK
}

// probeMaxOps checks that the server accepts COMPOUNDs of maxOps
// operations. Some servers negotiate a ca_maxoperations they do not honour
// (NFS-Ganesha 4.3 answers NFS4ERR_RESOURCE above 100 operations): a
// COMPOUND of cheap PUTROOTFHs finds the real limit by bisection. A
// rejected COMPOUND executes nothing.
func (n *nfsFS) probeMaxOps(ctx context.Context, rootPath []string) (rep *client.Reply, fhi, ai int, err error) {
	// Every probe resolves the root too (PUTROOTFH, LOOKUPs, GETFH,
	// GETATTR after the padding), so that a server taking the full
	// COMPOUND costs one round trip for both.
	type result struct {
		ok      bool
		rep     *client.Reply
		fhi, ai int
		err     error
	}
	try := func(k int) result {
		var cp client.Compound
		for i := 0; i < k-3-len(rootPath); i++ {
			cp.PutRootFH()
		}
		cp.PutRootFH()
		for _, c := range rootPath {
			cp.Lookup(c)
		}
		r := result{fhi: cp.GetFH()}
		r.ai = cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_MAXREAD, nfsv4.FATTR4_MAXWRITE))
		var err error
		r.rep, err = n.c.Do(ctx, &cp)
		switch st := statusOf(err); {
		case err == nil:
			r.ok = r.rep.Status == nfsv4.NFS4_OK
			if !r.ok && len(r.rep.Results) > 1 {
				// Refused in an operation, not as a whole: the
				// root does not resolve.
				r.err = r.rep.Err()
			}
		case st == nfsv4.NFS4ERR_RESOURCE || st == nfsv4.NFS4ERR_TOO_MANY_OPS || st == nfsv4.NFS4ERR_REQ_TOO_BIG:
		default:
			r.err = err
		}
		return r
	}
	r := try(n.maxOps)
	if r.err != nil || r.ok {
		return r.rep, r.fhi, r.ai, r.err
	}
	// The server refuses what it negotiated (NFS-Ganesha 4.3 accepts 100
	// operations whatever it negotiates). Search (lo, hi) with up to
	// slots-1 probes in flight per round: 2-3 rounds instead of ~8.
	lo, hi := 1, n.maxOps // lo works (or is the minimum), hi does not
	var best result
	par := max(1, int(n.c.Limits().Slots)-1)
	for hi-lo > 1 {
		var cands []int
		k := min(par, hi-lo-1)
		for j := 1; j <= k; j++ {
			cands = append(cands, lo+(hi-lo)*j/(k+1))
		}
		if lo < 99 && 99 < hi && k < hi-lo-1 {
			cands = append(cands, 99) // NFS-Ganesha's real limit (100 with SEQUENCE)
		}
		res := make([]result, len(cands))
		var wg sync.WaitGroup
		for i, c := range cands {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = try(c)
			}()
		}
		wg.Wait()
		for i, c := range cands {
			if res[i].err != nil {
				return nil, 0, 0, res[i].err
			}
			if !res[i].ok {
				hi = min(hi, c)
			}
		}
		for i, c := range cands {
			if res[i].ok && c < hi && c > lo {
				lo, best = c, res[i]
			}
		}
	}
	n.cfg.Logger.Debug("vnfs: server accepts fewer operations than negotiated", "maxops", lo+1)
	n.maxOps = lo
	if best.rep == nil {
		// Nothing above the minimum passed: resolve the root alone.
		best = try(0)
		if best.err == nil && !best.ok {
			best.err = best.rep.Err()
			if best.err == nil {
				best.err = fmt.Errorf("refused with %s", client.StatusName(best.rep.Status))
			}
		}
	}
	return best.rep, best.fhi, best.ai, best.err
}

// DelayRetries reports how many times f (an NFS FS from Dial, or a view
// of one) sent items again after the server refused one with
// NFS4ERR_DELAY, and 0 for other file systems.
func DelayRetries(f FS) uint64 {
	if n, ok := f.(*nfsFS); ok {
		return n.sh.delayRetries.Load()
	}
	return 0
}
