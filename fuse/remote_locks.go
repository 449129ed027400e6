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
	sid nfsv4.Stateid4
	fh  uint64 // the FUSE handle whose open state it came from
}

// remoteLocks is the lock-state table of a mount.
type remoteLocks struct {
	mu sync.Mutex
	m  map[lockKey]lockState
}

// released forgets the lock states that came from FUSE handle fh.
func (l *remoteLocks) released(fh uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, s := range l.m {
		if s.fh == fh {
			delete(l.m, k)
		}
	}
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
func (m *RemoteServer) GetLk(_ <-chan struct{}, in *raw.LkIn, out *raw.LkOut) raw.Status {
	h, st := m.stateid(in.Fh)
	if st != raw.OK {
		return st
	}
	off, length := lockRange(&in.Lk, in.LkFlags&raw.LK_FLOCK != 0)
	var cp client.Compound
	cp.PutFH(h.n.fh)
	cp.Add(&nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsLockType(in.Lk.Typ, false),
		Offset: off, Length: length, Owner: m.lockOwner(in.Owner)}})
	rep, err := m.do(&in.InHeader, &cp)
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
// retried (from 10 ms to 1 s apart: NFSv4.1 has no lock callbacks here)
// until it succeeds or the caller is interrupted.
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
		m.locks.mu.Lock()
		ls, ok := m.locks.m[key]
		m.locks.mu.Unlock()
		if !ok {
			return raw.OK // never locked through NFS
		}
		var cp client.Compound
		cp.PutFH(h.n.fh)
		cp.Add(&nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT,
			LockStateid: ls.sid, Offset: off, Length: length}})
		rep, err := m.do(&in.InHeader, &cp)
		if err != nil {
			return m.status("unlock", err)
		}
		if r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCKU); r != nil {
			if ok, _ := r.Oplocku.(*nfsv4.Locku4res_NFS4_OK); ok != nil {
				m.locks.mu.Lock()
				if cur, found := m.locks.m[key]; found && cur.sid.Other == ok.LockStateid.Other {
					m.locks.m[key] = lockState{sid: ok.LockStateid, fh: cur.fh}
				}
				m.locks.mu.Unlock()
			}
		}
		return raw.OK
	}
	delay := 10 * time.Millisecond
	for {
		m.locks.mu.Lock()
		ls, have := m.locks.m[key]
		m.locks.mu.Unlock()
		var locker nfsv4.Locker4
		if have {
			locker = &nfsv4.Locker4_FALSE{LockOwner: nfsv4.ExistLockOwner4{LockStateid: ls.sid}}
		} else {
			locker = &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenStateid: h.sid, LockOwner: m.lockOwner(in.Owner)}}
		}
		var cp client.Compound
		cp.PutFH(h.n.fh)
		cp.Add(&nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsLockType(in.Lk.Typ, wait),
			Offset: off, Length: length, Locker: locker}})
		rep, err := m.do(&in.InHeader, &cp)
		var se *client.StatusError
		switch {
		case err == nil:
			r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCK)
			ok, _ := r.Oplock.(*nfsv4.Lock4res_NFS4_OK)
			if ok == nil {
				return raw.EIO
			}
			m.locks.mu.Lock()
			if m.locks.m == nil {
				m.locks.m = map[lockKey]lockState{}
			}
			fh := in.Fh
			if have {
				fh = ls.fh
			}
			m.locks.m[key] = lockState{sid: ok.Resok4.LockStateid, fh: fh}
			m.locks.mu.Unlock()
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
		}
		delay = min(2*delay, time.Second)
	}
}
