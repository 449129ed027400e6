package fuse

import (
	"errors"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/nfs4/client"
)

// Locks on a remote mount are NFS byte-range locks (LOCK, LOCKT, LOCKU),
// so they hold between clients. Each kernel lock owner (a process's
// files_struct for POSIX locks, an open file description for flock) is an
// NFS lock-owner; flock locks are whole-file locks, as the Linux NFS
// client makes them. A lock-owner's lock state on a file comes from the
// open state of the descriptor it first locked through (open_to_lock_owner)
// and is forgotten when that descriptor is released: the kernel has
// released the owner's POSIX locks on the file by then (closing any
// descriptor does), and an flock owner is that descriptor.

// lockKey names a lock-owner's lock state on a file.
type lockKey struct {
	n     *rnode
	owner uint64
}

type lockState struct {
	sid  nfsv4.Stateid4
	fh   uint64      // the FUSE handle whose open state it came from
	held []heldRange // what the server granted, for reclaim (remote_reclaim.go)
}

// remoteLocks is the lock-state table of a mount.
//
// The server frees a lock state with the open it came from, and with it
// all of its lock-owner's locks on the file. RELEASE is asynchronous: a
// process can close a descriptor (the kernel unlocks its POSIX locks on
// the file at once) and lock again through another descriptor, with the
// same lock-owner and so the same lock state, before the first one's
// RELEASE arrives. That RELEASE then keeps its open state (the handle
// lingers) until the lock state holds no more locks, instead of closing
// it and dropping the new lock (TestRemoteLocks caught it, rarely).
type remoteLocks struct {
	// rpc orders LOCK and LOCKU with the release of the open states
	// lock states come from (held across those RPCs).
	rpc sync.Mutex
	mu  sync.Mutex
	m   map[lockKey]lockState
	// lingering are released handles whose open state is kept because a
	// lock state from it holds locks.
	lingering map[uint64]*rhandle
	// freed has, per file, a channel closed when this mount releases
	// locks on it (LOCKU, CLOSE): blocked F_SETLKW requests of the mount
	// retry at once instead of at their next poll.
	freed map[*rnode]chan struct{}
}

// freedCh returns the channel closed at the next release of locks on n
// by this mount.
func (l *remoteLocks) freedCh(n *rnode) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.freed == nil {
		l.freed = map[*rnode]chan struct{}{}
	}
	ch := l.freed[n]
	if ch == nil {
		ch = make(chan struct{})
		l.freed[n] = ch
	}
	return ch
}

// wake tells the mount's waiters on n that locks on it were released.
func (l *remoteLocks) wake(n *rnode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch := l.freed[n]; ch != nil {
		close(ch)
		delete(l.freed, n)
	}
}

// released forgets the lock states that came from FUSE handle fh (of
// open file h), or, if one of them holds locks, makes h linger and
// reports true: its open state must stay. Called with rpc held.
func (l *remoteLocks) released(fh uint64, h *rhandle) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := false
	for k, s := range l.m {
		if s.fh != fh {
			continue
		}
		if len(s.held) > 0 {
			keep = true
			continue
		}
		delete(l.m, k)
	}
	if keep {
		if l.lingering == nil {
			l.lingering = map[uint64]*rhandle{}
		}
		l.lingering[fh] = h
	}
	return keep
}

// unlocked records that key holds only held now (after LOCKU) and, if
// that emptied a lock state of a lingering handle no other lock state
// needs, returns that handle, to be closed. Called with rpc held.
func (l *remoteLocks) unlocked(key lockKey, sid nfsv4.Stateid4, held []heldRange) *rhandle {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, found := l.m[key]
	if !found || cur.sid.Other != sid.Other {
		return nil
	}
	l.m[key] = lockState{sid: sid, fh: cur.fh, held: held}
	h := l.lingering[cur.fh]
	if h == nil || len(held) > 0 {
		return nil
	}
	delete(l.m, key)
	for _, s := range l.m {
		if s.fh == cur.fh {
			return nil
		}
	}
	delete(l.lingering, cur.fh)
	return h
}

