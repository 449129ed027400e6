package fuse

import (
	"errors"
	"sync"
	"syscall"
	"time"
	"unsafe"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/nfs4/client"
)

// The sandbox of a remote mount is a server-side multi-compound
// transaction (docs/protocol.md): Begin opens one, every COMPOUND of the
// mount then joins it, Commit or Abort ends it. It is controlled by the
// same ioctl as a local mount's sandbox (see Control).

// errRemoteNoTxn: the client library or the server lacks multi-compound
// transactions.
var errRemoteNoTxn = errors.New("a sandbox on a remote mount needs server-side multi-compound transactions " +
	"(txnfs protocol extension), which this NFS client or server does not provide")

// remoteSandbox is a remote mount's sandbox state. Requests hold gate
// shared while they run; Begin, Commit and Abort hold it exclusively.
// mu serializes requests inside a transaction.
type remoteSandbox struct {
	gate   sync.RWMutex
	mu     sync.Mutex
	active bool
	id     client.TxnID
	since  time.Time
	ops    int
}

// join makes cp part of the active transaction, if any, and returns the
// function to call once cp's reply is in (ran: the COMPOUND executed).
func (s *remoteSandbox) join(cp *client.Compound) func(ran bool) {
	s.gate.RLock()
	if !s.active {
		return func(bool) { s.gate.RUnlock() }
	}
	s.mu.Lock()
	s.ops++
	cp.TxnID = s.id
	return func(bool) {
		s.mu.Unlock()
		s.gate.RUnlock()
	}
}

func (m *RemoteServer) sandboxBegin() error {
	m.sb.gate.Lock()
	defer m.sb.gate.Unlock()
	if m.sb.active {
		return errSandboxActive
	}
	id, err := m.c.TxnBegin(m.ctx)
	if errors.Is(err, client.ErrTxnUnsupported) {
		return errRemoteNoTxn
	}
	if err != nil {
		return err
	}
	m.sb.active, m.sb.id, m.sb.since, m.sb.ops = true, id, time.Now(), 0
	m.sbActive.Store(true)
	m.log.Info("sandbox begun", "txn", id)
	return nil
}

// sandboxEnd commits or aborts the sandbox's transaction. Either way the
// sandbox is over afterwards (except on a transport error, when the
// outcome is unknown and the transaction is abandoned: the server aborts
// it when it expires).
func (m *RemoteServer) sandboxEnd(commit bool) error {
	m.sb.gate.Lock()
	defer m.sb.gate.Unlock()
	if !m.sb.active {
		return errNoSandbox
	}
	err := m.c.TxnEnd(m.ctx, m.sb.id, commit)
	m.log.Info("sandbox ended", "txn", m.sb.id, "commit", commit, "operations", m.sb.ops, "err", err)
	m.sb.active, m.sb.id = false, client.TxnID{}
	m.sbActive.Store(false)
	return err
}

func (m *RemoteServer) abortSandboxAtExit() {
	m.sb.gate.Lock()
	defer m.sb.gate.Unlock()
	if m.sb.active {
		m.log.Warn("unmounted with an active sandbox: aborting it", "operations", m.sb.ops)
		if err := m.c.TxnEnd(m.ctx, m.sb.id, false); err != nil {
			m.log.Warn("aborting the sandbox", "err", err)
		}
		m.sb.active = false
	}
}

// invalidateAll drops everything this mount's kernel caches.
func (m *RemoteServer) invalidateAll() {
	<-m.notify.pushDone(&invalidation{inos: m.nodes.known()})
}

// Status reports the sandbox state.
func (m *RemoteServer) Status() SandboxStatus {
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	if !m.sb.active {
		return SandboxStatus{}
	}
	m.sb.mu.Lock()
	defer m.sb.mu.Unlock()
	return SandboxStatus{Active: true, Since: m.sb.since, Ops: m.sb.ops}
}

// Ioctl implements RawFileSystem: the sandbox control ioctl (ctlMsg, as
// for a local mount); anything else is ENOTTY.
func (m *RemoteServer) Ioctl(_ <-chan struct{}, in *raw.IoctlIn, inbuf []byte, out *raw.IoctlOut, outbuf []byte) raw.Status {
	if in.Cmd != ctlCmd || len(inbuf) < ctlSize || len(outbuf) < ctlSize {
		return raw.Status(syscall.ENOTTY)
	}
	if in.Uid != 0 && in.Uid != m.uid {
		return raw.EPERM
	}
	req := *(*ctlMsg)(unsafe.Pointer(&inbuf[0]))
	var err error
	switch req.Op {
	case ctlBegin:
		if err = m.sandboxBegin(); err == nil {
			m.invalidateAll()
		}
	case ctlCommit, ctlAbort:
		err = m.sandboxEnd(req.Op == ctlCommit)
		// Drop what the kernel cached from inside the sandbox (after
		// abort it is gone; after a failed commit too).
		m.invalidateAll()
	case ctlStatus:
	default:
		return raw.EINVAL
	}
	rep := ctlMsg{Op: req.Op}
	if err != nil {
		var e syscall.Errno
		var ce *client.TxnConflictError
		msg := err.Error()
		switch {
		case errors.Is(err, errRemoteNoTxn):
			e = syscall.EOPNOTSUPP
		case errors.As(err, &ce):
			e = syscall.EBUSY
			msg = "conflict: a concurrent change altered what the sandbox had read; nothing was committed (" + ce.Report + ")"
		case errors.Is(err, errNoSandbox), errors.Is(err, errSandboxActive):
			e = errnoOf(m.cfg.Logger, "sandbox", err)
		case errors.Is(err, client.ErrTxnExpired):
			e = syscall.ESTALE
		default:
			e = syscall.Errno(m.status("sandbox", err))
		}
		rep.Errno = uint32(e)
		copy(rep.Msg[:len(rep.Msg)-1], msg)
	}
	if st := m.Status(); st.Active {
		rep.Active, rep.Ops, rep.Since = 1, uint64(st.Ops), st.Since.UnixNano()
	}
	copy(outbuf, unsafe.Slice((*byte)(unsafe.Pointer(&rep)), ctlSize))
	out.Result = 0
	return raw.OK
}
