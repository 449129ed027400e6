package fuse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/client"
)

// DefaultRemoteTimeout is the default kernel cache lifetime of entries,
// attributes and negative lookups on a remote mount: other clients change
// the files, and nothing tells this mount (no delegations or callbacks),
// so caches are short. Opens revalidate regardless (close-to-open).
const DefaultRemoteTimeout = time.Second

// RemoteServer is a FUSE mount of a remote NFSv4.1 server through
// nfs4/client. It implements go-fuse's RawFileSystem with one COMPOUND per
// FUSE request (two where a check must precede a change), sent with the
// AUTH_SYS identity of the request's caller.
//
// Node ids: the root is 1; every other object gets a fresh node id the
// first time the kernel learns of it, keyed by its fileid (stable on the
// server), and the table keeps its file handle and the kernel's lookup
// count; FORGET frees the entry.
//
// Open files: each FUSE open is an NFS OPEN with its own open-owner (so
// opens of one file are independent states and CLOSE of one does not
// affect another); writes are UNSTABLE and COMMITted at fsync and at
// close (FLUSH), and opens revalidate the change attribute to decide
// whether the kernel keeps its cached pages (close-to-open). A file
// removed while open stays usable because the server keeps open files
// (the txnfs server pins an inode while an open state refers to it; see
// docs/fuse.md for why no silly rename is done).
type RemoteServer struct {
	raw.RawFileSystem

	mountLife // dir, srv, Dir, Wait, Unmount

	cfg Config
	c   *client.Client
	log interface {
		Error(msg string, args ...any)
		Warn(msg string, args ...any)
		Info(msg string, args ...any)
		Debug(msg string, args ...any)
	}
	uid    uint32
	ctx    context.Context
	cancel context.CancelFunc

	maxRead, maxWrite int
	appendExt         bool // WRITE at client.AppendOffset appends atomically

	nodes   rnodeTable
	handles struct {
		sync.Mutex
		next uint64
		m    map[uint64]*rhandle
	}
	notify   notifier
	locks    remoteLocks
	reclaims atomic.Uint64 // reclaims done (remote_reclaim.go)
	// unstableBytes is the size of all nodes' unstableWrites; rewrites
	// counts writes sent again after a server restart lost them.
	unstableBytes atomic.Int64
	rewrites      atomic.Uint64
	sb            remoteSandbox
	sbActive      atomic.Bool // mirrors sb.active, for cache timeouts
}

var _ raw.RawFileSystem = (*RemoteServer)(nil)

// rnode is an object the kernel knows. fh and fileid never change.
type rnode struct {
	fh       []byte
	fileid   uint64
	lookups  uint64
	change   uint64 // change attribute the kernel's pages reflect, 0: unknown (guarded by the table lock; see nodeTable)
	parent   uint64 // node id of the directory and name of the last lookup (guarded by the table lock)
	name     string
	verf     [8]byte        // READDIR cookie verifier of the last listing (guarded by the table lock)
	dirty    atomic.Bool    // UNSTABLE writes (or a COPY) not yet committed
	unstable unstableWrites // copies of the UNSTABLE writes (remote_unstable.go)
}

// rnodeTable maps node ids to objects.
type rnodeTable struct {
	mu       sync.Mutex
	next     uint64
	byID     map[uint64]*rnode
	byFileID map[uint64]uint64
	byName   map[nameKey]uint64 // inverse of rnode.parent/name
}

type nameKey struct {
	parent uint64
	name   string
}

func (t *rnodeTable) init(rootFH []byte, rootFileID uint64) {
	t.byID = map[uint64]*rnode{1: {fh: rootFH, fileid: rootFileID, lookups: 1}}
	t.byFileID = map[uint64]uint64{rootFileID: 1}
	t.byName = map[nameKey]uint64{}
	t.next = 1
}

// get returns the node with id, or nil.
func (t *rnodeTable) get(id uint64) *rnode {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// ref records one kernel lookup of the object (fh, fileid), found at
// change, and returns its node id. (A new node has no cached pages, so
// they are current at change.)
func (t *rnodeTable) ref(fh []byte, fileid, change uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.byFileID[fileid]; ok {
		n := t.byID[id]
		if string(n.fh) == string(fh) {
			if id != 1 {
				n.lookups++
			}
			return id
		}
		// The fileid now names another object (a server that reuses
		// fileids): the old node keeps its handle until forgotten.
	}
	t.next++
	id := t.next
	t.byID[id] = &rnode{fh: append([]byte(nil), fh...), fileid: fileid, lookups: 1, change: change}
	t.byFileID[fileid] = id
	return id
}

// named records that id was found as name in directory parent.
func (t *rnodeTable) named(id, parent uint64, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byID[id]; n != nil && id != 1 {
		if t.byName[nameKey{n.parent, n.name}] == id {
			delete(t.byName, nameKey{n.parent, n.name})
		}
		n.parent, n.name = parent, name
		t.byName[nameKey{parent, name}] = id
	}
}

// renamed records a rename of (parent, name) to (newParent, newName).
func (t *rnodeTable) renamed(parent uint64, name string, newParent uint64, newName string) {
	t.mu.Lock()
	id, ok := t.byName[nameKey{parent, name}]
	t.mu.Unlock()
	if ok {
		t.named(id, newParent, newName)
	}
}

// nameOf returns the directory and name of id's last lookup.
func (t *rnodeTable) nameOf(id uint64) (uint64, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byID[id]; n != nil {
		return n.parent, n.name
	}
	return 0, ""
}

// forget drops k lookups of id.
func (t *rnodeTable) forget(id, k uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byID[id]
	if n == nil || id == 1 {
		return
	}
	if n.lookups > k {
		n.lookups -= k
		return
	}
	delete(t.byID, id)
	if t.byFileID[n.fileid] == id {
		delete(t.byFileID, n.fileid)
	}
	if t.byName[nameKey{n.parent, n.name}] == id {
		delete(t.byName, nameKey{n.parent, n.name})
	}
}

// stale records that the kernel's pages of id may be out of date.
func (t *rnodeTable) stale(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byID[id]; n != nil {
		n.change = 0
	}
}

// opened records the change attribute of id at open and reports whether
// the kernel's pages reflect it (they are dropped otherwise).
func (t *rnodeTable) opened(id, change uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byID[id]
	if n == nil {
		return false
	}
	same := n.change == change && change != 0
	n.change = change
	return same
}

func (t *rnodeTable) known() []fs.Ino {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]fs.Ino, 0, len(t.byID))
	for id, n := range t.byID {
		n.change = 0
		out = append(out, fs.Ino(id))
	}
	return out
}

// rhandle is an open file: an NFS open state.
type rhandle struct {
	node   uint64
	n      *rnode
	write  bool
	append bool
	// owner, access and cred are the OPEN's, for its reclaim after a
	// server restart (remote_reclaim.go).
	owner  []byte
	access uint32
	cred   *client.Cred

	mu  sync.Mutex
	sid nfsv4.Stateid4 // replaced by a reclaim
}

// newHandle registers the open state sid of node id (served by n) that
// cp, an OPEN of owner with the caller's flags, created, and returns
// its FUSE handle.
func (m *RemoteServer) newHandle(id uint64, n *rnode, flags uint32, owner []byte, cp *client.Compound, sid nfsv4.Stateid4) uint64 {
	return m.addHandle(&rhandle{node: id, n: n, sid: sid, owner: owner, access: shareAccess(flags), cred: cp.Cred,
		write: flags&syscall.O_ACCMODE != syscall.O_RDONLY, append: flags&syscall.O_APPEND != 0})
}

// stateid returns the handle's current open stateid.
func (h *rhandle) stateid() nfsv4.Stateid4 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sid
}