// lockState returns the lock state of key.
func (m *RemoteServer) lockState(key lockKey) (lockState, bool) {
	m.locks.mu.Lock()
	defer m.locks.mu.Unlock()
	ls, ok := m.locks.m[key]
	return ls, ok
}

func (m *RemoteServer) lockOwner(owner uint64) nfsv4.StateOwner4 {
	o := append(append([]byte(nil), m.c.OpenOwner()...), "/lock/"+strconv.FormatUint(owner, 16)...)
	return nfsv4.StateOwner4{Clientid: m.c.ClientID(), Owner: o}
}

// lockRange converts a FUSE lock's range (inclusive end, OFFSET_MAX or
// more: to end of file) to NFS offset and length.
func lockRange(lk *raw.FileLock, flock bool) (uint64, uint64) {
	if flock || lk.End >= 1<<63-1 {
		if flock {
			return 0, nfsv4.NFS4_UINT64_MAX
		}
		return lk.Start, nfsv4.NFS4_UINT64_MAX
	}
	return lk.Start, lk.End - lk.Start + 1
}

func nfsLockType(typ uint32, wait bool) nfsv4.NfsLockType4 {
	if typ == syscall.F_RDLCK {
		if wait {
			return nfsv4.READW_LT
		}
		return nfsv4.READ_LT
	}
	if wait {
		return nfsv4.WRITEW_LT
	}
	return nfsv4.WRITE_LT
}

// GetLk implements RawFileSystem with LOCKT.
func (m *RemoteServer) GetLk(cancel <-chan struct{}, in *raw.LkIn, out *raw.LkOut) raw.Status {
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return st
	}
	off, length := lockRange(&in.Lk, in.LkFlags&raw.LK_FLOCK != 0)
	var cp client.Compound
	cp.PutFH(h.n.fh)
	cp.Add(&nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsLockType(in.Lk.Typ, false),
		Offset: off, Length: length, Owner: m.lockOwner(in.Owner)}})
	rep, err := m.do(cancel, &in.InHeader, &cp)
	if err == nil {
		out.Lk = raw.FileLock{Typ: syscall.F_UNLCK}
		return raw.OK
	}
	var se *client.StatusError
	if !errors.As(err, &se) || se.Status != nfsv4.NFS4ERR_DENIED {
		return m.status("getlk", err)
	}
	r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCKT)
	d, _ := r.Oplockt.(*nfsv4.Lockt4res_NFS4ERR_DENIED)
	if d == nil {
		return raw.EIO
	}
	out.Lk = raw.FileLock{Start: d.Denied.Offset, End: 1<<63 - 1, Typ: syscall.F_WRLCK}
	if d.Denied.Length != nfsv4.NFS4_UINT64_MAX && d.Denied.Offset+d.Denied.Length-1 < 1<<63-1 {
		out.Lk.End = d.Denied.Offset + d.Denied.Length - 1
	}
	if d.Denied.Locktype == nfsv4.READ_LT || d.Denied.Locktype == nfsv4.READW_LT {
		out.Lk.Typ = syscall.F_RDLCK
	}
	return raw.OK // the holder is on some client: its pid is unknown (0)
}

// SetLk implements RawFileSystem (F_SETLK, flock with LOCK_NB).
func (m *RemoteServer) SetLk(cancel <-chan struct{}, in *raw.LkIn) raw.Status {
	return m.setLk(cancel, in, false)
}

// SetLkw implements RawFileSystem (F_SETLKW, blocking flock): LOCK is
// retried (from 10 ms to 1 s apart: the client has no callback channel
// for CB_NOTIFY_LOCK) until it succeeds or the caller is interrupted, and
// at once when this mount releases locks on the file.
func (m *RemoteServer) SetLkw(cancel <-chan struct{}, in *raw.LkIn) raw.Status {
	return m.setLk(cancel, in, true)
}

