package state

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// lockRange is one byte-range lock [start, end] (end inclusive).
type lockRange struct {
	owner      *Owner
	write      bool
	start, end uint64
}

func rangeEnd(off, length uint64) uint64 {
	if length == ^uint64(0) || off+length < off {
		return ^uint64(0)
	}
	return off + length - 1
}

// CheckRange validates a lock range (RFC 8881 §18.10.4).
func CheckRange(off, length uint64) Status {
	if length == 0 {
		return nfsv4.NFS4ERR_INVAL
	}
	if length != ^uint64(0) && off+length < off {
		return nfsv4.NFS4ERR_INVAL
	}
	return OK
}

// Denied describes a conflicting lock.
type Denied struct {
	Offset, Length uint64
	Write          bool
	ClientID       uint64
	Owner          []byte
}

func (m *Manager) conflictLocked(ino uint64, o *Owner, write bool, start, end uint64) *Denied {
	for _, l := range m.mu.locks[ino] {
		if l.owner == o || l.end < start || l.start > end || !write && !l.write {
			continue
		}
		length := l.end - l.start + 1
		if l.end == ^uint64(0) {
			length = ^uint64(0) - l.start
			if l.start == 0 {
				length = ^uint64(0)
			}
		}
		return &Denied{Offset: l.start, Length: length, Write: l.write, ClientID: l.owner.Client.ID, Owner: l.owner.Name}
	}
	return nil
}

// LockArgs are LOCK's arguments after the locker is resolved.
type LockArgs struct {
	Ino    uint64
	Write  bool
	Offset uint64
	Length uint64
	// New lock owner: the open stateid and owner name; else LockStateid.
	NewOwner    bool
	OpenStateid nfsv4.Stateid4
	OwnerName   []byte
	OwnerClient uint64 // 4.0 lock_owner4.clientid
	LockStateid nfsv4.Stateid4
}

// Lock implements LOCK. On conflict it returns NFS4ERR_DENIED and the
// conflicting lock.
func (m *Manager) Lock(a LockArgs, minor uint32) (nfsv4.Stateid4, *Denied, Status) {
	if st := CheckRange(a.Offset, a.Length); st != OK {
		return nfsv4.Stateid4{}, nil, st
	}
	m.lock()
	defer m.unlock()
	var ls *State
	if a.NewOwner {
		open, st := m.lookupLocked(a.OpenStateid, minor)
		if st != OK {
			return nfsv4.Stateid4{}, nil, st
		}
		if open.Kind != KindOpen || open.Ino != a.Ino {
			return nfsv4.Stateid4{}, nil, nfsv4.NFS4ERR_BAD_STATEID
		}
		c := open.Owner.Client
		if minor == 0 && a.OwnerClient != c.ID {
			return nfsv4.Stateid4{}, nil, nfsv4.NFS4ERR_STALE_CLIENTID
		}
		o := m.ownerLocked(c, a.OwnerName, true)
		for _, s := range open.locks {
			if s.Owner == o && m.mu.states[s.Other] == s {
				ls = s
			}
		}
		if ls == nil {
			ls = &State{Other: m.newOtherLocked(), Seqid: 0, Kind: KindLock, Ino: a.Ino, Owner: o, Open: open, Confirmed: true}
			m.mu.states[ls.Other] = ls
			open.locks = append(open.locks, ls)
		}
	} else {
		s, st := m.lookupLocked(a.LockStateid, minor)
		if st != OK {
			return nfsv4.Stateid4{}, nil, st
		}
		if s.Kind != KindLock || s.Ino != a.Ino {
			return nfsv4.Stateid4{}, nil, nfsv4.NFS4ERR_BAD_STATEID
		}
		ls = s
	}
	if a.Write && ls.Open.Access&nfsv4.OPEN4_SHARE_ACCESS_WRITE == 0 || !a.Write && ls.Open.Access&nfsv4.OPEN4_SHARE_ACCESS_READ == 0 {
		if ls.Seqid == 0 {
			delete(m.mu.states, ls.Other)
			ls.Open.locks = without(ls.Open.locks, ls)
		}
		return nfsv4.Stateid4{}, nil, nfsv4.NFS4ERR_OPENMODE
	}
	start, end := a.Offset, rangeEnd(a.Offset, a.Length)
	if d := m.conflictLocked(a.Ino, ls.Owner, a.Write, start, end); d != nil {
		if ls.Seqid == 0 {
			delete(m.mu.states, ls.Other)
			ls.Open.locks = without(ls.Open.locks, ls)
		}
		return nfsv4.Stateid4{}, d, nfsv4.NFS4ERR_DENIED
	}
	m.releaseLocksLocked(a.Ino, ls.Owner, start, end)
	m.mu.locks[a.Ino] = append(m.mu.locks[a.Ino], &lockRange{owner: ls.Owner, write: a.Write, start: start, end: end})
	ls.Seqid++
	return ls.Stateid(), nil, OK
}

// TestLock implements LOCKT for (clientID, owner).
func (m *Manager) TestLock(ino, clientID uint64, owner []byte, write bool, off, length uint64) (*Denied, Status) {
	if st := CheckRange(off, length); st != OK {
		return nil, st
	}
	m.lock()
	defer m.unlock()
	var o *Owner
	if c := m.mu.clients[clientID]; c != nil {
		o = c.owners[ownerKey(true, c.ID, owner)]
	}
	if d := m.conflictLocked(ino, o, write, off, rangeEnd(off, length)); d != nil {
		return d, nfsv4.NFS4ERR_DENIED
	}
	return nil, OK
}

// Unlock implements LOCKU.
func (m *Manager) Unlock(id nfsv4.Stateid4, minor uint32, ino, off, length uint64) (nfsv4.Stateid4, Status) {
	if st := CheckRange(off, length); st != OK {
		return nfsv4.Stateid4{}, st
	}
	m.lock()
	defer m.unlock()
	s, st := m.lookupLocked(id, minor)
	if st != OK {
		return nfsv4.Stateid4{}, st
	}
	if s.Kind != KindLock || s.Ino != ino {
		return nfsv4.Stateid4{}, nfsv4.NFS4ERR_BAD_STATEID
	}
	m.releaseLocksLocked(ino, s.Owner, off, rangeEnd(off, length))
	s.Seqid++
	return s.Stateid(), OK
}

// releaseLocksLocked removes [start, end] from o's locks on ino, splitting
// ranges as needed.
func (m *Manager) releaseLocksLocked(ino uint64, o *Owner, start, end uint64) {
	old := m.mu.locks[ino]
	var out []*lockRange
	for _, l := range old {
		if l.owner != o || l.end < start || l.start > end {
			out = append(out, l)
			continue
		}
		if l.start < start {
			out = append(out, &lockRange{owner: o, write: l.write, start: l.start, end: start - 1})
		}
		if l.end > end {
			out = append(out, &lockRange{owner: o, write: l.write, start: end + 1, end: l.end})
		}
	}
	if len(out) == 0 {
		delete(m.mu.locks, ino)
	} else {
		m.mu.locks[ino] = out
	}
}