// MountRemote mounts the NFSv4.1 server reached by cfg.Client on dir.
// cfg.FS, Group and Writeback must be unset. The caller keeps ownership
// of the client and closes it after the mount ends.
func MountRemote(ctx context.Context, dir string, cfg Config) (*RemoteServer, error) {
	if cfg.Client == nil {
		return nil, errors.New("fuse: MountRemote needs Config.Client")
	}
	if cfg.FS != nil || cfg.Group != nil || cfg.Writeback {
		return nil, errors.New("fuse: a remote mount takes no FS, Group or Writeback")
	}
	for _, d := range []*time.Duration{&cfg.EntryTimeout, &cfg.AttrTimeout, &cfg.NegativeTimeout} {
		if *d == 0 {
			*d = DefaultRemoteTimeout
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	m := &RemoteServer{
		RawFileSystem: raw.NewDefaultRawFileSystem(),
		cfg:           cfg,
		c:             cfg.Client,
		log:           cfg.Logger.With("mount", dir),
		mountLife:     mountLife{dir: dir},
		uid:           uint32(os.Getuid()),
		ctx:           mctx,
		cancel:        cancel,
	}
	m.onShutdown = m.doShutdown
	m.handles.m = map[uint64]*rhandle{}
	if err := m.probe(ctx); err != nil {
		cancel()
		return nil, err
	}
	if cfg.MaxWrite > m.maxWrite {
		cfg.MaxWrite = m.maxWrite
		m.cfg.MaxWrite = m.maxWrite
	}
	opts := cfg.mountOptions(cfg.Logger)
	// flock and POSIX locks are NFS locks (remote_locks.go).
	opts.EnableLocks = true
	// No ATOMIC_O_TRUNC: with it the file system truncates in
	// OPEN, before the kernel's ETXTBSY check (get_write_access in
	// handle_truncate), so open(O_TRUNC) of a running executable
	// truncated it under the running program (pjdfstest
	// open::etxtbsy caught it) and then failed. Without it the
	// kernel opens, checks, and sends SETATTR(size 0) with the
	// open's handle.
	// HANDLE_KILLPRIV: the server clears setuid/setgid on write.
	// IOCTL_DIR: the sandbox control ioctl on the root.
	opts.ExtraCapabilities = raw.CAP_HANDLE_KILLPRIV | raw.CAP_IOCTL_DIR | raw.CAP_DIRECT_IO_ALLOW_MMAP
	if err := m.serve(m, opts, bdiSettings{readAheadKB: cfg.ReadAheadKB}, cfg.Logger, func(srv *raw.Server) {
		m.notify.start(srv, cfg.Logger)
		// After a server restart the client reclaims the mount's
		// opens and locks (remote_reclaim.go).
		m.c.SetReclaim(m.reclaim)
	}); err != nil {
		m.c.SetReclaim(nil)
		cancel()
		return nil, err
	}
	return m, nil
}

// probe reads the root's handle and fileid and the server's I/O limits.
func (m *RemoteServer) probe(ctx context.Context) error {
	var cp client.Compound
	cp.PutRootFH()
	cp.GetFH()
	cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MAXREAD, nfsv4.FATTR4_MAXWRITE))
	rep, err := m.c.Do(ctx, &cp)
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		return fmt.Errorf("fuse: reading the server's root: %w", err)
	}
	fh := resFH(rep.Results[1])
	a, err := resAttrs(rep.Results[2])
	if err != nil {
		return err
	}
	if a.Type != nfsv4.NF4DIR {
		return fmt.Errorf("fuse: the server's root is not a directory")
	}
	m.nodes.init(fh, a.FileID)
	// Leave room for the COMPOUND and RPC headers.
	lim := m.c.Limits()
	m.maxRead = int(lim.MaxResponseSize) - 4096
	m.maxWrite = int(lim.MaxRequestSize) - 4096
	if a.MaxRead > 0 && a.MaxRead < uint64(m.maxRead) {
		m.maxRead = int(a.MaxRead)
	}
	if a.MaxWrite > 0 && a.MaxWrite < uint64(m.maxWrite) {
		m.maxWrite = int(a.MaxWrite)
	}
	m.maxRead = max(m.maxRead, 4096)
	m.maxWrite = max(m.maxWrite&^4095, 4096)
	m.appendExt = lim.ServerImpl == "txnfs"
	return nil
}

// doShutdown releases the mount's state once the kernel is gone.
func (m *RemoteServer) doShutdown() {
	// Bounded, so that a hard client does not keep the process waiting
	// for a server that is gone.
	t := time.AfterFunc(shutdownTimeout, m.cancel)
	defer t.Stop()
	m.abortSandboxAtExit()
	m.notify.stop()
	m.c.SetReclaim(nil)
	// Close the open states the kernel did not release.
	m.handles.Lock()
	hs := m.handles.m
	m.handles.m = map[uint64]*rhandle{}
	m.handles.Unlock()
	m.locks.mu.Lock()
	for fh, h := range m.locks.lingering {
		hs[fh] = h
	}
	m.locks.lingering = nil
	m.locks.mu.Unlock()
	for _, h := range hs {
		var cp client.Compound
		cp.PutFH(h.n.fh)
		cp.Close(h.stateid())
		m.c.Do(m.ctx, &cp)
	}
	m.cancel()
}

// String implements RawFileSystem.
func (m *RemoteServer) String() string { return "txnfs-remote" }

// Init implements RawFileSystem.
func (m *RemoteServer) Init(*raw.Server) {}

// OnUnmount implements RawFileSystem.
func (m *RemoteServer) OnUnmount() {}

// cred is the AUTH_SYS identity of a request's caller.
func (m *RemoteServer) cred(h *raw.InHeader) *client.Cred {
	c := &client.Cred{UID: h.Uid, GID: h.Gid}
	if h.Uid != 0 && h.Pid != 0 && !m.cfg.NoGroups {
		c.GIDs = procGroups(h.Pid)
	}
	return c
}

// do sends cp as the caller of h (inside the sandbox's transaction when
// one is active) and returns the reply; the error is the failing
// operation's (a *client.StatusError) or the transport's.
//
// cancel is the request's cancellation channel (closed by go-fuse when the
// caller is interrupted or the mount is aborted): a hard client waiting
// for an unreachable server gives up when it closes.
func (m *RemoteServer) do(cancel <-chan struct{}, h *raw.InHeader, cp *client.Compound) (*client.Reply, error) {
	cp.Cred = m.cred(h)
	release := m.sb.join(cp)
	ctx, done := m.requestContext(cancel, h.Pid)
	rep, err := m.c.Do(ctx, cp)
	done()
	release(err == nil)
	if err != nil {
		return nil, err
	}
	return rep, rep.Err()
}

// doAttrs is do for a COMPOUND whose result at is a GETATTR: it returns
// the reply and the decoded attributes, or the FUSE status of op's failure.
func (m *RemoteServer) doAttrs(cancel <-chan struct{}, h *raw.InHeader, op string, cp *client.Compound, at int) (*client.Reply, client.Attrs, raw.Status) {
	rep, err := m.do(cancel, h, cp)
	if err != nil {
		return nil, client.Attrs{}, m.status(op, err)
	}
	a, err := resAttrs(rep.Results[at])
	if err != nil {
		return nil, client.Attrs{}, m.status(op, err)
	}
	return rep, a, raw.OK
}

// status converts an error of do to a FUSE status.
func (m *RemoteServer) status(op string, err error) raw.Status {
	if err == nil {
		return raw.OK
	}
	var se *client.StatusError
	if errors.As(err, &se) {
		e := client.Errno(se.Status)
		if e == syscall.EIO || se.Status == nfsv4.NFS4ERR_SERVERFAULT {
			m.log.Error("server error", "op", op, "err", err)
		}
		return raw.Status(e)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return raw.EINTR
	}
	var ee syscall.Errno
	if errors.As(err, &ee) {
		return raw.Status(ee)
	}
	m.log.Error("request failed", "op", op, "err", err)
	return raw.EIO
}

// node returns the node of a request, or nil (ESTALE: the kernel looks
// the name up again).
func (m *RemoteServer) node(id uint64) *rnode { return m.nodes.get(id) }

func resFH(r nfsv4.NfsResop4) []byte {
	if g, ok := r.(*nfsv4.NfsResop4_OP_GETFH); ok {
		if ok, _ := g.Opgetfh.(*nfsv4.Getfh4res_NFS4_OK); ok != nil {
			return ok.Resok4.Object
		}
	}
	return nil
}

