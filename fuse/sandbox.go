package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	raw "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
)

// The sandbox (WTF §4.1, Fig. 8): between Begin and Commit every request
// of the mount runs in one long-lived engine transaction, so its changes
// are invisible to every other mount and client; Commit makes all of them
// visible atomically (the engine replays the operation log on conflict and
// fails only if a replayed result differs); Abort discards them.
//
// On a mount with the kernel's writeback cache (Config.Writeback) three
// more things are needed, since the kernel holds written data and owns
// regular files' sizes, mtimes and ctimes there:
//   - Begin, Commit and Abort first have the kernel write back the
//     mount's dirty pages and times (flushKernel), so that what was
//     written before Begin commits outside the sandbox and what was
//     written inside reaches the sandbox before it ends;
//   - Abort (and a failed Commit) drop the pages, as on any mount;
//   - the kernel never takes a server's size, mtime or ctime for a regular
//     file it holds, so Abort retires its inodes of the regular files the
//     sandbox changed (retire): they are replaced by new ones made from
//     the engine's attributes, and descriptors open on them fail with EIO.

var (
	errNoSandbox     = errors.New("no sandbox is active")
	errSandboxActive = errors.New("a sandbox is already active")
	// Retiring the kernel's inodes at abort needs FUSE_NOTIFY_INC_EPOCH.
	errWritebackSandbox = errors.New("a sandbox on a --writeback mount needs FUSE protocol 7.44 " +
		"(Linux 6.16 or later) to restore the kernel's file sizes at abort")
)

// writebackSandboxOK reports whether a kernel that sent init can retire
// inodes at abort (see retire): it takes FUSE_NOTIFY_INC_EPOCH.
func writebackSandboxOK(init *raw.InitIn) bool { return init.SupportsVersion(7, 44) }

// sandbox is the state of a mount's sandbox.
//
// Lock order: gate before mu. Requests hold gate shared for their whole
// duration; Begin, Commit and Abort hold it exclusively, so they wait for
// requests in flight and requests wait for them. mu serializes requests
// on the one transaction (an fs.Txn is not safe for concurrent use).
type sandbox struct {
	gate sync.RWMutex
	mu   sync.Mutex

	// Guarded by gate (written with gate held exclusively); ops and
	// touched are also guarded by mu.
	txn     *fs.Txn
	since   time.Time
	ops     int
	touched invalidation
}

// SandboxStatus describes a mount's sandbox.
type SandboxStatus struct {
	Active bool
	Since  time.Time // when Begin was called
	Ops    int       // modifying requests run in the sandbox
}

func (m *Server) begin() error {
	if m.cfg.Writeback && !writebackSandboxOK(m.srv.KernelSettings()) {
		return errWritebackSandbox
	}
	if err := m.flushKernel(); err != nil {
		return err
	}
	m.sb.gate.Lock()
	defer m.sb.gate.Unlock()
	if m.sb.txn != nil {
		return errSandboxActive
	}
	// Writes answered before Begin commit outside the sandbox; none is
	// queued after (a WRITE checks for the sandbox under the gate).
	m.waitWrites()
	// No mirrors in a sandbox: its reads must enter its read set.
	if err := m.mirrors.suspend(); err != nil {
		return err
	}
	t, err := m.eng.Begin(m.ctx, fs.RootCred, fs.TxnOptions{})
	if err != nil {
		m.mirrors.resume()
		return err
	}
	m.sb.txn, m.sb.since, m.sb.ops, m.sb.touched = t, time.Now(), 0, invalidation{}
	m.log.Info("sandbox begun")
	return nil
}

// Begin starts a sandbox on m. Everything the kernel caches is then
// dropped (after the gate is released: see invalidateAll), so that what
// the sandbox reads goes through its transaction at least once and enters
// its read set, which Commit checks for conflicts.
func (m *Server) Begin() error {
	if err := m.begin(); err != nil {
		return err
	}
	m.invalidateAll(&invalidation{})
	return nil
}