func (m *RemoteServer) setLk(cancel <-chan struct{}, in *raw.LkIn, wait bool) raw.Status {
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return st
	}
	key := lockKey{h.n, in.Owner}
	off, length := lockRange(&in.Lk, in.LkFlags&raw.LK_FLOCK != 0)
	if in.Lk.Typ == syscall.F_UNLCK {
		m.locks.rpc.Lock()
		defer m.locks.rpc.Unlock()
		if _, ok := m.lockState(key); !ok {
			return raw.OK // never locked through NFS
		}
		rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
			ls, _ := m.lockState(key)
			cp.PutFH(h.n.fh)
			cp.Add(&nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT,
				LockStateid: ls.sid, Offset: off, Length: length}})
		})
		if err != nil {
			return m.status("unlock", err)
		}
		m.locks.wake(h.n)
		if r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCKU); r != nil {
			if ok, _ := r.Oplocku.(*nfsv4.Locku4res_NFS4_OK); ok != nil {
				ls, _ := m.lockState(key)
				if done := m.locks.unlocked(key, ok.LockStateid, unheld(ls.held, off, rangeEnd(off, length))); done != nil {
					m.closeOpen(cancel, &in.InHeader, done)
				}
			}
		}
		return raw.OK
	}
	delay := 10 * time.Millisecond
	typ := nfsLockType(in.Lk.Typ, wait)
	for {
		var freed <-chan struct{}
		if wait {
			freed = m.locks.freedCh(h.n) // before LOCK: no release is missed
		}
		have, err := m.lockOnce(cancel, in, h, key, typ, off, length)
		var se *client.StatusError
		switch {
		case err == nil:
			return raw.OK
		case !errors.As(err, &se):
			return m.status("lock", err)
		case have && (se.Status == nfsv4.NFS4ERR_BAD_STATEID || se.Status == nfsv4.NFS4ERR_OLD_STATEID ||
			se.Status == nfsv4.NFS4ERR_STALE_STATEID):
			// The lock state went away with its open: start again
			// from this descriptor's open state.
			m.locks.mu.Lock()
			delete(m.locks.m, key)
			m.locks.mu.Unlock()
			continue
		case se.Status == nfsv4.NFS4ERR_OPENMODE:
			// A write lock through a descriptor not open for
			// writing: EBADF, as fcntl(2) says (and as the Linux NFS
			// client answers for flock(LOCK_EX) on O_RDONLY too).
			return raw.EBADF
		case se.Status != nfsv4.NFS4ERR_DENIED && se.Status != nfsv4.NFS4ERR_DELAY:
			return m.status("lock", err)
		case !wait:
			return raw.EAGAIN
		}
		select {
		case <-cancel:
			return raw.EINTR
		case <-m.ctx.Done():
			return raw.EINTR
		case <-time.After(delay):
			delay = min(2*delay, time.Second)
		case <-freed:
		}
	}
}

// lockOnce sends one LOCK of key's owner through handle h (from its lock
// state if it has one: have) and records the granted range.
func (m *RemoteServer) lockOnce(cancel <-chan struct{}, in *raw.LkIn, h *rhandle, key lockKey, typ nfsv4.NfsLockType4, off, length uint64) (have bool, err error) {
	m.locks.rpc.Lock()
	defer m.locks.rpc.Unlock()
	rep, err := m.doSid(cancel, &in.InHeader, func(cp *client.Compound) {
		var ls lockState
		ls, have = m.lockState(key)
		var locker nfsv4.Locker4
		if have {
			locker = &nfsv4.Locker4_FALSE{LockOwner: nfsv4.ExistLockOwner4{LockStateid: ls.sid}}
		} else {
			locker = &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenStateid: h.stateid(), LockOwner: m.lockOwner(in.Owner)}}
		}
		cp.PutFH(h.n.fh)
		cp.Add(&nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: typ,
			Offset: off, Length: length, Locker: locker}})
	})
	if err != nil {
		return have, err
	}
	r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCK)
	ok, _ := r.Oplock.(*nfsv4.Lock4res_NFS4_OK)
	if ok == nil {
		return have, errors.New("LOCK reply without a stateid")
	}
	m.locks.mu.Lock()
	defer m.locks.mu.Unlock()
	if m.locks.m == nil {
		m.locks.m = map[lockKey]lockState{}
	}
	cur, found := m.locks.m[key]
	if !found {
		cur.fh = in.Fh
	}
	m.locks.m[key] = lockState{sid: ok.Resok4.LockStateid, fh: cur.fh, held: held(cur.held, off, rangeEnd(off, length), typ)}
	return have, nil
}