func resAttrs(r nfsv4.NfsResop4) (client.Attrs, error) {
	if g, ok := r.(*nfsv4.NfsResop4_OP_GETATTR); ok {
		if ok, _ := g.Opgetattr.(*nfsv4.Getattr4res_NFS4_OK); ok != nil {
			return client.DecodeAttrs(ok.Resok4.ObjAttributes)
		}
	}
	return client.Attrs{}, fmt.Errorf("fuse: expected a GETATTR result, got %T", r)
}

func remoteTypeBits(t nfsv4.NfsFtype4) uint32 {
	switch t {
	case nfsv4.NF4REG:
		return syscall.S_IFREG
	case nfsv4.NF4DIR:
		return syscall.S_IFDIR
	case nfsv4.NF4LNK:
		return syscall.S_IFLNK
	case nfsv4.NF4FIFO:
		return syscall.S_IFIFO
	case nfsv4.NF4SOCK:
		return syscall.S_IFSOCK
	case nfsv4.NF4CHR:
		return syscall.S_IFCHR
	case nfsv4.NF4BLK:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

func fillRemoteAttr(out *raw.Attr, a *client.Attrs) {
	out.Ino = a.FileID
	out.Size = a.Size
	out.Blocks = (a.SpaceUsed + 511) / 512
	out.Atime, out.Atimensec = uint64(a.Atime.Unix()), uint32(a.Atime.Nanosecond())
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Unix()), uint32(a.Mtime.Nanosecond())
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Unix()), uint32(a.Ctime.Nanosecond())
	out.Mode = remoteTypeBits(a.Type) | a.Mode&07777
	out.Nlink = a.Nlink
	out.Uid, _ = a.Uid()
	out.Gid, _ = a.Gid()
	out.Rdev = encodeDev(uint64(a.Rdev.Specdata1)<<32 | uint64(a.Rdev.Specdata2))
	out.Blksize = blockSize
}

// entry fills out for an object the kernel now references.
func (m *RemoteServer) entry(out *raw.EntryOut, fh []byte, a *client.Attrs) {
	id := m.nodes.ref(fh, a.FileID, a.Change)
	out.NodeId = id
	if m.sbActive.Load() {
		// Names seen inside a sandbox are revalidated at every use:
		// after abort or commit, nothing of the sandbox is cached.
		out.SetEntryTimeout(0)
		out.SetAttrTimeout(0)
	} else {
		out.SetEntryTimeout(m.cfg.EntryTimeout)
		out.SetAttrTimeout(m.cfg.AttrTimeout)
	}
	fillRemoteAttr(&out.Attr, a)
}

func (m *RemoteServer) attrOut(id uint64, out *raw.AttrOut, a *client.Attrs) {
	out.SetTimeout(m.cfg.AttrTimeout)
	if m.sbActive.Load() {
		out.SetTimeout(0)
	}
	fillRemoteAttr(&out.Attr, a)
}

// Lookup implements RawFileSystem: PUTFH LOOKUP GETFH GETATTR.
func (m *RemoteServer) Lookup(cancel <-chan struct{}, h *raw.InHeader, name string, out *raw.EntryOut) raw.Status {
	dir := m.node(h.NodeId)
	if dir == nil {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(dir.fh)
	switch name {
	case ".":
	case "..":
		cp.LookupP()
	default:
		cp.Lookup(name)
	}
	fhAt := cp.GetFH()
	attrAt := cp.GetAttr(client.StatMask)
	rep, err := m.do(cancel, h, &cp)
	if err != nil {
		var se *client.StatusError
		if errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_NOENT && m.cfg.NegativeTimeout > 0 && !m.sbActive.Load() {
			*out = raw.EntryOut{}
			out.SetEntryTimeout(m.cfg.NegativeTimeout)
			return raw.OK
		}
		return m.status("lookup", err)
	}
	a, err := resAttrs(rep.Results[attrAt])
	if err != nil {
		return m.status("lookup", err)
	}
	m.entry(out, resFH(rep.Results[fhAt]), &a)
	if name != "." && name != ".." {
		m.nodes.named(out.NodeId, h.NodeId, name)
	}
	return raw.OK
}

// Forget implements RawFileSystem.
func (m *RemoteServer) Forget(nodeid, nlookup uint64) { m.nodes.forget(nodeid, nlookup) }

// GetAttr implements RawFileSystem: PUTFH GETATTR.
func (m *RemoteServer) GetAttr(cancel <-chan struct{}, in *raw.GetAttrIn, out *raw.AttrOut) raw.Status {
	n := m.node(in.NodeId)
	if in.Flags()&raw.FUSE_GETATTR_FH != 0 {
		if h := m.handle(in.Fh()); h != nil {
			n = h.n // fstat: the open file (see reopenByName)
		}
	}
	if n == nil {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(n.fh)
	cp.GetAttr(client.StatMask)
	rep, err := m.do(cancel, &in.InHeader, &cp)
	var se *client.StatusError
	if errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_STALE {
		if r := m.redirected(in.NodeId); r != nil {
			// fstat of a file opened by reopenByName (the kernel
			// sends no file handle with it).
			cp.Reset()
			cp.PutFH(r.fh)
			cp.GetAttr(client.StatMask)
			rep, err = m.do(cancel, &in.InHeader, &cp)
		} else if dir := m.node(parentOf(m, in.NodeId)); dir != nil {
			// The kernel checks permissions before an open from
			// attributes it refreshes by node id: report those of the
			// file that now has the node's name, which an open by name
			// will reach (reopenByName).
			_, name := m.nodes.nameOf(in.NodeId)
			cp.Reset()
			cp.PutFH(dir.fh)
			cp.Lookup(name)
			cp.GetAttr(client.StatMask)
			if rep2, err2 := m.do(cancel, &in.InHeader, &cp); err2 == nil {
				if a, err3 := resAttrs(rep2.Results[2]); err3 == nil && a.Type == nfsv4.NF4REG {
					out.SetTimeout(0)
					fillRemoteAttr(&out.Attr, &a)
					m.nodes.stale(in.NodeId)
					return raw.OK
				}
			}
		}
	}
	if err != nil {
		return m.status("getattr", err)
	}
	a, err := resAttrs(rep.Results[1])
	if err != nil {
		return m.status("getattr", err)
	}
	m.attrOut(in.NodeId, out, &a)
	return raw.OK
}

// SetAttr implements RawFileSystem: PUTFH SETATTR GETATTR (truncation
// through an open file uses its open stateid).
func (m *RemoteServer) SetAttr(cancel <-chan struct{}, in *raw.SetAttrIn, out *raw.AttrOut) raw.Status {
	n := m.node(in.NodeId)
	if n == nil {
		return raw.Status(syscall.ESTALE)
	}
	var sa client.SetAttrs
	if mode, ok := in.GetMode(); ok {
		sa.SetMode, sa.Mode = true, mode&07777
	}
	if uid, ok := in.GetUID(); ok {
		sa.SetUid, sa.Uid = true, uid
	}
	if gid, ok := in.GetGID(); ok {
		sa.SetGid, sa.Gid = true, gid
	}
	var h *rhandle // the open file whose stateid truncates
	if fh, ok := in.GetFh(); ok {
		if h = m.handle(fh); h != nil {
			n = h.n // through an open file (see reopenByName)
		}
	}
	if size, ok := in.GetSize(); ok {
		sa.SetSize, sa.Size = true, size
	}
	if h != nil && (!h.write || !sa.SetSize) {
		h = nil
	}
	if sa.SetSize {
		// Writes sent again after a server restart must not undo
		// the truncation (remote_unstable.go).
		if err := m.commit(cancel, &in.InHeader, n); err != nil {
			return m.status("setattr", err)
		}
	}
	if in.Valid&raw.FATTR_ATIME != 0 {
		sa.SetAtime = true
		if in.Valid&raw.FATTR_ATIME_NOW == 0 {
			sa.Atime = time.Unix(int64(in.Atime), int64(in.Atimensec))
		}
	}
	if in.Valid&raw.FATTR_MTIME != 0 {
		sa.SetMtime = true
		if in.Valid&raw.FATTR_MTIME_NOW == 0 {
			sa.Mtime = time.Unix(int64(in.Mtime), int64(in.Mtimensec))
		}
	}
	var at int
	rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
		cp.PutFH(n.fh)
		if !sa.Empty() {
			sid := client.AnonymousStateid
			if h != nil {
				sid = h.stateid()
			}
			cp.SetAttr(sid, sa.Encode())
		}
		at = cp.GetAttr(client.StatMask)
	})
	if err != nil {
		return m.status("setattr", err)
	}
	a, err := resAttrs(rep.Results[at])
	if err != nil {
		return m.status("setattr", err)
	}
	m.attrOut(in.NodeId, out, &a)
	return raw.OK
}

