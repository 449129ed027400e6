package state

import (
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Grace period and reclaim (RFC 8881 §8.4.2, RFC 7530 §9.6.2).
//
// The server records the owner of every confirmed client in stable
// storage (Config.Record) and hands the records of the previous instance
// to New (Config.Previous). If there are any, the new instance starts in
// a grace period of Config.Grace: reclaims (OPEN with CLAIM_PREVIOUS, LOCK
// with reclaim set) are allowed for recorded clients that have not sent
// RECLAIM_COMPLETE, and every other OPEN and LOCK gets NFS4ERR_GRACE so
// that no new state can conflict with state still to be reclaimed. The
// grace period ends when its time is up or, earlier, once every recorded
// client has sent RECLAIM_COMPLETE (4.0 clients have no such operation:
// a recorded 4.0 client keeps the grace period to its end). Outside the
// grace period a reclaim gets NFS4ERR_NO_GRACE.

// graceState is the grace period's part of Manager.mu.
type graceState struct {
	end  time.Time
	over bool
	// recorded holds the owners recorded by the previous instance;
	// pending those that have not sent RECLAIM_COMPLETE yet.
	recorded, pending map[string]bool
}

func (m *Manager) initGraceLocked() {
	g := &m.mu.grace
	g.recorded = make(map[string]bool, len(m.cfg.Previous))
	g.pending = make(map[string]bool, len(m.cfg.Previous))
	for _, o := range m.cfg.Previous {
		g.recorded[string(o)] = true
		g.pending[string(o)] = true
	}
	g.end = m.cfg.Clock().Add(m.cfg.Grace)
	if len(g.recorded) == 0 || m.cfg.Grace <= 0 {
		g.over = true
	}
}

// inGraceLocked reports whether the grace period is on, ending it (and
// scheduling Config.GraceEnded) when its time is up or nobody is left
// to reclaim.
func (m *Manager) inGraceLocked() bool {
	g := &m.mu.grace
	if g.over {
		return false
	}
	if len(g.pending) > 0 && m.cfg.Clock().Before(g.end) {
		return true
	}
	g.over = true
	g.pending = nil
	m.mu.deferred = append(m.mu.deferred, m.cfg.GraceEnded)
	return false
}

// InGrace reports whether the server is in its grace period.
func (m *Manager) InGrace() bool {
	m.lock()
	defer m.unlock()
	return m.inGraceLocked()
}

// CheckReclaim decides whether client c may acquire state: reclaim says
// whether the request is a reclaim (OPEN CLAIM_PREVIOUS, LOCK reclaim).
// During the grace period non-reclaims get NFS4ERR_GRACE, and reclaims
// NFS4ERR_NO_GRACE from a client that the previous instance did not record
// or that has sent RECLAIM_COMPLETE; outside it reclaims get
// NFS4ERR_NO_GRACE.
func (m *Manager) CheckReclaim(c *Client, reclaim bool) Status {
	m.lock()
	defer m.unlock()
	in := m.inGraceLocked()
	switch {
	case !reclaim && in:
		return nfsv4.NFS4ERR_GRACE
	case !reclaim:
		return OK
	case !in, c == nil, c.ReclaimComplete, !m.mu.grace.recorded[string(c.Owner)]:
		return nfsv4.NFS4ERR_NO_GRACE
	}
	return OK
}

// recordLocked schedules Config.Record for a client that became confirmed
// (add) or a confirmed client that went away.
func (m *Manager) recordLocked(c *Client, add bool) {
	owner := append([]byte(nil), c.Owner...)
	m.mu.deferred = append(m.mu.deferred, func() { m.cfg.Record(owner, add) })
}