// Commit commits the sandbox: all its changes become visible at once, or
// none does (the error then wraps fs.ErrConflict, or the I/O error) and
// the mount shows the committed state again.
func (m *Server) Commit() error {
	if !m.inSandbox() {
		return errNoSandbox
	}
	if err := m.flushKernel(); err != nil {
		return err // still active: the caller may retry or abort
	}
	m.sb.gate.Lock()
	t, touched, ops := m.sb.txn, m.sb.touched, m.sb.ops
	if t == nil {
		m.sb.gate.Unlock()
		return errNoSandbox
	}
	err := t.Commit(m.ctx)
	var retired []fs.Ino
	if err != nil {
		retired = m.retire(&touched)
	}
	m.sb.txn, m.sb.touched = nil, invalidation{}
	m.mirrors.resume()
	m.sb.gate.Unlock()
	if err != nil {
		m.log.Warn("sandbox commit failed; its changes are discarded", "operations", ops, "err", err)
		m.forgetRetired(retired)
		m.invalidateAll(&touched)
		return err
	}
	m.log.Info("sandbox committed", "operations", ops)
	if m.cfg.Group != nil {
		// The other mounts see the changes when Commit returns.
		m.cfg.Group.broadcastWait(m, &touched)
	}
	return nil
}

// Abort discards the sandbox's changes.
func (m *Server) Abort() error {
	if !m.inSandbox() {
		return errNoSandbox
	}
	if err := m.flushKernel(); err != nil {
		// Pages it could not write back are dropped below (or fail
		// with their retired inodes); the abort goes on.
		m.log.Warn("sandbox abort: writing back the kernel's dirty pages", "err", err)
	}
	m.sb.gate.Lock()
	t, touched, ops := m.sb.txn, m.sb.touched, m.sb.ops
	if t == nil {
		m.sb.gate.Unlock()
		return errNoSandbox
	}
	t.Abort()
	retired := m.retire(&touched)
	m.sb.txn, m.sb.touched = nil, invalidation{}
	m.mirrors.resume()
	m.sb.gate.Unlock()
	m.log.Info("sandbox aborted", "operations", ops)
	m.forgetRetired(retired)
	m.invalidateAll(&touched)
	return nil
}

// flushKernel has the kernel write back the mount's dirty pages and the
// times it owns, under the writeback cache (other mounts have neither),
// and returns once the mount has answered those WRITE and SETATTR
// requests. It must be called without the sandbox gate, which they take.
//
// syncfs alone is not enough: it starts the writeback of every dirty
// inode and sends the kernel's times (SETATTR, fuse_write_inode), but
// this kernel (6.18) does not wait for a FUSE mount's pages under
// writeback (their WRITEs are background requests), so a WRITE could
// still arrive after Begin and land in the sandbox (measured: 17 of 30
// rewrites of one file not yet in the engine when syncfs returned).
// Dirty pages only exist for files open for writing (the kernel writes a
// file back at its last close, fuse_flush; a mapping holds its file
// open), so invalidating those files' pages finishes the job: the kernel
// waits for pages under writeback and writes still dirty ones back
// (fuse_launder_folio) before dropping them.
func (m *Server) flushKernel() error {
	if !m.cfg.Writeback {
		return nil
	}
	err := syncMount(m.dir)
	<-m.notify.pushDone(&invalidation{inos: m.handles.writableInos()})
	if err != nil {
		return fmt.Errorf("writing back the kernel's dirty pages of the mount: %w", err)
	}
	return nil
}

// retire retires the kernel's inodes of the regular files the sandbox
// changed (touched), under the writeback cache, where the kernel keeps
// its own size, mtime and ctime of a regular file whatever the mount
// reports. Called with the gate held exclusively, so that every request
// after the sandbox ends sees it. From then on, until the mount answers
// an entry (LOOKUP, READDIRPLUS, CREATE...) for such a file, requests for
// it come from the retired kernel inode and fail (nodeTable.isRetired,
// checked by the handlers of requests for a regular file): a GETATTR or
// SETATTR gets attributes the kernel rejects (retiredAttr), which makes
// it mark the inode bad (EIO for every later use; fuse_make_bad), the
// others (OPEN, READ, WRITE, FALLOCATE, COPY_FILE_RANGE) EIO. The entry
// carries a new generation, and the kernel, finding its inode of that
// node id with another generation, marks it bad and makes a new one from
// the engine's attributes (fuse_stale_inode in fuse_iget).
// forgetRetired then has the kernel look its cached names up again, so
// that the next path walk reaches the new inode.
func (m *Server) retire(touched *invalidation) []fs.Ino {
	if !m.cfg.Writeback {
		return nil
	}
	return m.nodes.retire(touched.inos)
}