// create sends PUTFH(dir) op GETFH GETATTR, where add adds op (CREATE or
// OPEN), and answers with the new entry.
func (m *RemoteServer) create(cancel <-chan struct{}, op string, h *raw.InHeader, add func(*client.Compound), out *raw.EntryOut) raw.Status {
	dir := m.node(h.NodeId)
	if dir == nil {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(dir.fh)
	add(&cp)
	fhAt := cp.GetFH()
	attrAt := cp.GetAttr(client.StatMask)
	rep, a, st := m.doAttrs(cancel, h, op, &cp, attrAt)
	if st != raw.OK {
		return st
	}
	m.entry(out, resFH(rep.Results[fhAt]), &a)
	return raw.OK
}

func modeAttrs(mode uint32) nfsv4.Fattr4 {
	s := client.SetAttrs{SetMode: true, Mode: mode & 07777}
	return s.Encode()
}

// Mkdir implements RawFileSystem: CREATE NF4DIR.
func (m *RemoteServer) Mkdir(cancel <-chan struct{}, in *raw.MkdirIn, name string, out *raw.EntryOut) raw.Status {
	return m.create(cancel, "mkdir", &in.InHeader, func(cp *client.Compound) { cp.Mkdir(name, modeAttrs(in.Mode)) }, out)
}

// Symlink implements RawFileSystem: CREATE NF4LNK.
func (m *RemoteServer) Symlink(cancel <-chan struct{}, h *raw.InHeader, target, name string, out *raw.EntryOut) raw.Status {
	return m.create(cancel, "symlink", h, func(cp *client.Compound) { cp.Symlink(name, target, modeAttrs(0o777)) }, out)
}

// Mknod implements RawFileSystem: CREATE of a FIFO, socket or device; a
// regular file is an exclusive OPEN and CLOSE.
func (m *RemoteServer) Mknod(cancel <-chan struct{}, in *raw.MknodIn, name string, out *raw.EntryOut) raw.Status {
	var typ nfsv4.Createtype4
	dev := decodeDev(in.Rdev)
	spec := nfsv4.Specdata4{Specdata1: uint32(dev >> 32), Specdata2: uint32(dev)}
	switch in.Mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		return m.create(cancel, "mknod", &in.InHeader, func(cp *client.Compound) {
			cp.Open(m.c.ClientID(), m.newOwner(), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_READ,
				Create: true, Exclusive: true, CreateAttrs: modeAttrs(in.Mode)})
			// CLOSE after GETFH/GETATTR would also do; the current
			// stateid is the OPEN's until then.
			cp.Close(client.CurrentStateid)
		}, out)
	case syscall.S_IFIFO:
		typ = &nfsv4.Createtype4_NF4FIFO{}
	case syscall.S_IFSOCK:
		typ = &nfsv4.Createtype4_NF4SOCK{}
	case syscall.S_IFCHR:
		typ = &nfsv4.Createtype4_NF4CHR{Devdata: spec}
	case syscall.S_IFBLK:
		typ = &nfsv4.Createtype4_NF4BLK{Devdata: spec}
	default:
		return raw.EINVAL
	}
	return m.create(cancel, "mknod", &in.InHeader, func(cp *client.Compound) {
		cp.Add(&nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: typ, Objname: name, Createattrs: modeAttrs(in.Mode)}})
	}, out)
}

