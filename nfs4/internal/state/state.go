// Package state is the NFSv4 server's protocol state as a state machine:
// clients and leases (4.0 SETCLIENTID and 4.1 EXCHANGE_ID), sessions with
// their slot tables and reply caches, open and lock stateids, and
// byte-range locks. It does no I/O and reads time only from the injected
// clock, so every rule is testable without sleeping.
//
// # Locking
//
// A Manager is safe for concurrent use; all state is guarded by mu and
// methods that need it held end in Locked. Callbacks (Config.Pin/Unpin)
// are called without mu held.
//
// # Stateids
//
// A stateid's 12-byte "other" field is a 4-byte boot verifier (random per
// Manager) followed by an 8-byte counter, so stateids from an earlier
// server instance are recognized as stale.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Status is an NFSv4 status code.
type Status = nfsv4.Nfsstat4

// OK is NFS4_OK.
const OK = nfsv4.NFS4_OK

// Config configures a Manager.
type Config struct {
	Clock func() time.Time
	Rand  io.Reader
	// Lease is the lease period (default 90s).
	Lease time.Duration
	// Slots is the number of fore-channel slots per session (default 64).
	Slots int
	// MaxCachedReply caps one cached reply in bytes (default 64 KiB).
	MaxCachedReply int
	// Pin and Unpin are told when an inode gains its first open or loses
	// its last one (across all clients). They run without locks held.
	Pin   func(ino uint64)
	Unpin func(ino uint64)
	// Previous holds the client owners recorded by the previous server
	// instance (see grace.go); if any, New starts a grace period of
	// Grace (default Lease; negative: none).
	Previous [][]byte
	Grace    time.Duration
	// Record is told, in order and without locks held, when a client
	// becomes confirmed (add) and when a confirmed client goes away, so
	// that the server can keep the records in stable storage before
	// the operation returns. GraceEnded is told once the grace period
	// is over.
	Record     func(owner []byte, add bool)
	GraceEnded func()
}

// Validate fills defaults.
func (c *Config) Validate() error {
	if c.Clock == nil {
		return errors.New("state: Config.Clock is required")
	}
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	if c.Lease <= 0 {
		c.Lease = 90 * time.Second
	}
	if c.Slots <= 0 {
		c.Slots = 64
	}
	if c.MaxCachedReply <= 0 {
		c.MaxCachedReply = 64 << 10
	}
	if c.Pin == nil {
		c.Pin = func(uint64) {}
	}
	if c.Grace == 0 {
		c.Grace = c.Lease
	}
	if c.Record == nil {
		c.Record = func([]byte, bool) {}
	}
	if c.GraceEnded == nil {
		c.GraceEnded = func() {}
	}
	if c.Unpin == nil {
		c.Unpin = func(uint64) {}
	}
	return nil
}

// Manager holds all protocol state.
type Manager struct {
	cfg  Config
	boot [4]byte
	// lastTick is the clock reading (UnixNano) of the last Tick.
	lastTick atomic.Int64

	mu struct {
		sync.Mutex
		nextClient uint64
		nextState  uint64
		clients    map[uint64]*Client
		byOwner    map[string]*Client // confirmed or newest unconfirmed per owner
		sessions   map[[16]byte]*Session
		states     map[[12]byte]*State
		// opens indexes the open states by file: OPEN checks share
		// reservations against those of its file only (a scan of
		// every state made each OPEN cost O(opens on the server)).
		opens    map[uint64][]*State
		locks    map[uint64][]*lockRange
		retired  map[[12]byte]*Owner
		deferred []func()
		grace    graceState
	}
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg}
	if _, err := io.ReadFull(cfg.Rand, m.boot[:]); err != nil {
		return nil, err
	}
	m.mu.clients = make(map[uint64]*Client)
	m.mu.byOwner = make(map[string]*Client)
	m.mu.sessions = make(map[[16]byte]*Session)
	m.mu.states = make(map[[12]byte]*State)
	m.mu.opens = make(map[uint64][]*State)
	m.mu.locks = make(map[uint64][]*lockRange)
	m.mu.retired = make(map[[12]byte]*Owner)
	m.mu.nextClient = uint64(binary.BigEndian.Uint32(m.boot[:])) << 32
	m.initGraceLocked()
	return m, nil
}

// Lease returns the lease period.
func (m *Manager) Lease() time.Duration { return m.cfg.Lease }

// Slots returns the number of slots granted per session.
func (m *Manager) Slots() int { return m.cfg.Slots }

func (m *Manager) lock() { m.mu.Lock() }

// unlock releases mu and then runs deferred callbacks.
func (m *Manager) unlock() {
	d := m.mu.deferred
	m.mu.deferred = nil
	m.mu.Unlock()
	for _, f := range d {
		f()
	}
}

