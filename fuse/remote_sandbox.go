package fuse

import (
	"errors"
	"sync"
	"syscall"
	"time"

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

// Ioctl implements RawFileSystem: the sandbox control ioctl (as for a
// local mount); anything else is ENOTTY.
func (m *RemoteServer) Ioctl(cancel <-chan struct{}, in *raw.IoctlIn, inbuf []byte, out *raw.IoctlOut, outbuf []byte) raw.Status {
	return controlIoctl(m, m.uid, in, inbuf, out, outbuf)
}

// sandboxOp runs a begin, commit or abort request of the control ioctl.
func (m *RemoteServer) sandboxOp(op uint32) error {
	if op == ctlBegin {
		err := m.sandboxBegin()
		if err == nil {
			m.invalidateAll()
		}
		return err
	}
	err := m.sandboxEnd(op == ctlCommit)
	// Drop what the kernel cached from inside the sandbox (after abort
	// it is gone; after a failed commit too).
	m.invalidateAll()
	return err
}

// ctlError is the errno and message the control ioctl reports for err.
func (m *RemoteServer) ctlError(err error) (syscall.Errno, string) {
	var ce *client.TxnConflictError
	switch {
	case errors.Is(err, errRemoteNoTxn):
		return syscall.EOPNOTSUPP, err.Error()
	case errors.As(err, &ce):
		return syscall.EBUSY, "conflict: a concurrent change altered what the sandbox had read; nothing was committed (" + ce.Report + ")"
	case errors.Is(err, errNoSandbox), errors.Is(err, errSandboxActive):
		return errnoOf(m.cfg.Logger, "sandbox", err), err.Error()
	case errors.Is(err, client.ErrTxnExpired):
		return syscall.ESTALE, err.Error()
	}
	return syscall.Errno(m.status("sandbox", err)), err.Error()
}