// Link implements RawFileSystem: PUTFH(file) SAVEFH PUTFH(dir) LINK
// PUTFH(file) GETATTR.
func (m *RemoteServer) Link(cancel <-chan struct{}, in *raw.LinkIn, name string, out *raw.EntryOut) raw.Status {
	dir, file := m.node(in.NodeId), m.node(in.Oldnodeid)
	if dir == nil || file == nil {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(file.fh)
	cp.SaveFH()
	cp.PutFH(dir.fh)
	cp.Link(name)
	cp.PutFH(file.fh)
	at := cp.GetAttr(client.StatMask)
	_, a, st := m.doAttrs(cancel, &in.InHeader, "link", &cp, at)
	if st != raw.OK {
		return st
	}
	m.entry(out, file.fh, &a)
	return raw.OK
}

// remove is REMOVE. The kernel has already checked the victim's type
// against unlink/rmdir from its cached attributes.
func (m *RemoteServer) remove(cancel <-chan struct{}, op string, h *raw.InHeader, name string) raw.Status {
	dir := m.node(h.NodeId)
	if dir == nil {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(dir.fh)
	cp.Remove(name)
	_, err := m.do(cancel, h, &cp)
	return m.status(op, err)
}

// Unlink implements RawFileSystem.
func (m *RemoteServer) Unlink(cancel <-chan struct{}, h *raw.InHeader, name string) raw.Status {
	return m.remove(cancel, "unlink", h, name)
}

// Rmdir implements RawFileSystem.
func (m *RemoteServer) Rmdir(cancel <-chan struct{}, h *raw.InHeader, name string) raw.Status {
	return m.remove(cancel, "rmdir", h, name)
}

// Rename implements RawFileSystem: PUTFH(src) SAVEFH PUTFH(dst) RENAME.
// RENAME_NOREPLACE checks the target first (not atomic with the rename);
// RENAME_EXCHANGE, which NFS lacks, is three RENAMEs through a temporary
// name in one transactional COMPOUND (txnfs servers only: EINVAL
// elsewhere).
func (m *RemoteServer) Rename(cancel <-chan struct{}, in *raw.RenameIn, oldName, newName string) raw.Status {
	if in.Flags&^(renameNoReplace|renameExchange) != 0 || in.Flags == renameNoReplace|renameExchange {
		return raw.EINVAL
	}
	src, dst := m.node(in.NodeId), m.node(in.Newdir)
	if src == nil || dst == nil {
		return raw.Status(syscall.ESTALE)
	}
	if in.Flags&renameExchange != 0 {
		tmp := fmt.Sprintf(".txnfs-exchange-%d-%d", os.Getpid(), time.Now().UnixNano())
		cp := client.Compound{Txn: true}
		step := func(from, to []byte, a, b string) {
			cp.PutFH(from)
			cp.SaveFH()
			cp.PutFH(to)
			cp.Rename(a, b)
		}
		step(dst.fh, dst.fh, newName, tmp)
		step(src.fh, dst.fh, oldName, newName)
		step(dst.fh, src.fh, tmp, oldName)
		_, err := m.do(cancel, &in.InHeader, &cp)
		if errors.Is(err, client.ErrTxnUnsupported) {
			return raw.EINVAL
		}
		return m.status("rename", err)
	}
	if in.Flags&renameNoReplace != 0 {
		var cp client.Compound
		cp.PutFH(dst.fh)
		cp.Lookup(newName)
		_, err := m.do(cancel, &in.InHeader, &cp)
		var se *client.StatusError
		switch {
		case err == nil:
			return raw.Status(syscall.EEXIST)
		case !errors.As(err, &se) || se.Status != nfsv4.NFS4ERR_NOENT:
			return m.status("rename", err)
		}
	}
	var cp client.Compound
	cp.PutFH(src.fh)
	cp.SaveFH()
	cp.PutFH(dst.fh)
	cp.Rename(oldName, newName)
	_, err := m.do(cancel, &in.InHeader, &cp)
	if err == nil {
		m.nodes.renamed(in.NodeId, oldName, in.Newdir, newName)
	}
	return m.status("rename", err)
}

// Readlink implements RawFileSystem.
func (m *RemoteServer) Readlink(cancel <-chan struct{}, h *raw.InHeader) ([]byte, raw.Status) {
	n := m.node(h.NodeId)
	if n == nil {
		return nil, raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(n.fh)
	cp.Readlink()
	rep, err := m.do(cancel, h, &cp)
	if err != nil {
		return nil, m.status("readlink", err)
	}
	if r, ok := rep.Results[1].(*nfsv4.NfsResop4_OP_READLINK); ok {
		if ok, _ := r.Opreadlink.(*nfsv4.Readlink4res_NFS4_OK); ok != nil {
			return ok.Resok4.Link, raw.OK
		}
	}
	return nil, raw.EIO
}

// Access implements RawFileSystem with ACCESS.
func (m *RemoteServer) Access(cancel <-chan struct{}, in *raw.AccessIn) raw.Status {
	n := m.node(in.NodeId)
	if n == nil {
		return raw.Status(syscall.ESTALE)
	}
	var bits uint32
	if in.Mask&4 != 0 {
		bits |= nfsv4.ACCESS4_READ
	}
	if in.Mask&2 != 0 {
		bits |= nfsv4.ACCESS4_MODIFY
	}
	if in.Mask&1 != 0 {
		bits |= nfsv4.ACCESS4_EXECUTE | nfsv4.ACCESS4_LOOKUP
	}
	var cp client.Compound
	cp.PutFH(n.fh)
	cp.Access(bits)
	rep, err := m.do(cancel, &in.InHeader, &cp)
	if err != nil {
		return m.status("access", err)
	}
	r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_ACCESS)
	if r == nil {
		return raw.EIO
	}
	ok, _ := r.Opaccess.(*nfsv4.Access4res_NFS4_OK)
	if ok == nil {
		return raw.EIO
	}
	got := ok.Resok4.Access
	if bits&nfsv4.ACCESS4_READ != 0 && got&nfsv4.ACCESS4_READ == 0 ||
		bits&nfsv4.ACCESS4_MODIFY != 0 && got&nfsv4.ACCESS4_MODIFY == 0 ||
		in.Mask&1 != 0 && got&(nfsv4.ACCESS4_EXECUTE|nfsv4.ACCESS4_LOOKUP) == 0 {
		return raw.EACCES
	}
	return raw.OK
}

// statfsMask are the space attributes StatFs asks for, in increasing
// number order (the order of their values).
var statfsMask = client.MakeBitmap(nfsv4.FATTR4_FILES_AVAIL, nfsv4.FATTR4_FILES_FREE, nfsv4.FATTR4_FILES_TOTAL,
	nfsv4.FATTR4_MAXNAME, nfsv4.FATTR4_SPACE_AVAIL, nfsv4.FATTR4_SPACE_FREE, nfsv4.FATTR4_SPACE_TOTAL)

// StatFs implements RawFileSystem from the space attributes of the root.
func (m *RemoteServer) StatFs(cancel <-chan struct{}, h *raw.InHeader, out *raw.StatfsOut) raw.Status {
	var cp client.Compound
	cp.PutFH(m.nodes.get(1).fh)
	cp.GetAttr(statfsMask)
	rep, err := m.do(cancel, h, &cp)
	if err != nil {
		return m.status("statfs", err)
	}
	g, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_GETATTR)
	ok, _ := g.Opgetattr.(*nfsv4.Getattr4res_NFS4_OK)
	if ok == nil {
		return raw.EIO
	}
	a, err := client.DecodeAttrs(ok.Resok4.ObjAttributes)
	if err != nil {
		return raw.EIO
	}
	const bs = 4096
	*out = raw.StatfsOut{Files: a.FilesTotal, Ffree: a.FilesFree, NameLen: a.MaxName,
		Blocks: a.SpaceTotal / bs, Bfree: a.SpaceFree / bs, Bavail: a.SpaceAvail / bs, Bsize: bs, Frsize: bs}
	if out.NameLen == 0 {
		out.NameLen = 255
	}
	return raw.OK
}

// newOwner returns a fresh open-owner: every FUSE open is its own NFS
// open state.
func (m *RemoteServer) newOwner() []byte {
	m.handles.Lock()
	m.handles.next++
	k := m.handles.next
	m.handles.Unlock()
	return append(append([]byte(nil), m.c.OpenOwner()...), "/"+strconv.FormatUint(k, 10)...)
}

func parentOf(m *RemoteServer, id uint64) uint64 {
	p, name := m.nodes.nameOf(id)
	if name == "" {
		return 0
	}
	return p
}

// redirected returns the file an open handle of node id serves instead of
// the node's own (reopenByName), or nil.
func (m *RemoteServer) redirected(id uint64) *rnode {
	n := m.node(id)
	m.handles.Lock()
	defer m.handles.Unlock()
	for _, h := range m.handles.m {
		if h.node == id && h.n != n {
			return h.n
		}
	}
	return nil
}

func (m *RemoteServer) handle(fh uint64) *rhandle {
	m.handles.Lock()
	defer m.handles.Unlock()
	return m.handles.m[fh]
}

func (m *RemoteServer) addHandle(h *rhandle) uint64 {
	m.handles.Lock()
	defer m.handles.Unlock()
	m.handles.next++
	m.handles.m[m.handles.next] = h
	return m.handles.next
}

func shareAccess(flags uint32) uint32 {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		if flags&syscall.O_TRUNC != 0 {
			return nfsv4.OPEN4_SHARE_ACCESS_BOTH
		}
		return nfsv4.OPEN4_SHARE_ACCESS_READ
	case syscall.O_WRONLY:
		return nfsv4.OPEN4_SHARE_ACCESS_WRITE
	}
	return nfsv4.OPEN4_SHARE_ACCESS_BOTH
}

func resStateid(r nfsv4.NfsResop4) (nfsv4.Stateid4, bool) {
	if o, ok := r.(*nfsv4.NfsResop4_OP_OPEN); ok {
		if ok, _ := o.Opopen.(*nfsv4.Open4res_NFS4_OK); ok != nil {
			return ok.Resok4.Stateid, true
		}
	}
	return nfsv4.Stateid4{}, false
}

// openFlags returns the FUSE open flags after an open of node id whose
// change attribute is change: the kernel keeps its pages only if the file
// did not change since it last saw its attributes (close-to-open);
// O_APPEND handles use direct I/O so that each write(2) is one atomic
// append.
func (m *RemoteServer) openFlags(id uint64, flags uint32, change uint64) uint32 {
	var f uint32
	if m.nodes.opened(id, change) {
		f |= raw.FOPEN_KEEP_CACHE
	} else {
		m.srv.InodeNotify(id, -1, 0)
	}
	if flags&syscall.O_APPEND != 0 {
		f |= raw.FOPEN_DIRECT_IO
	}
	return f
}

// closeState closes an open state that will not be used (best effort).
func (m *RemoteServer) closeState(cancel <-chan struct{}, h *raw.InHeader, fh []byte, sid nfsv4.Stateid4) {
	var cp client.Compound
	cp.PutFH(fh)
	cp.Close(sid)
	if _, err := m.do(cancel, h, &cp); err != nil {
		m.log.Debug("closing an unused open state", "err", err)
	}
}