// forgetRetired makes the kernel revalidate every dentry it cached
// (FUSE_NOTIFY_INC_EPOCH) once inodes were retired: a dentry whose entry
// timeout has not expired would otherwise lead path walks to the retired
// inode (and its first GETATTR to EIO) instead of a LOOKUP.
func (m *Server) forgetRetired(retired []fs.Ino) {
	if len(retired) == 0 {
		return
	}
	if err := incEpoch(m.srv); err != nil {
		m.log.Warn("sandbox: the kernel did not take FUSE_NOTIFY_INC_EPOCH; cached names of files the sandbox changed "+
			"lead to EIO until their entry timeout", "retired", len(retired), "err", err)
	}
}

// retiredAttr answers a GETATTR or SETATTR from a retired kernel inode
// with attributes of no file type, which the kernel rejects by marking
// the inode bad (fuse_invalid_attr).
func retiredAttr(out *raw.AttrOut) raw.Status {
	*out = raw.AttrOut{}
	return raw.OK
}

// Status reports the sandbox state.
func (m *Server) Status() SandboxStatus {
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	if m.sb.txn == nil {
		return SandboxStatus{}
	}
	m.sb.mu.Lock()
	defer m.sb.mu.Unlock()
	return SandboxStatus{Active: true, Since: m.sb.since, Ops: m.sb.ops}
}

// invalidateAll drops everything this mount's kernel caches: the names
// the sandbox touched (they may exist again, or no longer) and the
// attributes and pages of every inode the kernel knows. It waits for the
// kernel, so it must be called without the gate: invalidating pages waits
// for page locks that requests in flight hold while they wait for it.
func (m *Server) invalidateAll(touched *invalidation) {
	m.nodes.resetChanges()
	inv := &invalidation{entries: touched.entries, inos: m.nodes.known()}
	<-m.notify.pushDone(inv)
}

// The control ioctl: an _IOWR ioctl, with a ctlMsg, on the mount point (or
// any file or directory of the mount). Only root and the user who mounted
// may issue it.
const (
	ctlType = 0xb7 // ioctl "magic" byte
	ctlNr   = 0x01

	ctlBegin  = 1
	ctlCommit = 2
	ctlAbort  = 3
	ctlStatus = 4
)

// ctlMsg is the ioctl argument: Op is set by the caller, the rest is the
// reply.
type ctlMsg struct {
	Op     uint32
	Errno  uint32 // 0 or the errno of a failed Op
	Active uint32 // 1 if a sandbox is active after Op
	_      uint32
	Ops    uint64    // requests run in the sandbox
	Since  int64     // Unix nanoseconds at Begin
	Msg    [224]byte // NUL-terminated detail
}

const ctlSize = int(unsafe.Sizeof(ctlMsg{}))

// ctlCmd is _IOWR(ctlType, ctlNr, ctlMsg).
const ctlCmd = (3 << 30) | uint32(ctlSize)<<16 | ctlType<<8 | ctlNr

// Ioctl implements RawFileSystem: the sandbox control ioctl; anything else
// is ENOTTY.
func (m *Server) Ioctl(_ <-chan struct{}, in *raw.IoctlIn, inbuf []byte, out *raw.IoctlOut, outbuf []byte) raw.Status {
	return controlIoctl(m, m.uid, in, inbuf, out, outbuf)
}

// sandboxOp runs a begin, commit or abort request of the control ioctl.
func (m *Server) sandboxOp(op uint32) error {
	switch op {
	case ctlBegin:
		return m.Begin()
	case ctlCommit:
		return m.Commit()
	}
	return m.Abort()
}

// ctlError is the errno and message the control ioctl reports for err.
func (m *Server) ctlError(err error) (syscall.Errno, string) {
	msg := err.Error()
	if errors.Is(err, fs.ErrConflict) {
		msg = "conflict: a concurrent change altered what the sandbox had read; nothing was committed (" + err.Error() + ")"
	}
	return errnoOf(m.log, "sandbox", err), msg
}