// Client is one NFS client (4.0 or 4.1+).
type Client struct {
	ID        uint64
	Owner     []byte
	Verifier  [8]byte
	Principal string
	Minor     uint32
	Confirmed bool
	// 4.0: the SETCLIENTID_CONFIRM verifier.
	ConfirmVerf [8]byte
	// 4.1: the next CREATE_SESSION sequence id and the cached reply of
	// the last one.
	CSSeq    uint32
	CSReply  any
	expires  time.Time
	sessions map[[16]byte]*Session
	owners   map[string]*Owner
	// ReclaimComplete is set by RECLAIM_COMPLETE.
	ReclaimComplete bool
}

// Owner is an open-owner or lock-owner.
type Owner struct {
	Client *Client
	Name   []byte
	Lock   bool
	// 4.0 sequencing (RFC 7530 §9.1.7): the last seqid used, whether
	// there was one, and the reply to replay for it (owned by the
	// server; opaque here).
	Seqid  uint32
	hasSeq bool
	reply  any
	// retired is the stateid this owner most recently closed or
	// released, kept in Manager.mu.retired so that a retransmitted CLOSE
	// still finds its owner.
	retired    [12]byte
	hasRetired bool
}

// StateKind distinguishes open and lock stateids.
type StateKind int

// Kinds of state.
const (
	KindOpen StateKind = iota + 1
	KindLock
)

// State is an open or lock stateid.
type State struct {
	Other  [12]byte
	Seqid  uint32
	Kind   StateKind
	Ino    uint64
	Owner  *Owner
	Access uint32 // open: OPEN4_SHARE_ACCESS_*
	Deny   uint32
	// Open is the open state a lock state derives from.
	Open *State
	// Confirmed is false for a 4.0 open awaiting OPEN_CONFIRM.
	Confirmed bool
	// locks are the lock states derived from an open state (some may
	// have been freed since: check m.mu.states).
	locks []*State
}

// without returns ss without s (order not kept).
func without(ss []*State, s *State) []*State {
	for i, x := range ss {
		if x == s {
			ss[i] = ss[len(ss)-1]
			ss[len(ss)-1] = nil
			return ss[:len(ss)-1]
		}
	}
	return ss
}

// Stateid returns the wire stateid.
func (s *State) Stateid() nfsv4.Stateid4 { return nfsv4.Stateid4{Seqid: s.Seqid, Other: s.Other} }

func ownerKey(lock bool, clientID uint64, name []byte) string {
	var b [9]byte
	binary.BigEndian.PutUint64(b[:], clientID)
	if lock {
		b[8] = 1
	}
	return string(b[:]) + string(name)
}

func (m *Manager) expiryLocked() time.Time { return m.cfg.Clock().Add(m.cfg.Lease) }

// Tick expires clients whose lease ran out, releasing their state. The
// server calls it periodically and before handling each compound.
func (m *Manager) Tick() {
	m.lock()
	defer m.unlock()
	now := m.cfg.Clock()
	m.lastTick.Store(now.UnixNano())
	for _, c := range m.mu.clients {
		if now.After(c.expires) {
			m.destroyClientLocked(c)
		}
	}
	m.inGraceLocked() // ends the grace period when its time is up
}

// MaybeTick runs Tick if the clock moved at least a second since the last
// one: cheap enough to call before every request (Tick walks all clients
// under the lock).
func (m *Manager) MaybeTick() {
	if m.cfg.Clock().UnixNano()-m.lastTick.Load() >= int64(time.Second) {
		m.Tick()
	}
}