// Open implements RawFileSystem: PUTFH OPEN(CLAIM_FH) [SETATTR size 0]
// GETATTR.
func (m *RemoteServer) Open(cancel <-chan struct{}, in *raw.OpenIn, out *raw.OpenOut) raw.Status {
	n := m.node(in.NodeId)
	if n == nil {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(n.fh)
	owner := m.newOwner()
	openAt := cp.Open(m.c.ClientID(), owner, client.OpenArgs{Access: shareAccess(in.Flags)})
	if in.Flags&syscall.O_TRUNC != 0 {
		// POSIX updates mtime and ctime on O_TRUNC even if the file
		// was empty.
		sa := client.SetAttrs{SetSize: true, SetMtime: true}
		cp.SetAttr(client.CurrentStateid, sa.Encode())
	}
	at := cp.GetAttr(client.StatMask)
	rep, err := m.do(cancel, &in.InHeader, &cp)
	if err != nil {
		if rep != nil && len(rep.Results) > openAt+1 {
			if sid, ok := resStateid(rep.Results[openAt]); ok {
				m.closeState(cancel, &in.InHeader, n.fh, sid)
			}
		}
		var se *client.StatusError
		if errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_STALE {
			return m.reopenByName(cancel, in, out)
		}
		return m.status("open", err)
	}
	sid, _ := resStateid(rep.Results[openAt])
	a, err := resAttrs(rep.Results[at])
	if err != nil {
		m.closeState(cancel, &in.InHeader, n.fh, sid)
		return m.status("open", err)
	}
	out.Fh = m.newHandle(in.NodeId, n, in.Flags, owner, &cp, sid)
	out.OpenFlags = m.openFlags(in.NodeId, in.Flags, a.Change)
	return raw.OK
}

// reopenByName opens, by the name it was last looked up by, a file whose
// handle went stale between the kernel's lookup and its open: another
// client replaced it (rename over it, or unlink and create). The Linux
// NFS client opens by name (CLAIM_NULL) and never sees this; FUSE opens
// a node id. The kernel retries a stale open once with a fresh lookup,
// which a busy writer can defeat again, so the open is redirected here
// to the file that now has the name, as an open by name would find it:
// the handle serves the new file with direct I/O (the kernel's pages and
// size belong to the old node) and fstat through it reports the new file.
func (m *RemoteServer) reopenByName(cancel <-chan struct{}, in *raw.OpenIn, out *raw.OpenOut) raw.Status {
	parent, name := m.nodes.nameOf(in.NodeId)
	dir := m.node(parent)
	if dir == nil || name == "" {
		return raw.Status(syscall.ESTALE)
	}
	var cp client.Compound
	cp.PutFH(dir.fh)
	owner := m.newOwner()
	openAt := cp.Open(m.c.ClientID(), owner, client.OpenArgs{Name: name, Access: shareAccess(in.Flags)})
	if in.Flags&syscall.O_TRUNC != 0 {
		sa := client.SetAttrs{SetSize: true, SetMtime: true}
		cp.SetAttr(client.CurrentStateid, sa.Encode())
	}
	fhAt := cp.GetFH()
	at := cp.GetAttr(client.StatMask)
	rep, err := m.do(cancel, &in.InHeader, &cp)
	if err != nil {
		if rep != nil && len(rep.Results) > fhAt {
			if sid, ok := resStateid(rep.Results[openAt]); ok {
				m.closeState(cancel, &in.InHeader, resFH(rep.Results[fhAt]), sid)
			}
		}
		var se *client.StatusError
		if errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_NOENT {
			return raw.Status(syscall.ESTALE) // the kernel looks again
		}
		return m.status("open", err)
	}
	sid, _ := resStateid(rep.Results[openAt])
	fh := resFH(rep.Results[fhAt])
	a, err := resAttrs(rep.Results[at])
	if err != nil || a.Type != nfsv4.NF4REG {
		m.closeState(cancel, &in.InHeader, fh, sid)
		return raw.Status(syscall.ESTALE)
	}
	n := &rnode{fh: fh, fileid: a.FileID}
	out.Fh = m.newHandle(in.NodeId, n, in.Flags, owner, &cp, sid)
	m.nodes.stale(in.NodeId)
	m.srv.InodeNotify(in.NodeId, -1, 0)
	out.OpenFlags = raw.FOPEN_DIRECT_IO
	return raw.OK
}

// Tmpfile implements RawFileSystem: NFS has no unnamed files, so
// open(O_TMPFILE) is EOPNOTSUPP (ENOSYS tells the kernel so, and it stops
// asking).
func (m *RemoteServer) Tmpfile(cancel <-chan struct{}, _ *raw.CreateIn, _ *raw.CreateOut) raw.Status {
	return raw.ENOSYS
}

// Create implements RawFileSystem: PUTFH(dir) OPEN(create) GETFH GETATTR.
// O_EXCL is GUARDED4 (exactly once through the session's reply cache);
// O_TRUNC of an existing file is size 0 in the creation attributes.
func (m *RemoteServer) Create(cancel <-chan struct{}, in *raw.CreateIn, name string, out *raw.CreateOut) raw.Status {
	dir := m.node(in.NodeId)
	if dir == nil {
		return raw.Status(syscall.ESTALE)
	}
	sa := client.SetAttrs{SetMode: true, Mode: in.Mode & 07777}
	if in.Flags&syscall.O_TRUNC != 0 && in.Flags&syscall.O_EXCL == 0 {
		sa.SetSize = true
	}
	var cp client.Compound
	cp.PutFH(dir.fh)
	owner := m.newOwner()
	openAt := cp.Open(m.c.ClientID(), owner, client.OpenArgs{Name: name, Access: shareAccess(in.Flags),
		Create: true, Exclusive: in.Flags&syscall.O_EXCL != 0, CreateAttrs: sa.Encode()})
	fhAt := cp.GetFH()
	at := cp.GetAttr(client.StatMask)
	rep, err := m.do(cancel, &in.InHeader, &cp)
	if err != nil {
		return m.status("create", err)
	}
	sid, _ := resStateid(rep.Results[openAt])
	fh := resFH(rep.Results[fhAt])
	a, err := resAttrs(rep.Results[at])
	if err != nil {
		m.closeState(cancel, &in.InHeader, fh, sid)
		return m.status("create", err)
	}
	m.entry(&out.EntryOut, fh, &a)
	m.nodes.named(out.NodeId, in.NodeId, name)
	n := m.node(out.NodeId)
	out.Fh = m.newHandle(out.NodeId, n, in.Flags, owner, &cp, sid)
	m.nodes.opened(out.NodeId, a.Change)
	if in.Flags&syscall.O_APPEND != 0 {
		out.OpenFlags |= raw.FOPEN_DIRECT_IO
	}
	return raw.OK
}

// Release implements RawFileSystem: COMMIT (if written) and CLOSE.
func (m *RemoteServer) Release(cancel <-chan struct{}, in *raw.ReleaseIn) {
	m.handles.Lock()
	h := m.handles.m[in.Fh]
	delete(m.handles.m, in.Fh)
	m.handles.Unlock()
	if h == nil {
		return
	}
	if in.ReleaseFlags&raw.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		unlock := raw.LkIn{InHeader: in.InHeader, Fh: in.Fh, Owner: in.LockOwner, LkFlags: raw.LK_FLOCK,
			Lk: raw.FileLock{Typ: syscall.F_UNLCK}}
		m.handles.Lock()
		m.handles.m[in.Fh] = h // setLk finds the handle
		m.handles.Unlock()
		m.setLk(nil, &unlock, false)
		m.handles.Lock()
		delete(m.handles.m, in.Fh)
		m.handles.Unlock()
	}
	m.locks.rpc.Lock()
	defer m.locks.rpc.Unlock()
	if m.locks.released(in.Fh, h) {
		// A lock state from this open holds locks (remote_locks.go):
		// the open stays until they are unlocked.
		if err := m.commit(cancel, &in.InHeader, h.n); err != nil {
			m.log.Debug("commit at release failed", "err", err)
		}
		return
	}
	m.closeOpen(cancel, &in.InHeader, h)
	m.locks.wake(h.n) // the CLOSE freed its lock states' locks
}

// closeOpen sends CLOSE of h's open state, after a COMMIT if the file
// has UNSTABLE writes.
func (m *RemoteServer) closeOpen(cancel <-chan struct{}, hdr *raw.InHeader, h *rhandle) {
	if h.write {
		if err := m.commit(cancel, hdr, h.n); err != nil {
			m.log.Debug("commit at close failed", "err", err)
		}
	}
	if _, err := m.doSid(cancel, hdr, func(cp *client.Compound) {
		cp.PutFH(h.n.fh)
		cp.Close(h.stateid())
	}); err != nil {
		m.log.Debug("close failed", "err", err)
	}
}

// Flush implements RawFileSystem (every close(2)): COMMIT of written data,
// so that close-to-open holds with the data durable.
func (m *RemoteServer) Flush(cancel <-chan struct{}, in *raw.FlushIn) raw.Status {
	h := m.handle(in.Fh)
	if h == nil || !h.write {
		return raw.OK
	}
	return m.status("flush", m.commit(cancel, &in.InHeader, h.n))
}

