package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/client"
)

// DefaultTimeout is the default kernel cache lifetime of attributes,
// directory entries and negative lookups.
const DefaultTimeout = 30 * time.Second

// DefaultMaxWrite is the largest READ/WRITE request asked of the kernel.
// Larger requests mean fewer engine transactions for streaming I/O.
const DefaultMaxWrite = 1 << 20

// DefaultReadAheadKB is the default kernel read-ahead of a mount.
const DefaultReadAheadKB = 4096

// DefaultDirtyMaxRatio is the default Config.DirtyMaxRatio: a mount with
// the writeback cache may use a tenth of the kernel's dirty page
// threshold instead of the 1% the kernel gives a FUSE mount (measured
// equal to 100% for fio's 4 KiB writes; docs/fuse.md, session 9).
const DefaultDirtyMaxRatio = 10

// blockSize is reported as st_blksize, the I/O size programs such as cp
// and stdio use for buffers; a large value means fewer, larger requests.
const blockSize = 128 << 10

// Config configures Mount.
type Config struct {
	// FS is the engine to serve (Mount). Several mounts may share one.
	FS *fs.FS
	// Client is the NFSv4.1 client of the server to serve (MountRemote);
	// the caller closes it after the mount ends.
	Client *client.Client
	// Logger receives errors and, with Debug, the FUSE request trace.
	Logger *slog.Logger
	// EntryTimeout, AttrTimeout and NegativeTimeout are how long the
	// kernel may cache a directory entry, an inode's attributes and a
	// failed lookup. 0 means DefaultTimeout; a negative value disables
	// that cache (every path walk and stat reaches the engine).
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration
	// AllowOther lets users other than the one who mounted use the
	// mount (the engine checks permissions for each of them).
	AllowOther bool
	// DirectMount calls mount(2) directly (needs root) before falling
	// back to fusermount3.
	DirectMount bool
	// NoGroups skips reading callers' supplementary groups from /proc:
	// permission checks then see only the primary group.
	NoGroups bool
	// Group, if set, connects mounts of the same FS in this process:
	// a change committed through one invalidates the others' kernel
	// caches at once, so they see it without waiting for timeouts.
	Group *Group
	// FsName is shown as the source in /proc/mounts ("txnfs" if empty).
	FsName string
	// MaxWrite overrides DefaultMaxWrite.
	MaxWrite int
	// ReadAheadKB sets the kernel's read-ahead for the mount (its
	// /sys/class/bdi entry; needs root): 0 means DefaultReadAheadKB,
	// negative leaves the kernel's default (128 KiB). Larger read-ahead
	// means fewer, larger READ requests for sequential reads.
	ReadAheadKB int
	// Debug logs every FUSE request and reply.
	Debug bool
	// Writeback enables the kernel's writeback cache: small writes are
	// gathered into large WRITE requests (and commits) when pages are
	// flushed, at close, fsync or by the kernel's writeback. Only safe
	// for a mount that is the only writer of its files: the kernel then
	// owns sizes, mtimes and O_APPEND offsets and ignores other mounts'
	// changes to them. A sandbox abort then replaces the kernel's inodes
	// of the regular files it changed (see sandbox.go).
	Writeback bool
	// DirtyMaxRatio, with Writeback, is the share (percent) of the
	// kernel's dirty page threshold that the mount's dirty pages may
	// take before the kernel throttles writers (its backing device's
	// max_ratio in /sys/class/bdi; needs root; the kernel forgets it
	// with the mount). 0 means DefaultDirtyMaxRatio; negative leaves
	// the kernel's 1% for FUSE mounts. Without the writeback cache no
	// page of the mount is ever dirty and it does not apply.
	DirtyMaxRatio int
	// WriteBehindBytes bounds the bytes of WRITE requests answered
	// before they commit (see writeBehind): 0 means
	// DefaultWriteBehindBytes, negative disables write-behind (every
	// WRITE commits before it is answered). Mounts of a Group share the
	// queue of the first mount that joined.
	WriteBehindBytes int
	// WriteBehindDelay is the longest an answered write waits for its
	// commit when nothing else asks for it (the queue commits earlier
	// once it holds 4 MiB or a request waits for it): 0 means
	// DefaultWriteBehindDelay, negative commits at once.
	WriteBehindDelay time.Duration
	// MirrorBytes is the memory budget (tmpfs blocks) of the mount's
	// mirrors: copies of recently written files in a private tmpfs that
	// read-only opens read by FUSE passthrough (see mirrorSet). 0 or
	// negative: no mirrors (the default; SuggestedMirrorBytes is a budget). Only local mounts
	// without the writeback cache (the kernel refuses passthrough with
	// it) and outside a Group have mirrors; mounting the tmpfs needs
	// root, and without it the mount goes on without mirrors.
	MirrorBytes int64
}

