package fuse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/nfs4/client"
)

// Server restarts (RFC 8881 §8.4.2.1). When the NFS client finds that the
// server no longer knows it (a new server instance), it calls reclaim
// (installed with client.SetReclaim) in its new session before
// RECLAIM_COMPLETE: every open file of the mount is opened again with
// CLAIM_PREVIOUS, with its owner, access and caller, and every byte-range
// lock the mount holds is taken again with LOCK(reclaim) — within the
// server's grace period, in which no other client can take a conflicting
// lock or open. The handles' stateids are replaced; a request built with
// an old stateid (in flight across the restart) is answered
// NFS4ERR_BAD_STATEID and doSid sends it again with the reclaimed one.
// What cannot be reclaimed (the file was removed meanwhile, the grace
// period is over, the server has none) is logged, and that descriptor's
// I/O fails with EIO from then on.

// doSid is do for a COMPOUND carrying open or lock stateids: build adds
// its operations, reading the stateids from the handles (rhandle.stateid)
// and the lock table. If the server refused a stateid and a reclaim
// replaced the stateids meanwhile, the COMPOUND is built and sent again.
func (m *RemoteServer) doSid(cancel <-chan struct{}, h *raw.InHeader, build func(*client.Compound)) (*client.Reply, error) {
	for attempt := 0; ; attempt++ {
		gen := m.reclaims.Load()
		var cp client.Compound
		build(&cp)
		rep, err := m.do(cancel, h, &cp)
		if attempt < 3 && staleStateid(err) && m.reclaims.Load() != gen {
			continue
		}
		return rep, err
	}
}

// staleStateid reports whether err is the server's refusal of a stateid
// of another server instance.
func staleStateid(err error) bool {
	var se *client.StatusError
	return errors.As(err, &se) && (se.Status == nfsv4.NFS4ERR_BAD_STATEID ||
		se.Status == nfsv4.NFS4ERR_STALE_STATEID || se.Status == nfsv4.NFS4ERR_EXPIRED)
}

// reclaim is the mount's client.ReclaimFunc: it reopens every open file
// (CLAIM_PREVIOUS) and relocks every held lock (LOCK with reclaim), with
// do, in the client's new session.
func (m *RemoteServer) reclaim(ctx context.Context, do func(context.Context, *client.Compound) (*client.Reply, error)) error {
	defer m.reclaims.Add(1)
	m.handles.Lock()
	hs := make(map[uint64]*rhandle, len(m.handles.m))
	for fh, h := range m.handles.m {
		hs[fh] = h
	}
	m.handles.Unlock()
	m.locks.mu.Lock()
	for fh, h := range m.locks.lingering {
		hs[fh] = h // released, but its locks hold its open state
	}
	m.locks.mu.Unlock()
	var errs []error
	opened := map[uint64]bool{}
	for fh, h := range hs {
		var cp client.Compound
		cp.Cred = h.cred
		cp.PutFH(h.n.fh)
		at := cp.Open(m.c.ClientID(), h.owner, client.OpenArgs{Access: h.access, Reclaim: true})
		rep, err := do(ctx, &cp)
		if err == nil {
			err = rep.Err()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("open of file %d: %w", h.n.fileid, err))
			continue
		}
		sid, _ := resStateid(rep.Results[at])
		h.mu.Lock()
		h.sid = sid
		h.mu.Unlock()
		opened[fh] = true
	}
	// Locks, each lock-owner's ranges on a file in one LOCK each.
	m.locks.mu.Lock()
	defer m.locks.mu.Unlock()
	for k, ls := range m.locks.m {
		h := hs[ls.fh]
		if !opened[ls.fh] || len(ls.held) == 0 {
			if len(ls.held) > 0 {
				errs = append(errs, fmt.Errorf("locks on file %d: their open was not reclaimed", k.n.fileid))
			}
			delete(m.locks.m, k)
			continue
		}
		var sid nfsv4.Stateid4
		for i, r := range ls.held {
			var locker nfsv4.Locker4 = &nfsv4.Locker4_FALSE{LockOwner: nfsv4.ExistLockOwner4{LockStateid: sid}}
			if i == 0 {
				locker = &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenStateid: h.stateid(), LockOwner: m.lockOwner(k.owner)}}
			}
			off, length := r.nfs()
			var cp client.Compound
			cp.Cred = h.cred
			cp.PutFH(h.n.fh)
			cp.Add(&nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: r.typ, Reclaim: true,
				Offset: off, Length: length, Locker: locker}})
			rep, err := do(ctx, &cp)
			if err == nil {
				err = rep.Err()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("lock [%d, %d) on file %d: %w", r.start, r.end, k.n.fileid, err))
				ls.held = nil // a lost range: its owner must not think it holds the others either
				break
			}
			ok, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK)
			if ok == nil {
				errs = append(errs, fmt.Errorf("lock on file %d: no stateid in the reply", k.n.fileid))
				ls.held = nil
				break
			}
			sid = ok.Resok4.LockStateid
		}
		if ls.held == nil {
			delete(m.locks.m, k)
			continue
		}
		ls.sid = sid
		m.locks.m[k] = ls
	}
	if len(errs) > 0 {
		m.log.Warn("server restart: state not reclaimed", "err", errors.Join(errs...))
	} else {
		m.log.Info("server restart: state reclaimed", "opens", len(opened), "lockowners", len(m.locks.m))
	}
	return errors.Join(errs...)
}

// heldRange is a byte range [start, end) a lock-owner holds on a file,
// with its lock type (READ_LT or WRITE_LT); end math.MaxUint64 is "to the
// end of file".
type heldRange struct {
	start, end uint64
	typ        nfsv4.NfsLockType4
}

// rangeEnd converts an NFS offset and length to an exclusive end.
func rangeEnd(off, length uint64) uint64 {
	if length == nfsv4.NFS4_UINT64_MAX || off+length < off {
		return math.MaxUint64
	}
	return off + length
}

// nfs returns r's NFS offset and length.
func (r heldRange) nfs() (uint64, uint64) {
	if r.end == math.MaxUint64 {
		return r.start, nfsv4.NFS4_UINT64_MAX
	}
	return r.start, r.end - r.start
}

// unheld removes [start, end) from rs (POSIX unlock, and the first half of
// a lock, which replaces what the owner held in its range).
func unheld(rs []heldRange, start, end uint64) []heldRange {
	var out []heldRange
	for _, r := range rs {
		if r.end <= start || r.start >= end {
			out = append(out, r)
			continue
		}
		if r.start < start {
			out = append(out, heldRange{r.start, start, r.typ})
		}
		if r.end > end {
			out = append(out, heldRange{end, r.end, r.typ})
		}
	}
	return out
}

// held adds [start, end) of type typ to rs, replacing what rs held there.
func held(rs []heldRange, start, end uint64, typ nfsv4.NfsLockType4) []heldRange {
	if typ == nfsv4.READW_LT {
		typ = nfsv4.READ_LT
	} else if typ == nfsv4.WRITEW_LT {
		typ = nfsv4.WRITE_LT
	}
	rs = append(unheld(rs, start, end), heldRange{start, end, typ})
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	// Merge adjacent ranges of one type, as the server does.
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if last.end == r.start && last.typ == r.typ {
			last.end = r.end
			continue
		}
		out = append(out, r)
	}
	return out
}