// Fsync implements RawFileSystem: COMMIT.
func (m *RemoteServer) Fsync(cancel <-chan struct{}, in *raw.FsyncIn) raw.Status {
	n := m.node(in.NodeId)
	if n == nil {
		return raw.Status(syscall.ESTALE)
	}
	return m.status("fsync", m.commit(cancel, &in.InHeader, n))
}

// FsyncDir implements RawFileSystem: directory changes are synchronous.
func (m *RemoteServer) FsyncDir(cancel <-chan struct{}, _ *raw.FsyncIn) raw.Status { return raw.OK }

// stateid returns the open stateid for a request's file handle.
func (m *RemoteServer) stateid(fh uint64) (*rhandle, raw.Status) {
	h := m.handle(fh)
	if h == nil {
		return nil, raw.EBADF
	}
	return h, raw.OK
}

// Read implements RawFileSystem: PUTFH READ, split at the server's limit.
func (m *RemoteServer) Read(cancel <-chan struct{}, in *raw.ReadIn, buf []byte) (raw.ReadResult, raw.Status) {
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return nil, st
	}
	buf = buf[:min(len(buf), int(in.Size))]
	n := 0
	for n < len(buf) {
		rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
			cp.PutFH(h.n.fh)
			cp.Read(h.stateid(), in.Offset+uint64(n), uint32(min(len(buf)-n, m.maxRead)))
		})
		if err != nil {
			return nil, m.status("read", err)
		}
		r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_READ)
		ok, _ := r.Opread.(*nfsv4.Read4res_NFS4_OK)
		if ok == nil {
			return nil, raw.EIO
		}
		n += copy(buf[n:], ok.Resok4.Data)
		if ok.Resok4.Eof || len(ok.Resok4.Data) == 0 {
			break
		}
	}
	return raw.ReadResultData(buf[:n]), raw.OK
}

// Write implements RawFileSystem: PUTFH WRITE(UNSTABLE), split at the
// server's limit. On an O_APPEND handle each request is appended at the
// server's end of file: atomically with the append extension (WRITE at
// client.AppendOffset, txnfs servers), else at the size read just before
// (not atomic against other clients).
func (m *RemoteServer) Write(cancel <-chan struct{}, in *raw.WriteIn, data []byte) (uint32, raw.Status) {
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return 0, st
	}
	if h.append {
		return m.appendWrite(cancel, in, h, data)
	}
	done := 0
	for done < len(data) {
		chunk := data[done:min(len(data), done+m.maxWrite)]
		rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
			cp.PutFH(h.n.fh)
			cp.Write(h.stateid(), in.Offset+uint64(done), chunk, false)
		})
		if err != nil {
			return uint32(done), m.status("write", err)
		}
		res := writeResult(rep.Results[1])
		if res == nil || res.Count == 0 || int(res.Count) > len(chunk) {
			return uint32(done), raw.EIO
		}
		full := m.keepUnstable(h, in.Offset+uint64(done), chunk, res)
		done += int(res.Count)
		if full {
			if err := m.commit(cancel, &in.InHeader, h.n); err != nil {
				return uint32(done), m.status("write", err)
			}
		}
	}
	return uint32(done), raw.OK
}

// errShortWrite: the server wrote nothing of a WRITE.
var errShortWrite = errors.New("server wrote 0 bytes")

// writeResult returns the WRITE4resok of r, or nil.
func writeResult(r nfsv4.NfsResop4) *nfsv4.Write4resok {
	w, _ := r.(*nfsv4.NfsResop4_OP_WRITE)
	if w == nil {
		return nil
	}
	ok, _ := w.Opwrite.(*nfsv4.Write4res_NFS4_OK)
	if ok == nil {
		return nil
	}
	return &ok.Resok4
}

func (m *RemoteServer) appendWrite(cancel <-chan struct{}, in *raw.WriteIn, h *rhandle, data []byte) (uint32, raw.Status) {
	if len(data) > m.maxWrite {
		// One request, one atomic append: max_write is the server's.
		return 0, raw.Status(syscall.EFBIG)
	}
	var off uint64 = client.AppendOffset
	if !m.appendExt {
		var cp client.Compound
		cp.PutFH(h.n.fh)
		cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SIZE))
		rep, err := m.do(cancel, &in.InHeader, &cp)
		if err != nil {
			return 0, m.status("write", err)
		}
		a, err := resAttrs(rep.Results[1])
		if err != nil {
			return 0, m.status("write", err)
		}
		off = a.Size
	}
	var at int
	rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
		cp.PutFH(h.n.fh)
		cp.Write(h.stateid(), off, data, false)
		at = cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SIZE))
	})
	if err != nil {
		return 0, m.status("write", err)
	}
	res := writeResult(rep.Results[1])
	if res == nil || int(res.Count) > len(data) {
		return 0, raw.EIO
	}
	cnt := res.Count
	if off != client.AppendOffset && m.keepUnstable(h, off, data, res) {
		if err := m.commit(cancel, &in.InHeader, h.n); err != nil {
			return cnt, m.status("write", err)
		}
	}
	if a, err := resAttrs(rep.Results[at]); err == nil && a.Size != in.Offset+uint64(cnt) {
		// The kernel computed the offset from a stale size: drop its
		// idea of the size (attributes only: safe from a request).
		m.srv.InodeNotify(in.NodeId, -1, 0)
	}
	return cnt, raw.OK
}

// Fallocate implements RawFileSystem with ALLOCATE (mode 0) and
// DEALLOCATE (PUNCH_HOLE, ZERO_RANGE).
func (m *RemoteServer) Fallocate(cancel <-chan struct{}, in *raw.FallocateIn) raw.Status {
	dealloc, alloc, st := fallocMode(in)
	if st != raw.OK {
		return st
	}
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return st
	}
	if !dealloc && !alloc {
		return raw.OK // KEEP_SIZE alone: nothing is reserved
	}
	if err := m.commit(cancel, &in.InHeader, h.n); err != nil {
		return m.status("fallocate", err)
	}
	_, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
		cp.PutFH(h.n.fh)
		sid := h.stateid()
		if dealloc {
			cp.Add(&nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{DaStateid: sid, DaOffset: in.Offset, DaLength: in.Length}})
		}
		if alloc {
			cp.Add(&nfsv4.NfsArgop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4args{AaStateid: sid, AaOffset: in.Offset, AaLength: in.Length}})
		}
	})
	return m.status("fallocate", err)
}

// CopyFileRange implements RawFileSystem with an intra-server COPY
// (metadata-only on txnfs).
func (m *RemoteServer) CopyFileRange(cancel <-chan struct{}, in *raw.CopyFileRangeIn) (uint32, raw.Status) {
	if in.Flags != 0 {
		return 0, raw.EINVAL
	}
	n := min(in.Len, maxCopy)
	if n == 0 {
		return 0, raw.OK
	}
	src, st := m.stateid(in.FhIn)
	if st != raw.OK {
		return 0, st
	}
	dst, st := m.stateid(in.FhOut)
	if st != raw.OK {
		return 0, st
	}
	// The server copies what it has: the source's writes must be
	// durable, and the destination's must not be sent again over the
	// copy after a server restart (remote_unstable.go).
	for _, n := range []*rnode{src.n, dst.n} {
		if err := m.commit(cancel, &in.InHeader, n); err != nil {
			return 0, m.status("copy_file_range", err)
		}
	}
	// A COPY answered UNSTABLE4 is not among the writes
	// remote_unstable.go can send again after a server restart, so it
	// is committed in the same COMPOUND (one server instance answers
	// both; the Linux client sends a COMMIT right after such a COPY).
	// txnfs answers COPY with FILE_SYNC4 and needs none.
	commit := !m.appendExt
	rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
		cp.PutFH(src.n.fh)
		cp.SaveFH()
		cp.PutFH(dst.n.fh)
		cp.Copy(src.stateid(), dst.stateid(), in.OffIn, in.OffOut, n)
		if commit {
			cp.Commit()
		}
	})
	if err != nil {
		return 0, m.status("copy_file_range", err)
	}
	r, _ := rep.Results[3].(*nfsv4.NfsResop4_OP_COPY)
	ok, _ := r.Opcopy.(*nfsv4.Copy4res_NFS4_OK)
	if ok == nil {
		return 0, raw.EIO
	}
	if res := ok.CrResok4.CrResponse; res.WrCommitted != nfsv4.FILE_SYNC4 && !commit {
		m.log.Error("server answered COPY with UNSTABLE4 without a COMMIT in the COMPOUND", "node", dst.n.fileid)
		return 0, raw.EIO
	}
	return uint32(ok.CrResok4.CrResponse.WrCount), raw.OK
}