// Renew extends a client's lease. It returns STALE_CLIENTID if the client
// is unknown (or expired), EXPIRED never (expired clients are removed).
func (m *Manager) Renew(clientID uint64) Status {
	m.lock()
	defer m.unlock()
	c := m.mu.clients[clientID]
	if c == nil || !c.Confirmed {
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	c.expires = m.expiryLocked()
	return OK
}

func (m *Manager) destroyClientLocked(c *Client) {
	for id := range c.sessions {
		delete(m.mu.sessions, id)
	}
	for other, s := range m.mu.states {
		if s.Owner.Client == c {
			m.freeStateLocked(other, s)
		}
	}
	for _, o := range c.owners {
		if o.hasRetired {
			delete(m.mu.retired, o.retired)
		}
	}
	delete(m.mu.clients, c.ID)
	if m.mu.byOwner[string(c.Owner)] == c {
		delete(m.mu.byOwner, string(c.Owner))
	}
	if c.Confirmed {
		m.recordLocked(c, false)
	}
}

func (m *Manager) newOtherLocked() [12]byte {
	var o [12]byte
	copy(o[:4], m.boot[:])
	m.mu.nextState++
	binary.BigEndian.PutUint64(o[4:], m.mu.nextState)
	return o
}

func (m *Manager) freeStateLocked(other [12]byte, s *State) {
	delete(m.mu.states, other)
	if o := s.Owner; m.mu.clients[o.Client.ID] == o.Client {
		if o.hasRetired {
			delete(m.mu.retired, o.retired)
		}
		o.retired, o.hasRetired = other, true
		m.mu.retired[other] = o
	}
	switch s.Kind {
	case KindOpen:
		if opens := without(m.mu.opens[s.Ino], s); len(opens) > 0 {
			m.mu.opens[s.Ino] = opens
		} else {
			delete(m.mu.opens, s.Ino)
			ino := s.Ino
			m.mu.deferred = append(m.mu.deferred, func() { m.cfg.Unpin(ino) })
		}
		// Lock states derived from this open go with it (s.locks is
		// detached first: freeing one removes it from its open's list).
		locks := s.locks
		s.locks = nil
		for _, l := range locks {
			if m.mu.states[l.Other] == l {
				m.freeStateLocked(l.Other, l)
			}
		}
	case KindLock:
		if s.Open != nil {
			s.Open.locks = without(s.Open.locks, s)
		}
		m.releaseLocksLocked(s.Ino, s.Owner, 0, ^uint64(0))
	}
}

// ---- 4.0 client ID ----

// SetClientID implements SETCLIENTID (RFC 7530 §16.33), simplified to the
// cases a single-server deployment meets: a new or rebooted client gets a
// new unconfirmed record that SETCLIENTID_CONFIRM confirms.
func (m *Manager) SetClientID(owner []byte, verifier [8]byte, principal string) (uint64, [8]byte) {
	m.lock()
	defer m.unlock()
	if c := m.mu.byOwner[string(owner)]; c != nil && c.Confirmed && c.Verifier == verifier && c.Principal == principal {
		// Callback update of a confirmed client: same id, new confirm verifier.
		io.ReadFull(m.cfg.Rand, c.ConfirmVerf[:])
		return c.ID, c.ConfirmVerf
	}
	c := m.newClientLocked(owner, verifier, principal, 0)
	io.ReadFull(m.cfg.Rand, c.ConfirmVerf[:])
	return c.ID, c.ConfirmVerf
}

func (m *Manager) newClientLocked(owner []byte, verifier [8]byte, principal string, minor uint32) *Client {
	m.mu.nextClient++
	c := &Client{
		ID: m.mu.nextClient, Owner: append([]byte(nil), owner...), Verifier: verifier,
		Principal: principal, Minor: minor, CSSeq: 1,
		expires:  m.expiryLocked(),
		sessions: make(map[[16]byte]*Session),
		owners:   make(map[string]*Owner),
	}
	m.mu.clients[c.ID] = c
	return c
}

// SetClientIDConfirm implements SETCLIENTID_CONFIRM.
func (m *Manager) SetClientIDConfirm(id uint64, verf [8]byte, principal string) Status {
	m.lock()
	defer m.unlock()
	c := m.mu.clients[id]
	if c == nil {
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	if c.ConfirmVerf != verf {
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	if c.Principal != principal {
		return nfsv4.NFS4ERR_CLID_INUSE
	}
	if old := m.mu.byOwner[string(c.Owner)]; old != nil && old != c {
		m.destroyClientLocked(old)
	}
	if !c.Confirmed {
		m.recordLocked(c, true)
	}
	c.Confirmed = true
	c.expires = m.expiryLocked()
	m.mu.byOwner[string(c.Owner)] = c
	return OK
}

// ---- 4.1 client ID and sessions ----

// ExchangeIDResult is EXCHANGE_ID's outcome.
type ExchangeIDResult struct {
	ClientID  uint64
	Seq       uint32
	Confirmed bool
}

// ExchangeID implements the EXCHANGE_ID cases of RFC 8881 §18.35.5 that do
// not involve state protection (SP4_NONE).
func (m *Manager) ExchangeID(owner []byte, verifier [8]byte, principal string, update bool, minor uint32) (ExchangeIDResult, Status) {
	m.lock()
	defer m.unlock()
	c := m.mu.byOwner[string(owner)]
	if update {
		if c == nil || !c.Confirmed {
			return ExchangeIDResult{}, nfsv4.NFS4ERR_NOENT
		}
		if c.Verifier != verifier {
			return ExchangeIDResult{}, nfsv4.NFS4ERR_NOT_SAME
		}
		if c.Principal != principal {
			return ExchangeIDResult{}, nfsv4.NFS4ERR_PERM
		}
		return ExchangeIDResult{c.ID, c.CSSeq, true}, OK
	}
	if c != nil {
		if c.Confirmed && c.Verifier == verifier && c.Principal == principal {
			// Case 2: the same client again.
			c.expires = m.expiryLocked()
			return ExchangeIDResult{c.ID, c.CSSeq, true}, OK
		}
		if c.Confirmed && c.Principal != principal && m.hasStateLocked(c) {
			return ExchangeIDResult{}, nfsv4.NFS4ERR_CLID_INUSE
		}
		if !c.Confirmed {
			// Case 4: replace the unconfirmed record.
			m.destroyClientLocked(c)
		}
		// Case 5 (client reboot): a new unconfirmed record; the old one
		// is dropped when the new one is confirmed by CREATE_SESSION.
	}
	n := m.newClientLocked(owner, verifier, principal, minor)
	if c == nil || !c.Confirmed {
		m.mu.byOwner[string(owner)] = n
	}
	return ExchangeIDResult{n.ID, n.CSSeq, false}, OK
}

func (m *Manager) hasStateLocked(c *Client) bool {
	if len(c.sessions) > 0 {
		return true
	}
	for _, s := range m.mu.states {
		if s.Owner.Client == c {
			return true
		}
	}
	return false
}

// ChannelAttrs are negotiated fore-channel limits.
type ChannelAttrs struct {
	MaxRequest, MaxResponse, MaxResponseCached, MaxOps, MaxRequests uint32
}

// Session is a 4.1 session.
type Session struct {
	ID     [16]byte
	Client *Client
	Fore   ChannelAttrs
	slots  []slot
}

type slot struct {
	seq    uint32
	busy   bool
	cached bool
	reply  []byte
}

// CreateSessionReply is what CREATE_SESSION returns; it is cached for
// replays of the same csa_sequence.
type CreateSessionReply struct {
	SessionID [16]byte
	Seq       uint32
	Fore      ChannelAttrs
}

// CreateSession implements CREATE_SESSION (RFC 8881 §18.36).
func (m *Manager) CreateSession(clientID uint64, seq uint32, principal string, fore ChannelAttrs) (CreateSessionReply, Status) {
	m.lock()
	defer m.unlock()
	c := m.mu.clients[clientID]
	if c == nil {
		return CreateSessionReply{}, nfsv4.NFS4ERR_STALE_CLIENTID
	}
	if c.Principal != principal {
		return CreateSessionReply{}, nfsv4.NFS4ERR_CLID_INUSE
	}
	switch {
	case seq == c.CSSeq-1 && c.CSReply != nil:
		return c.CSReply.(CreateSessionReply), OK // replay
	case seq != c.CSSeq:
		return CreateSessionReply{}, nfsv4.NFS4ERR_SEQ_MISORDERED
	}
	if !c.Confirmed {
		if old := m.mu.byOwner[string(c.Owner)]; old != nil && old != c {
			m.destroyClientLocked(old)
		}
		c.Confirmed = true
		m.mu.byOwner[string(c.Owner)] = c
		m.recordLocked(c, true)
	}
	fore.MaxRequests = min(max(fore.MaxRequests, 1), uint32(m.cfg.Slots))
	fore.MaxResponseCached = min(fore.MaxResponseCached, uint32(m.cfg.MaxCachedReply))
	s := &Session{Client: c, Fore: fore, slots: make([]slot, fore.MaxRequests)}
	io.ReadFull(m.cfg.Rand, s.ID[:])
	m.mu.sessions[s.ID] = s
	c.sessions[s.ID] = s
	c.expires = m.expiryLocked()
	rep := CreateSessionReply{SessionID: s.ID, Seq: seq, Fore: fore}
	c.CSReply = rep
	c.CSSeq++
	return rep, OK
}

// DestroySession implements DESTROY_SESSION.
func (m *Manager) DestroySession(id [16]byte) Status {
	m.lock()
	defer m.unlock()
	s := m.mu.sessions[id]
	if s == nil {
		return nfsv4.NFS4ERR_BADSESSION
	}
	delete(m.mu.sessions, id)
	delete(s.Client.sessions, id)
	return OK
}

// DestroyClientID implements DESTROY_CLIENTID.
func (m *Manager) DestroyClientID(id uint64) Status {
	m.lock()
	defer m.unlock()
	c := m.mu.clients[id]
	if c == nil {
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	if m.hasStateLocked(c) {
		return nfsv4.NFS4ERR_CLIENTID_BUSY
	}
	m.destroyClientLocked(c)
	return OK
}

// ReclaimComplete implements RECLAIM_COMPLETE: c reclaims nothing more,
// and once every client recorded by the previous instance has said so the
// grace period ends (grace.go).
func (m *Manager) ReclaimComplete(c *Client) Status {
	m.lock()
	defer m.unlock()
	if c.ReclaimComplete {
		return nfsv4.NFS4ERR_COMPLETE_ALREADY
	}
	c.ReclaimComplete = true
	if m.mu.grace.pending != nil {
		delete(m.mu.grace.pending, string(c.Owner))
		m.inGraceLocked()
	}
	return OK
}

// Session returns a live session.
func (m *Manager) Session(id [16]byte) *Session {
	m.lock()
	defer m.unlock()
	return m.mu.sessions[id]
}

// SlotRef names a slot held by an in-progress compound.
type SlotRef struct {
	Session *Session
	Slot    uint32
	Seq     uint32
	Cache   bool
}

// SequenceResult is SEQUENCE's outcome.
type SequenceResult struct {
	Client      *Client
	Session     *Session
	HighestSlot uint32
	// Replay, if non-nil, is the cached reply to send back unchanged.
	Replay []byte
	// Ref must be passed to FinishSlot once the compound is done (nil on
	// replay or error).
	Ref *SlotRef
}

// Sequence implements SEQUENCE's slot logic (RFC 8881 §2.10.6).
func (m *Manager) Sequence(id [16]byte, slotID, seq uint32, cache bool) (SequenceResult, Status) {
	m.lock()
	defer m.unlock()
	s := m.mu.sessions[id]
	if s == nil {
		return SequenceResult{}, nfsv4.NFS4ERR_BADSESSION
	}
	if int(slotID) >= len(s.slots) {
		return SequenceResult{}, nfsv4.NFS4ERR_BADSLOT
	}
	sl := &s.slots[slotID]
	res := SequenceResult{Client: s.Client, Session: s, HighestSlot: uint32(len(s.slots) - 1)}
	switch {
	case seq == sl.seq && sl.seq != 0:
		if sl.busy {
			return res, nfsv4.NFS4ERR_DELAY
		}
		if !sl.cached {
			return res, nfsv4.NFS4ERR_RETRY_UNCACHED_REP
		}
		res.Replay = sl.reply
		return res, OK
	case seq == sl.seq+1:
		if sl.busy {
			return res, nfsv4.NFS4ERR_DELAY
		}
	default:
		return res, nfsv4.NFS4ERR_SEQ_MISORDERED
	}
	sl.busy = true
	sl.seq = seq
	sl.cached = false
	sl.reply = nil
	s.Client.expires = m.expiryLocked()
	res.Ref = &SlotRef{Session: s, Slot: slotID, Seq: seq, Cache: cache}
	return res, OK
}

// MaxCachedReply is the largest reply FinishSlot caches.
func (m *Manager) MaxCachedReply() int { return m.cfg.MaxCachedReply }

// FinishSlot releases a slot and stores the encoded reply, of size bytes,
// for replays (a reply too large to cache is remembered as uncached, and
// reply may then be nil).
func (m *Manager) FinishSlot(ref *SlotRef, reply []byte, size int) {
	m.lock()
	defer m.unlock()
	sl := &ref.Session.slots[ref.Slot]
	sl.busy = false
	if size <= m.cfg.MaxCachedReply {
		sl.cached = true
		sl.reply = reply
	}
}

// ---- stateids ----

// Special stateids (RFC 8881 §8.2.3).
var (
	anonOther   [12]byte
	bypassOther = [12]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

// IsAnonymous reports the all-zeros or all-ones special stateids, which
// read and write without open state.
func IsAnonymous(id nfsv4.Stateid4) bool {
	return id.Seqid == 0 && id.Other == anonOther || id.Seqid == 0xffffffff && id.Other == bypassOther
}

// IsCurrent reports the 4.1 "current stateid" special value.
func IsCurrent(id nfsv4.Stateid4) bool { return id.Seqid == 1 && id.Other == anonOther }

// Lookup resolves a stateid for an operation on ino. minor selects the
// seqid rules: in 4.1 a zero seqid matches any current seqid.
func (m *Manager) Lookup(id nfsv4.Stateid4, minor uint32) (*State, Status) {
	m.lock()
	defer m.unlock()
	return m.lookupLocked(id, minor)
}

func (m *Manager) lookupLocked(id nfsv4.Stateid4, minor uint32) (*State, Status) {
	if !bytes.Equal(id.Other[:4], m.boot[:]) {
		if minor == 0 {
			return nil, nfsv4.NFS4ERR_STALE_STATEID
		}
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	s := m.mu.states[id.Other]
	if s == nil {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	switch {
	case id.Seqid == 0 && minor > 0:
	case id.Seqid > s.Seqid:
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	case id.Seqid < s.Seqid:
		return nil, nfsv4.NFS4ERR_OLD_STATEID
	}
	s.Owner.Client.expires = m.expiryLocked()
	return s, OK
}

func (m *Manager) ownerLocked(c *Client, name []byte, lock bool) *Owner {
	k := ownerKey(lock, c.ID, name)
	o := c.owners[k]
	if o == nil {
		o = &Owner{Client: c, Name: append([]byte(nil), name...), Lock: lock}
		c.owners[k] = o
	}
	return o
}

// Client returns a confirmed, live client.
func (m *Manager) Client(id uint64) (*Client, Status) {
	m.lock()
	defer m.unlock()
	c := m.mu.clients[id]
	if c == nil || !c.Confirmed {
		return nil, nfsv4.NFS4ERR_STALE_CLIENTID
	}
	return c, OK
}

// Open records an OPEN of ino by the open-owner (c, owner): an existing
// open state of the same owner and file is upgraded (access and deny are
// unioned and its seqid bumped), else a new one is made. Share
// reservations of other owners are checked first.
func (m *Manager) Open(c *Client, owner []byte, ino uint64, access, deny uint32) (nfsv4.Stateid4, OpenUndo, Status) {
	return m.OpenSkipping(c, owner, ino, access, deny, nil)
}

// OpenSkipping is Open, except that an open state of the same owner and
// file for which closing(other) is true is neither upgraded nor checked
// for conflicts: it is being closed (a CLOSE earlier in a transaction,
// applied at its commit), so the OPEN gets a new state.
func (m *Manager) OpenSkipping(c *Client, owner []byte, ino uint64, access, deny uint32, closing func(other [12]byte) bool) (nfsv4.Stateid4, OpenUndo, Status) {
	m.lock()
	defer m.unlock()
	if m.mu.clients[c.ID] != c {
		return nfsv4.Stateid4{}, OpenUndo{}, nfsv4.NFS4ERR_EXPIRED
	}
	o := m.ownerLocked(c, owner, false)
	mine, denied := m.shareLocked(o, ino, access, deny, closing)
	if denied {
		return nfsv4.Stateid4{}, OpenUndo{}, nfsv4.NFS4ERR_SHARE_DENIED
	}
	c.expires = m.expiryLocked()
	if mine != nil {
		u := OpenUndo{s: mine, access: mine.Access, deny: mine.Deny, seqid: mine.Seqid}
		mine.Access |= access
		mine.Deny |= deny
		mine.Seqid++
		return mine.Stateid(), u, OK
	}
	s := &State{Other: m.newOtherLocked(), Seqid: 1, Kind: KindOpen, Ino: ino, Owner: o, Access: access, Deny: deny, Confirmed: true}
	m.mu.states[s.Other] = s
	m.mu.opens[ino] = append(m.mu.opens[ino], s)
	if len(m.mu.opens[ino]) == 1 {
		m.mu.deferred = append(m.mu.deferred, func() { m.cfg.Pin(ino) })
	}
	return s.Stateid(), OpenUndo{s: s, created: true}, OK
}

// CheckOpen returns the error OpenSkipping would refuse the same open
// with (NFS4ERR_EXPIRED, NFS4ERR_SHARE_DENIED), or OK, recording nothing:
// an OPEN checks it before it truncates the file.
func (m *Manager) CheckOpen(c *Client, owner []byte, ino uint64, access, deny uint32, closing func(other [12]byte) bool) Status {
	m.lock()
	defer m.unlock()
	if m.mu.clients[c.ID] != c {
		return nfsv4.NFS4ERR_EXPIRED
	}
	if _, denied := m.shareLocked(m.ownerLocked(c, owner, false), ino, access, deny, closing); denied {
		return nfsv4.NFS4ERR_SHARE_DENIED
	}
	return OK
}

// shareLocked returns open-owner o's open state of ino (nil if none, or
// if closing says it is being closed) and whether another owner's share
// reservation conflicts with access and deny.
func (m *Manager) shareLocked(o *Owner, ino uint64, access, deny uint32, closing func(other [12]byte) bool) (mine *State, denied bool) {
	for _, s := range m.mu.opens[ino] {
		if s.Owner == o {
			if closing == nil || !closing(s.Other) {
				mine = s
			}
			continue
		}
		if s.Deny&access != 0 || s.Access&deny != 0 {
			return nil, true
		}
	}
	return mine, false
}

// OpenUndo records what Open changed so a transactional compound that
// does not commit can reverse it.
type OpenUndo struct {
	s                   *State
	created             bool
	access, deny, seqid uint32
}

// UndoOpen reverses an Open: a state it created is freed; an upgraded
// one gets its previous access, deny and seqid back.
func (m *Manager) UndoOpen(u OpenUndo) {
	m.lock()
	defer m.unlock()
	if m.mu.states[u.s.Other] != u.s {
		return
	}
	if u.created {
		m.freeStateLocked(u.s.Other, u.s)
		return
	}
	u.s.Access, u.s.Deny, u.s.Seqid = u.access, u.deny, u.seqid
}

// CheckClose runs Close's checks without closing: it returns the state
// Close would free, or Close's error.
func (m *Manager) CheckClose(id nfsv4.Stateid4, minor uint32, ino uint64) (*State, Status) {
	m.lock()
	defer m.unlock()
	return m.checkCloseLocked(id, minor, ino)
}

// Close implements CLOSE: the open state and its lock states are freed.
func (m *Manager) Close(id nfsv4.Stateid4, minor uint32, ino uint64) (nfsv4.Stateid4, Status) {
	m.lock()
	defer m.unlock()
	s, st := m.checkCloseLocked(id, minor, ino)
	if st != OK {
		return nfsv4.Stateid4{}, st
	}
	m.freeStateLocked(s.Other, s)
	out := s.Stateid()
	out.Seqid++
	if minor > 0 {
		// RFC 8881 §18.2.4: the returned stateid is meaningless; use the
		// invalid special stateid.
		return nfsv4.Stateid4{Seqid: 0xffffffff}, OK
	}
	return out, OK
}

func (m *Manager) checkCloseLocked(id nfsv4.Stateid4, minor uint32, ino uint64) (*State, Status) {
	s, st := m.lookupLocked(id, minor)
	if st != OK {
		return nil, st
	}
	if s.Kind != KindOpen || s.Ino != ino {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	if minor == 0 && len(m.mu.locks[ino]) > 0 {
		for _, l := range m.mu.locks[ino] {
			if l.owner.Client == s.Owner.Client && m.lockOfOpenLocked(l.owner, s) {
				return nil, nfsv4.NFS4ERR_LOCKS_HELD
			}
		}
	}
	return s, OK
}

func (m *Manager) lockOfOpenLocked(o *Owner, open *State) bool {
	for _, s := range open.locks {
		if s.Owner == o && m.mu.states[s.Other] == s {
			return true
		}
	}
	return false
}

// Downgrade implements OPEN_DOWNGRADE.
func (m *Manager) Downgrade(id nfsv4.Stateid4, minor uint32, ino uint64, access, deny uint32) (nfsv4.Stateid4, Status) {
	m.lock()
	defer m.unlock()
	s, st := m.lookupLocked(id, minor)
	if st != OK {
		return nfsv4.Stateid4{}, st
	}
	if s.Kind != KindOpen || s.Ino != ino {
		return nfsv4.Stateid4{}, nfsv4.NFS4ERR_BAD_STATEID
	}
	if access&^s.Access != 0 || deny&^s.Deny != 0 || access == 0 {
		return nfsv4.Stateid4{}, nfsv4.NFS4ERR_INVAL
	}
	s.Access, s.Deny = access, deny
	s.Seqid++
	return s.Stateid(), OK
}

// Confirm implements OPEN_CONFIRM (4.0).
func (m *Manager) Confirm(id nfsv4.Stateid4, ino uint64) (nfsv4.Stateid4, Status) {
	m.lock()
	defer m.unlock()
	s, st := m.lookupLocked(id, 0)
	if st != OK {
		return nfsv4.Stateid4{}, st
	}
	if s.Kind != KindOpen || s.Ino != ino {
		return nfsv4.Stateid4{}, nfsv4.NFS4ERR_BAD_STATEID
	}
	s.Confirmed = true
	s.Seqid++
	return s.Stateid(), OK
}

// FreeStateid implements FREE_STATEID: only lock stateids without locks
// can be freed; open stateids must be closed.
func (m *Manager) FreeStateid(id nfsv4.Stateid4, c *Client) Status {
	m.lock()
	defer m.unlock()
	s, st := m.lookupLocked(id, 1)
	if st != OK {
		return st
	}
	if s.Owner.Client != c {
		return nfsv4.NFS4ERR_BAD_STATEID
	}
	if s.Kind == KindOpen {
		return nfsv4.NFS4ERR_LOCKS_HELD
	}
	for _, l := range m.mu.locks[s.Ino] {
		if l.owner == s.Owner {
			return nfsv4.NFS4ERR_LOCKS_HELD
		}
	}
	m.freeStateLocked(s.Other, s)
	return OK
}

// TestStateid implements one entry of TEST_STATEID.
func (m *Manager) TestStateid(id nfsv4.Stateid4, c *Client) Status {
	m.lock()
	defer m.unlock()
	s, st := m.lookupLocked(id, 1)
	if st != OK {
		return st
	}
	if s.Owner.Client != c {
		return nfsv4.NFS4ERR_BAD_STATEID
	}
	return OK
}

// CheckIO validates a stateid for READ/WRITE-like access to ino. It
// returns nil state for the anonymous stateids, which are subject to the
// share reservations of the file's opens: a write is refused with
// NFS4ERR_LOCKED while an open denies writing, a read with the all-zeros
// stateid while one denies reading; a read with the all-ones (READ
// bypass) stateid is not (RFC 8881 §8.2.3, §9.7; as Linux's nfsd).
func (m *Manager) CheckIO(id nfsv4.Stateid4, minor uint32, ino uint64, write bool) (*State, Status) {
	m.lock()
	defer m.unlock()
	if IsAnonymous(id) {
		deny := uint32(nfsv4.OPEN4_SHARE_DENY_READ)
		switch {
		case write:
			deny = nfsv4.OPEN4_SHARE_DENY_WRITE
		case id.Other == bypassOther:
			return nil, OK
		}
		for _, s := range m.mu.opens[ino] {
			if s.Deny&deny != 0 {
				return nil, nfsv4.NFS4ERR_LOCKED
			}
		}
		return nil, OK
	}
	s, st := m.lookupLocked(id, minor)
	if st != OK {
		return nil, st
	}
	if s.Ino != ino {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	open := s
	if s.Kind == KindLock {
		open = s.Open
	}
	if write && open.Access&nfsv4.OPEN4_SHARE_ACCESS_WRITE == 0 {
		return nil, nfsv4.NFS4ERR_OPENMODE
	}
	if minor == 0 && !open.Confirmed {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	return s, OK
}

// ReleaseLockOwner implements RELEASE_LOCKOWNER (4.0).
func (m *Manager) ReleaseLockOwner(clientID uint64, owner []byte) Status {
	m.lock()
	defer m.unlock()
	c := m.mu.clients[clientID]
	if c == nil {
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	o := c.owners[ownerKey(true, c.ID, owner)]
	if o == nil {
		return OK
	}
	for _, ls := range m.mu.locks {
		for _, l := range ls {
			if l.owner == o {
				return nfsv4.NFS4ERR_LOCKS_HELD
			}
		}
	}
	for other, s := range m.mu.states {
		if s.Owner == o {
			m.freeStateLocked(other, s)
		}
	}
	if o.hasRetired {
		delete(m.mu.retired, o.retired)
	}
	delete(c.owners, ownerKey(true, c.ID, owner))
	return OK
}

// ---- 4.0 owner sequencing (RFC 7530 §9.1.7) ----

// SeqidCheck is the outcome of checking a 4.0 owner seqid.
type SeqidCheck int

const (
	// SeqidNext: a new request (the next seqid, or any seqid for an
	// owner that has none yet); run it and call AdvanceSeqid.
	SeqidNext SeqidCheck = iota
	// SeqidReplay: a retransmission of the owner's last request; answer
	// with the reply CheckSeqid returns (nil if none was kept).
	SeqidReplay
	// SeqidBad: NFS4ERR_BAD_SEQID.
	SeqidBad
)

// OpenOwner returns client c's open-owner name, creating it.
func (m *Manager) OpenOwner(c *Client, name []byte) *Owner {
	m.lock()
	defer m.unlock()
	return m.ownerLocked(c, name, false)
}

// StateOwner returns the owner of the state id names — whatever id's
// seqid — or of the state its owner most recently closed or released
// (for retransmitted CLOSE and LOCKU). It returns nil if there is none.
func (m *Manager) StateOwner(id nfsv4.Stateid4) *Owner {
	m.lock()
	defer m.unlock()
	if s := m.mu.states[id.Other]; s != nil {
		return s.Owner
	}
	return m.mu.retired[id.Other]
}

// CheckSeqid classifies seqid for owner o.
func (m *Manager) CheckSeqid(o *Owner, seqid uint32) (SeqidCheck, any) {
	m.lock()
	defer m.unlock()
	switch {
	case !o.hasSeq || seqid == o.Seqid+1:
		return SeqidNext, nil
	case seqid == o.Seqid:
		return SeqidReplay, o.reply
	}
	return SeqidBad, nil
}

// AdvanceSeqid records that o's request seqid ran and produced reply. It
// returns a function that restores the previous record (for
// transactional compounds that do not commit).
func (m *Manager) AdvanceSeqid(o *Owner, seqid uint32, reply any) (undo func()) {
	m.lock()
	defer m.unlock()
	prevSeq, prevHas, prevReply := o.Seqid, o.hasSeq, o.reply
	o.Seqid, o.hasSeq, o.reply = seqid, true, reply
	return func() {
		m.lock()
		defer m.unlock()
		if o.Seqid == seqid && o.hasSeq {
			o.Seqid, o.hasSeq, o.reply = prevSeq, prevHas, prevReply
		}
	}
}

// SeqidExempt reports the errors after which a 4.0 owner's seqid does
// not advance (RFC 7530 §9.1.7).
func SeqidExempt(st Status) bool {
	switch st {
	case nfsv4.NFS4ERR_STALE_CLIENTID, nfsv4.NFS4ERR_STALE_STATEID, nfsv4.NFS4ERR_BAD_STATEID,
		nfsv4.NFS4ERR_BAD_SEQID, nfsv4.NFS4ERR_BADXDR, nfsv4.NFS4ERR_RESOURCE,
		nfsv4.NFS4ERR_NOFILEHANDLE, nfsv4.NFS4ERR_MOVED:
		return true
	}
	return false
}