// Validate checks c and fills in defaults.
func (c *Config) Validate() error {
	if c.FS == nil && c.Client == nil {
		return errors.New("fuse: Config.FS (or Client, for MountRemote) is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for _, d := range []*time.Duration{&c.EntryTimeout, &c.AttrTimeout, &c.NegativeTimeout} {
		switch {
		case *d == 0:
			*d = DefaultTimeout
		case *d < 0:
			*d = 0
		}
	}
	if c.FsName == "" {
		c.FsName = "txnfs"
	}
	if c.MaxWrite <= 0 {
		c.MaxWrite = DefaultMaxWrite
	}
	if c.ReadAheadKB == 0 {
		c.ReadAheadKB = DefaultReadAheadKB
	}
	if c.DirtyMaxRatio == 0 {
		c.DirtyMaxRatio = DefaultDirtyMaxRatio
	}
	if c.DirtyMaxRatio > 100 {
		return fmt.Errorf("fuse: Config.DirtyMaxRatio %d is over 100 (percent)", c.DirtyMaxRatio)
	}
	if c.WriteBehindBytes == 0 {
		c.WriteBehindBytes = DefaultWriteBehindBytes
	}
	if c.WriteBehindDelay == 0 {
		c.WriteBehindDelay = DefaultWriteBehindDelay
	}
	return nil
}

// Server is a mounted txnfs. It implements go-fuse's RawFileSystem: FUSE
// node ids are engine inode numbers (the root is 1 in both), so no node
// table is needed beyond lookup counts.
//
// Every request runs as one engine transaction (FS.Do or FS.View) with the
// caller's credentials, and is therefore durable when it is answered;
// while a sandbox is active (Begin) every request of this mount runs in
// the sandbox's single transaction instead. Requests may run concurrently.
type Server struct {
	raw.RawFileSystem // ENOSYS for the operations not implemented here

	mountLife // dir, srv, Dir, Wait, Unmount

	cfg Config
	eng *fs.FS
	log *slog.Logger
	uid uint32 // the daemon's uid: it and root may control the sandbox

	ctx    context.Context
	cancel context.CancelFunc

	handles handleTable
	nodes   nodeTable
	sb      sandbox
	notify  notifier
	pins    *pinGate
	unpins  sync.WaitGroup // unpinLater goroutines

	// wb is the write-behind queue every engine access waits for (the
	// Group's if in one); nil when write-behind is off and there is no
	// Group. wbOn says whether this mount queues its writes.
	wb   *writeBehind
	wbOn bool
	// presync is the Sync started ahead of an expected fsync.
	presync presync
	// wbFault, if set (tests), runs before each write-behind commit; an
	// error fails the commit.
	wbFault atomic.Pointer[func(fs.Ino) error]
	// readRequests counts READ requests: data the kernel did not find
	// in its page cache (tests check that written data stays there).
	readRequests atomic.Uint64
	// mirrors are the memory mirrors of recently written files (nil:
	// none).
	mirrors *mirrorSet
}

var _ raw.RawFileSystem = (*Server)(nil)

// Mount mounts cfg.FS on dir and serves it until Unmount (or an unmount
// from outside, e.g. "txnfs umount"). ctx bounds the mount attempt only.
func Mount(ctx context.Context, dir string, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FS == nil {
		return nil, errors.New("fuse: Mount needs Config.FS (MountRemote serves a Client)")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	m := &Server{
		RawFileSystem: raw.NewDefaultRawFileSystem(),
		cfg:           cfg,
		eng:           cfg.FS,
		log:           cfg.Logger.With("mount", dir),
		mountLife:     mountLife{dir: dir},
		uid:           uint32(os.Getuid()),
		ctx:           mctx,
		cancel:        cancel,
	}
	m.onShutdown = m.doShutdown
	m.handles.init()
	m.nodes.init()
	m.pins = &pinGate{}
	m.wbOn = cfg.WriteBehindBytes > 0
	if m.wbOn {
		m.wb = newWriteBehind(cfg.WriteBehindBytes, cfg.WriteBehindDelay)
	}
	if cfg.Group != nil {
		m.pins = &cfg.Group.pins
		m.wb = cfg.Group.writeBehind(cfg.WriteBehindBytes, cfg.WriteBehindDelay)
	}
	opts := cfg.mountOptions(m.log)
	// No ATOMIC_O_TRUNC: with it O_TRUNC is applied in OPEN, before
	// the kernel's ETXTBSY check (handle_truncate), so open(O_TRUNC)
	// of a running program emptied it and then failed. The kernel
	// then truncates with SETATTR(size 0, the open's handle) after
	// its checks.
	// HANDLE_KILLPRIV: the engine clears setuid/setgid on write,
	// truncate and chown; without it the kernel would send a mode
	// change on behalf of a writer who does not own the file.
	// HANDLE_KILLPRIV_V2 (protocol 7.33, honoured by the kernel at
	// the 7.28 go-fuse speaks): the file system is known to clear
	// setuid/setgid itself, so the kernel sets SB_NOSEC and stops
	// asking GETXATTR(security.capability) before every write once
	// it has seen a file without privileges to remove (one FUSE
	// round trip and an engine read per write(2) otherwise).
	// IOCTL_DIR: the sandbox is controlled by an ioctl on the root.
	// DIRECT_IO_ALLOW_MMAP: files opened with O_APPEND use direct
	// I/O (see appendFlags) and may still be mapped shared.
	opts.ExtraCapabilities = raw.CAP_HANDLE_KILLPRIV | capKillPrivV2 | raw.CAP_IOCTL_DIR | raw.CAP_DIRECT_IO_ALLOW_MMAP
	if cfg.Writeback {
		opts.ExtraCapabilities |= raw.CAP_WRITEBACK_CACHE
	}
	// The kernel drops a file's pages only when told: at an open that
	// finds the file changed (no KEEP_CACHE), and by invalidations
	// (another mount of the Group, the sandbox, O_APPEND writes). With
	// the default AUTO_INVAL_DATA it also dropped them whenever it
	// refreshed attributes and saw a new mtime, which every write
	// through the page cache causes, so data just written was read back
	// through FUSE instead of from the page cache (issue 5 read target).
	opts.ExplicitDataCacheControl = true
	bdi := bdiSettings{readAheadKB: cfg.ReadAheadKB}
	if cfg.Writeback {
		bdi.maxRatio = cfg.DirtyMaxRatio
	}
	if cfg.MirrorBytes > 0 && !cfg.Writeback && cfg.Group == nil {
		ms, err := newMirrorSet(mctx, cfg.FS, cfg.MirrorBytes)
		if err != nil {
			m.log.Warn("no memory mirrors (passthrough reads of recently written files)", "err", err)
		} else {
			m.mirrors = ms
		}
	}
	if err := m.serve(m, opts, bdi, m.log, func(srv *raw.Server) {
		m.notify.start(srv, m.log)
		if m.mirrors != nil {
			m.mirrors.mu.Lock()
			m.mirrors.register, m.mirrors.unregister = backingFiles(srv)
			m.mirrors.mu.Unlock()
		}
	}); err != nil {
		m.mirrors.close()
		cancel()
		return nil, err
	}
	if cfg.Group != nil {
		cfg.Group.add(m)
	}
	return m, nil
}

// doShutdown releases the mount's state once the kernel is gone.
func (m *Server) doShutdown() {
	if m.cfg.Group != nil {
		m.cfg.Group.remove(m)
	}
	m.waitWrites() // answered writes commit before the mount's context ends
	m.sb.gate.Lock()
	if m.sb.txn != nil {
		m.log.Warn("unmounted with an active sandbox: aborting it", "operations", m.sb.ops)
		m.sb.txn.Abort()
		m.sb.txn = nil
	}
	m.sb.gate.Unlock()
	m.notify.stop()
	m.unpins.Wait()
	for _, ino := range m.nodes.drain() {
		m.unpinLater(ino)
	}
	m.unpins.Wait()
	m.presync.wait()
	m.mirrors.close()
	m.cancel()
}

// MirrorStats returns the metrics of the mount's memory mirrors.
func (m *Server) MirrorStats() MirrorStats { return m.mirrors.Stats() }

// String implements RawFileSystem.
func (m *Server) String() string { return "txnfs" }

// Init implements RawFileSystem.
func (m *Server) Init(*raw.Server) {}

// OnUnmount implements RawFileSystem.
func (m *Server) OnUnmount() {}

// cred returns the credential a request runs as: the caller's fsuid and
// fsgid from the request header and, for non-root callers, the
// supplementary groups of the calling thread (the kernel does not send
// them).
func (m *Server) cred(h *raw.InHeader) fs.Cred {
	c := fs.Cred{Uid: h.Uid, Gid: h.Gid}
	if c.Uid != 0 && h.Pid != 0 && !m.cfg.NoGroups {
		c.Groups = procGroups(h.Pid)
	}
	return c
}

// procGroups reads the supplementary groups of thread pid. A thread id is
// also a valid /proc entry, so this is right for multi-threaded callers
// that change their groups per thread.
func procGroups(pid uint32) []uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	i := bytes.Index(b, []byte("\nGroups:"))
	if i < 0 {
		return nil
	}
	line := b[i+len("\nGroups:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var gs []uint32
	for _, f := range bytes.Fields(line) {
		g, err := strconv.ParseUint(string(f), 10, 32)
		if err == nil {
			gs = append(gs, uint32(g))
		}
	}
	return gs
}

// syncEngine makes every change committed so far durable (outside a
// sandbox, where nothing is durable before the sandbox commits).
func (m *Server) syncEngine() error {
	m.waitWrites()
	if m.inSandbox() {
		return nil
	}
	m.presync.wait()
	return m.eng.Sync(m.ctx)
}

// inSandbox reports whether a sandbox transaction is open on the mount.
func (m *Server) inSandbox() bool {
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	return m.sb.txn != nil
}

// update runs fn as one read-write transaction (or in the sandbox). On
// success the names and inodes recorded in inv are invalidated in the
// kernel caches of the other mounts of the group (or, inside a sandbox,
// remembered for abort).
//
// Like view, appendData and syncEngine, it first waits for the writes
// answered before (write-behind).
func (m *Server) update(c fs.Cred, inv *invalidation, fn func(*fs.Txn) error) error {
	m.waitWrites()
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	if t := m.sb.txn; t != nil {
		m.sb.mu.Lock()
		defer m.sb.mu.Unlock()
		t.SetCred(c)
		m.sb.ops++
		err := fn(t)
		if err == nil && inv != nil {
			m.sb.touched.merge(inv)
		}
		return err
	}
	// NoSync: visible at once, durable at the next FS.Sync (fsync,
	// fdatasync, O_SYNC writes, close of a written file).
	err := m.eng.DoOpts(m.ctx, c, fs.TxnOptions{NoSync: true}, fn)
	if err == nil && inv != nil && m.cfg.Group != nil {
		m.cfg.Group.broadcast(m, inv)
	}
	return err
}

// view runs fn as a read-only transaction (or in the sandbox).
func (m *Server) view(c fs.Cred, fn func(*fs.Txn) error) error {
	m.waitWrites()
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	if t := m.sb.txn; t != nil {
		m.sb.mu.Lock()
		defer m.sb.mu.Unlock()
		t.SetCred(c)
		return fn(t)
	}
	return m.eng.View(m.ctx, c, fn)
}

// appendData appends data to ino atomically at the current end of file
// and returns the offset used.
func (m *Server) appendData(c fs.Cred, ino fs.Ino, data []byte) (uint64, error) {
	m.waitWrites()
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	if t := m.sb.txn; t != nil {
		m.sb.mu.Lock()
		defer m.sb.mu.Unlock()
		t.SetCred(c)
		m.sb.ops++
		off, err := t.Append(m.ctx, ino, data)
		if err == nil {
			m.sb.touched.inos = append(m.sb.touched.inos, ino)
		}
		return off, err
	}
	off, err := m.eng.AppendOpts(m.ctx, c, fs.TxnOptions{NoSync: true}, ino, data)
	if err == nil && m.cfg.Group != nil {
		m.cfg.Group.broadcast(m, &invalidation{inos: []fs.Ino{ino}})
	}
	return off, err
}

// Inodes the kernel knows are pinned in the engine (FS.Pin) from their
// first lookup until the kernel forgets them, so that a name the kernel
// resolved keeps working after another process removes or renames over
// it, as on a local file system: an open of a file unlinked after its
// lookup, or a file unlinked while open, still reaches the data.
//
// pinGate closes the window between an engine operation that may delete
// an inode (it checks the pin counts when it runs, but commits later) and
// a concurrent pin: removals hold it shared for their whole transaction,
// pinning holds it exclusively, so after pin returns no removal that
// missed the pin can still commit; a removal that committed before is
// detected by counting removals started (lookup then looks again). The
// engine could do this itself: fuse/ENGINE-REQUESTS.md. Mounts of a Group
// share one gate.
type pinGate struct {
	mu      sync.RWMutex
	started atomic.Uint64 // removals begun
}

// removing runs fn, a transaction that may delete inodes.
func (g *pinGate) removing(fn func() error) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	g.started.Add(1)
	return fn()
}

// pin pins ino.
func (m *Server) pin(ino fs.Ino) {
	m.pins.mu.Lock()
	m.eng.Pin(ino)
	m.pins.mu.Unlock()
}

// unpinLater releases a pin from a goroutine: the last release of an
// orphan deletes it, which is I/O that Forget must not wait for.
func (m *Server) unpinLater(ino fs.Ino) {
	m.unpins.Add(1)
	go func() {
		defer m.unpins.Done()
		m.waitWrites() // the last unpin may delete the file
		if err := m.eng.Unpin(m.ctx, ino); err != nil && m.ctx.Err() == nil {
			m.log.Error("unpin failed", "ino", ino, "err", err)
		}
	}()
}

// handleTable maps FUSE file handles to open files.
type handleTable struct {
	mu struct {
		sync.Mutex
		next uint64
		m    map[uint64]*handle
	}
}

// handle is an open regular file. Its fields are immutable except dirty
// and err.
type handle struct {
	ino    fs.Ino
	write  bool // opened for writing: ftruncate skips the permission check
	append bool // O_APPEND: writes go to the end of file, atomically
	sync   bool // O_SYNC or O_DSYNC: each write is durable when answered
	// passthrough: how the open was answered: notPassthrough, ptReader
	// (FOPEN_PASSTHROUGH: reads go to the mirror) or ptWriter (also its
	// writes: see mirrorSet.reconcile).
	passthrough int
	dirty       atomic.Bool // written since the last Sync through this handle

	errMu sync.Mutex
	err   error // a write-behind failure not yet reported (setErr)

	// Writes since the handle's last fsync, and whether its writes
	// skip write-behind because each is followed by an fsync (see
	// Server.Fsync).
	sinceSync atomic.Int32
	syncEach  atomic.Bool
	// With the writeback cache the kernel sends a file's mtime and
	// ctime (SETATTR) between the write it flushes for an fsync and the
	// FSYNC: timesBeforeFsync says the handle's last fsync was preceded
	// by one, and presyncAtTimes that the early Sync of the current
	// synchronous write waits for it (see presync).
	timesBeforeFsync atomic.Bool
	presyncAtTimes   atomic.Bool
}

func (h *handleTable) init() { h.mu.m = map[uint64]*handle{} }

func (h *handleTable) add(fh *handle) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.next++
	h.mu.m[h.mu.next] = fh
	return h.mu.next
}

func (h *handleTable) get(id uint64) *handle {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.m[id]
}

// writableInos returns the inodes open for writing (each once).
func (h *handleTable) writableInos() []fs.Ino {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[fs.Ino]bool{}
	var out []fs.Ino
	for _, fh := range h.mu.m {
		if fh.write && !seen[fh.ino] {
			seen[fh.ino] = true
			out = append(out, fh.ino)
		}
	}
	return out
}

func (h *handleTable) remove(id uint64) *handle {
	h.mu.Lock()
	defer h.mu.Unlock()
	fh := h.mu.m[id]
	delete(h.mu.m, id)
	return fh
}

// nodeTable counts the kernel's references (lookups) to each inode, so
// that the sandbox can invalidate everything the kernel caches, and
// remembers for each inode the change counter its cached pages reflect,
// to tell at open whether they are current.
//
// Attributes given to the kernel say nothing about its pages: with
// explicit data cache control a GETATTR or LOOKUP that reports another
// mount's write leaves the old pages in place. So the counter moves only
// when the pages are known to follow: at the first reference (no pages
// yet), at open (pages dropped unless current), and with writes and
// truncates made through this mount's page cache.
type nodeTable struct {
	mu struct {
		sync.Mutex
		m map[fs.Ino]*node
	}
	retiredN atomic.Int64 // nodes with retired set (requests check it first)
}

type node struct {
	removed bool // its last link may have been removed through this mount
	regular bool // a regular file
	lookups uint64
	change  uint64 // fs.Attr.Change the kernel's pages reflect; 0: unknown
	// With the writeback cache, a sandbox abort retires the kernel's
	// inodes of the regular files it changed (see retire): gen is added
	// to the engine's generation in entry replies, and retired says that
	// no entry reply with the current gen was given yet, so requests for
	// the inode come from a retired kernel inode.
	gen     uint64
	retired bool
}

func (n *nodeTable) init() { n.mu.m = map[fs.Ino]*node{} }

// ref records one kernel lookup of ino, a regular file or not, found at
// change, and reports whether it is the first (the inode must be pinned)
// and what to add to the engine's generation in the entry reply. A first
// reference has no cached pages, so they are current at change.
func (n *nodeTable) ref(ino fs.Ino, change uint64, regular bool) (first bool, gen uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.mu.m[ino]
	if nd == nil {
		nd = &node{change: change, regular: regular}
		n.mu.m[ino] = nd
	}
	nd.lookups++
	if nd.retired { // the reply makes the kernel replace the retired inode
		nd.retired = false
		n.retiredN.Add(-1)
	}
	return nd.lookups == 1, nd.gen
}

// retire marks the kernel's current inodes of those of inos that are
// regular files as retired (see Server.retire) and returns them.
func (n *nodeTable) retire(inos []fs.Ino) []fs.Ino {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []fs.Ino
	for _, ino := range inos {
		nd := n.mu.m[ino]
		if nd == nil || !nd.regular || nd.retired {
			continue
		}
		nd.gen++
		nd.retired = true
		n.retiredN.Add(1)
		out = append(out, ino)
	}
	return out
}

// isRetired reports whether requests for ino come from a retired kernel
// inode.
func (n *nodeTable) isRetired(ino fs.Ino) bool {
	if n.retiredN.Load() == 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.mu.m[ino]
	return nd != nil && nd.retired
}

// forget drops k lookups of ino and reports whether none is left (the
// inode must be unpinned).
func (n *nodeTable) forget(ino fs.Ino, k uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.mu.m[ino]
	if nd == nil {
		return false
	}
	if nd.lookups <= k {
		if nd.retired {
			n.retiredN.Add(-1)
		}
		delete(n.mu.m, ino)
		return true
	}
	nd.lookups -= k
	return false
}

// drain forgets every inode and returns those that were known.
func (n *nodeTable) drain() []fs.Ino {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]fs.Ino, 0, len(n.mu.m))
	for ino := range n.mu.m {
		out = append(out, ino)
	}
	clear(n.mu.m)
	n.retiredN.Store(0)
	return out
}