// OpenDir implements RawFileSystem; the kernel checked type and access.
func (m *RemoteServer) OpenDir(cancel <-chan struct{}, in *raw.OpenIn, out *raw.OpenOut) raw.Status {
	if m.node(in.NodeId) == nil {
		return raw.Status(syscall.ESTALE)
	}
	return raw.OK
}

// ReleaseDir implements RawFileSystem.
func (m *RemoteServer) ReleaseDir(*raw.ReleaseIn) {}

// ReadDir implements RawFileSystem.
func (m *RemoteServer) ReadDir(cancel <-chan struct{}, in *raw.ReadIn, out *raw.DirEntryList) raw.Status {
	return m.readDir(cancel, in, out, false)
}

// ReadDirPlus implements RawFileSystem: READDIR with the file handle and
// stat attributes of each entry.
func (m *RemoteServer) ReadDirPlus(cancel <-chan struct{}, in *raw.ReadIn, out *raw.DirEntryList) raw.Status {
	return m.readDir(cancel, in, out, true)
}

var (
	readdirMask     = client.MakeBitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_FILEID)
	readdirPlusMask = append(client.Bitmap(nil), client.StatMask...).With(nfsv4.FATTR4_FILEHANDLE)
)

// readDir lists a directory. FUSE offsets: "." is 1, ".." is 2, every
// other entry is at its NFS cookie (servers start cookies at 3, since 1
// and 2 are reserved in NFSv4).
func (m *RemoteServer) readDir(cancel <-chan struct{}, in *raw.ReadIn, out *raw.DirEntryList, plus bool) raw.Status {
	dir := m.node(in.NodeId)
	if dir == nil {
		return raw.Status(syscall.ESTALE)
	}
	off := in.Offset
	// "." and "..": with plus, entries without attributes (the kernel
	// takes no reference on them). ".." shows the directory's own number:
	// finding the parent would cost a LOOKUPP per listing.
	dot := func(name string, off uint64) bool {
		e := raw.DirEntry{Name: name, Ino: dir.fileid, Mode: syscall.S_IFDIR, Off: off}
		if plus {
			return out.AddDirLookupEntry(e) != nil
		}
		return out.AddDirEntry(e)
	}
	if off < offDot && !dot(".", offDot) {
		return raw.OK
	}
	if off < offDotDot && !dot("..", offDotDot) {
		return raw.OK
	}
	cookie := uint64(0)
	if off > offDotDot {
		cookie = off
	}
	mask := readdirMask
	if plus {
		mask = readdirPlusMask
	}
	size := max(int(in.Size), 4096)
	var verf [8]byte
	if cookie != 0 {
		m.nodes.mu.Lock()
		verf = dir.verf
		m.nodes.mu.Unlock()
	}
	var cp client.Compound
	cp.PutFH(dir.fh)
	cp.Readdir(cookie, verf, uint32(size), uint32(min(4*size, m.maxRead)), mask)
	rep, err := m.do(cancel, &in.InHeader, &cp)
	if err != nil {
		return m.status("readdir", err)
	}
	r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_READDIR)
	ok, _ := r.Opreaddir.(*nfsv4.Readdir4res_NFS4_OK)
	if ok == nil {
		return raw.EIO
	}
	m.nodes.mu.Lock()
	dir.verf = ok.Resok4.Cookieverf
	m.nodes.mu.Unlock()
	for e := ok.Resok4.Reply.Entries; e != nil; e = e.Nextentry {
		a, err := client.DecodeAttrs(e.Attrs)
		if err != nil {
			return m.status("readdir", err)
		}
		de := raw.DirEntry{Name: e.Name, Ino: a.FileID, Mode: remoteTypeBits(a.Type), Off: e.Cookie}
		if !plus {
			if !out.AddDirEntry(de) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(de)
		if eo == nil {
			break
		}
		if len(a.Handle) > 0 && a.Mask.Has(nfsv4.FATTR4_CHANGE) && a.Error == nfsv4.NFS4_OK {
			m.entry(eo, a.Handle, &a)
		}
	}
	return raw.OK
}

// Mounted is a served mount, local (Server) or remote (RemoteServer).
type Mounted interface {
	Dir() string
	Wait()
	Unmount() error
}

var (
	_ Mounted = (*Server)(nil)
	_ Mounted = (*RemoteServer)(nil)
)

// Lseek implements RawFileSystem for SEEK_DATA and SEEK_HOLE (SEEK).
func (m *RemoteServer) Lseek(cancel <-chan struct{}, in *raw.LseekIn, out *raw.LseekOut) raw.Status {
	var what nfsv4.DataContent4
	switch in.Whence {
	case seekData:
		what = nfsv4.NFS4_CONTENT_DATA
	case seekHole:
		what = nfsv4.NFS4_CONTENT_HOLE
	default:
		return raw.EINVAL
	}
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return st
	}
	rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
		cp.PutFH(h.n.fh)
		cp.Add(&nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaStateid: h.stateid(), SaOffset: in.Offset, SaWhat: what}})
	})
	if err != nil {
		return m.status("lseek", err)
	}
	r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_SEEK)
	ok, _ := r.Opseek.(*nfsv4.Seek4res_NFS4_OK)
	if ok == nil {
		return raw.EIO
	}
	if what == nfsv4.NFS4_CONTENT_DATA && ok.Resok4.SrEof {
		return raw.Status(syscall.ENXIO)
	}
	out.Offset = ok.Resok4.SrOffset
	return raw.OK
}

// shutdownTimeout bounds the COMPOUNDs a remote mount sends when it ends
// (CLOSE of open files, sandbox abort).
const shutdownTimeout = 10 * time.Second

// requestContext is the context of a request's COMPOUNDs. For a soft
// client it is the mount's. A hard client (client.Config.Hard) waits for
// an unreachable server as long as its context lives, so for it the
// context also ends once the request was interrupted (go-fuse closes
// cancel on FUSE_INTERRUPT and when the mount is aborted) and its caller
// no longer waits for the answer: killed, or released by `txnfs umount
// --force`. Other signals interrupt too (the kernel sends FUSE_INTERRUPT
// for any signal, e.g. Go's preemption signal), but the kernel keeps
// waiting for those, so the request must not fail: the NFS "hard"
// semantics, where only a fatal signal ends a wait.
func (m *RemoteServer) requestContext(cancel <-chan struct{}, tid uint32) (context.Context, func()) {
	if !m.c.Hard() || cancel == nil {
		return m.ctx, func() {}
	}
	ctx, stop := context.WithCancel(m.ctx)
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-cancel:
		}
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for callerWaits(tid) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		stop()
	}()
	return ctx, stop
}

// callerWaits reports whether thread tid still waits for a FUSE answer:
// it is blocked in the FUSE request wait (wchan) without a pending
// SIGKILL. (The kernel cannot abandon a request the daemon already read:
// a killed caller stays in uninterruptible sleep until it is answered.)
func callerWaits(tid uint32) bool {
	dir := "/proc/" + strconv.FormatUint(uint64(tid), 10)
	w, err := os.ReadFile(dir + "/wchan")
	if err != nil || !strings.Contains(string(w), "request_wait_answer") && !strings.Contains(string(w), "fuse") {
		return false
	}
	st, err := os.ReadFile(dir + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(st), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "SigPnd" && k != "ShdPnd" {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return false
		}
	}
	return true
}