// sandboxController is a mount whose sandbox the control ioctl drives
// (Server, RemoteServer).
type sandboxController interface {
	sandboxOp(op uint32) error // ctlBegin, ctlCommit or ctlAbort
	ctlError(err error) (syscall.Errno, string)
	Status() SandboxStatus
}

// controlIoctl serves the control ioctl for a mount: one place for its
// wire format and checks. Only root and owner (the user who mounted) may
// issue it.
func controlIoctl(c sandboxController, owner uint32, in *raw.IoctlIn, inbuf []byte, out *raw.IoctlOut, outbuf []byte) raw.Status {
	if in.Cmd != ctlCmd || len(inbuf) < ctlSize || len(outbuf) < ctlSize {
		return raw.Status(syscall.ENOTTY)
	}
	if in.Uid != 0 && in.Uid != owner {
		return raw.EPERM
	}
	req := *(*ctlMsg)(unsafe.Pointer(&inbuf[0]))
	var err error
	switch req.Op {
	case ctlBegin, ctlCommit, ctlAbort:
		err = c.sandboxOp(req.Op)
	case ctlStatus:
	default:
		return raw.EINVAL
	}
	rep := ctlMsg{Op: req.Op}
	if err != nil {
		e, msg := c.ctlError(err)
		rep.Errno = uint32(e)
		copy(rep.Msg[:len(rep.Msg)-1], msg)
	}
	if st := c.Status(); st.Active {
		rep.Active, rep.Ops, rep.Since = 1, uint64(st.Ops), st.Since.UnixNano()
	}
	copy(outbuf, unsafe.Slice((*byte)(unsafe.Pointer(&rep)), ctlSize))
	out.Result = 0
	return raw.OK
}

// SandboxOp names a sandbox control operation for Control.
type SandboxOp int

// Sandbox control operations.
const (
	OpBegin  SandboxOp = ctlBegin
	OpCommit SandboxOp = ctlCommit
	OpAbort  SandboxOp = ctlAbort
	OpStatus SandboxOp = ctlStatus
)

// ParseSandboxOp parses "begin", "commit", "abort" or "status".
func ParseSandboxOp(s string) (SandboxOp, error) {
	switch s {
	case "begin":
		return OpBegin, nil
	case "commit":
		return OpCommit, nil
	case "abort":
		return OpAbort, nil
	case "status":
		return OpStatus, nil
	}
	return 0, fmt.Errorf("unknown sandbox operation %q (want begin, commit, abort or status)", s)
}

// SandboxError is a failed sandbox operation reported by a mount.
type SandboxError struct {
	Errno syscall.Errno
	Msg   string
}

func (e *SandboxError) Error() string { return e.Msg }

// Unwrap lets errors.Is match the errno (e.g. syscall.EBUSY: conflict).
func (e *SandboxError) Unwrap() error { return e.Errno }

// Control sends a sandbox operation to the txnfs mount that path is on
// (the mount point, typically) and returns the sandbox status after it.
func Control(path string, op SandboxOp) (SandboxStatus, error) {
	f, err := os.Open(path)
	if err != nil {
		return SandboxStatus{}, err
	}
	defer f.Close()
	msg := ctlMsg{Op: uint32(op)}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(ctlCmd), uintptr(unsafe.Pointer(&msg))); e != 0 {
		if e == syscall.ENOTTY || e == syscall.ENOSYS || e == syscall.EINVAL {
			return SandboxStatus{}, fmt.Errorf("%s is not a txnfs mount: %w", path, e)
		}
		return SandboxStatus{}, fmt.Errorf("sandbox control on %s: %w", path, e)
	}
	st := SandboxStatus{Active: msg.Active != 0, Ops: int(msg.Ops)}
	if st.Active {
		st.Since = time.Unix(0, msg.Since)
	}
	if msg.Errno != 0 {
		text := string(msg.Msg[:])
		if i := bytes.IndexByte(msg.Msg[:], 0); i >= 0 {
			text = string(msg.Msg[:i])
		}
		return st, &SandboxError{Errno: syscall.Errno(msg.Errno), Msg: text}
	}
	return st, nil
}