// removedHere records that ino's last link may have been removed
// through this mount.
func (n *nodeTable) removedHere(ino fs.Ino) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nd := n.mu.m[ino]; nd != nil {
		nd.removed = true
	}
}

func (n *nodeTable) wasRemovedHere(ino fs.Ino) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.mu.m[ino]
	return nd != nil && nd.removed
}

// wrote records that a write or truncate through this mount's page cache
// moved ino from change before to after: if the kernel's pages were
// current before, they are after (they hold what was written).
func (n *nodeTable) wrote(ino fs.Ino, before, after uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nd := n.mu.m[ino]; nd != nil && nd.change == before {
		nd.change = after
	}
}

// current reports whether the kernel's pages of ino reflect change
// (without recording anything, unlike opened).
func (n *nodeTable) current(ino fs.Ino, change uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.mu.m[ino]
	return nd != nil && nd.change == change
}

// forgetPages records that the kernel's pages of ino may hold data the
// engine does not have (a write-behind failure): the next open drops them.
func (n *nodeTable) forgetPages(ino fs.Ino) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nd := n.mu.m[ino]; nd != nil {
		nd.change = 0
	}
}

// opened records the change counter of ino at open and reports whether it
// equals the one the kernel last saw (so its caches are current).
func (n *nodeTable) opened(ino fs.Ino, change uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.mu.m[ino]
	if nd == nil {
		return false
	}
	same := nd.change == change
	nd.change = change
	return same
}

// resetChanges forgets all remembered change counters.
func (n *nodeTable) resetChanges() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nd := range n.mu.m {
		nd.change = 0
	}
}

// known returns every inode the kernel holds.
func (n *nodeTable) known() []fs.Ino {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]fs.Ino, 0, len(n.mu.m))
	for ino := range n.mu.m {
		out = append(out, ino)
	}
	return out
}

// logWriter sends go-fuse's log lines to slog.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	w.log.Debug(string(bytes.TrimRight(p, "\n")), "component", "go-fuse")
	return len(p), nil
}

// isBusy reports whether an unmount failed because the mount is in use.
func isBusy(err error) bool { return errors.Is(err, syscall.EBUSY) }
