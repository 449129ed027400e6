package state

import (
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newManager(t *testing.T) (*Manager, *clock, *[]uint64) {
	t.Helper()
	ck := &clock{t: time.Unix(1000, 0)}
	var unpinned []uint64
	m, err := New(Config{Clock: ck.now, Lease: 10 * time.Second, Slots: 4,
		Unpin: func(ino uint64) { unpinned = append(unpinned, ino) }})
	if err != nil {
		t.Fatal(err)
	}
	return m, ck, &unpinned
}

func session(t *testing.T, m *Manager, owner string) (*Client, [16]byte) {
	t.Helper()
	r, st := m.ExchangeID([]byte(owner), [8]byte{1}, "p", false, 1)
	if st != OK || r.Confirmed {
		t.Fatalf("EXCHANGE_ID %d confirmed=%v", st, r.Confirmed)
	}
	cs, st := m.CreateSession(r.ClientID, r.Seq, "p", ChannelAttrs{MaxRequests: 100, MaxOps: 8})
	if st != OK {
		t.Fatalf("CREATE_SESSION %d", st)
	}
	// A replayed CREATE_SESSION returns the same session.
	cs2, st := m.CreateSession(r.ClientID, r.Seq, "p", ChannelAttrs{})
	if st != OK || cs2.SessionID != cs.SessionID {
		t.Fatal("CREATE_SESSION replay")
	}
	if _, st := m.CreateSession(r.ClientID, r.Seq+5, "p", ChannelAttrs{}); st != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Fatalf("misordered CREATE_SESSION %d", st)
	}
	c, _ := m.Client(r.ClientID)
	return c, cs.SessionID
}

func TestSlotTable(t *testing.T) {
	m, _, _ := newManager(t)
	_, sid := session(t, m, "a")
	// Slots are clamped to Config.Slots.
	if _, st := m.Sequence(sid, 4, 1, true); st != nfsv4.NFS4ERR_BADSLOT {
		t.Fatalf("slot 4: %d", st)
	}
	r, st := m.Sequence(sid, 0, 1, true)
	if st != OK || r.Ref == nil || r.HighestSlot != 3 {
		t.Fatalf("first: %d %+v", st, r)
	}
	// In progress: the retransmission waits.
	if _, st := m.Sequence(sid, 0, 1, true); st != nfsv4.NFS4ERR_DELAY {
		t.Fatalf("in progress: %d", st)
	}
	m.FinishSlot(r.Ref, []byte("reply-1"), 7)
	r2, st := m.Sequence(sid, 0, 1, true)
	if st != OK || string(r2.Replay) != "reply-1" || r2.Ref != nil {
		t.Fatalf("replay: %d %+v", st, r2)
	}
	for _, bad := range []uint32{0, 3, 1 << 31} {
		if _, st := m.Sequence(sid, 0, bad, true); st != nfsv4.NFS4ERR_SEQ_MISORDERED {
			t.Fatalf("seq %d: %d", bad, st)
		}
	}
	r3, st := m.Sequence(sid, 0, 2, false)
	if st != OK {
		t.Fatal(st)
	}
	m.FinishSlot(r3.Ref, nil, 1<<20) // too big to cache
	if _, st := m.Sequence(sid, 0, 2, false); st != nfsv4.NFS4ERR_RETRY_UNCACHED_REP {
		t.Fatalf("uncached replay: %d", st)
	}
	// Slots are independent.
	if _, st := m.Sequence(sid, 1, 1, true); st != OK {
		t.Fatalf("slot 1: %d", st)
	}
	if st := m.DestroySession(sid); st != OK {
		t.Fatal(st)
	}
	if _, st := m.Sequence(sid, 0, 3, true); st != nfsv4.NFS4ERR_BADSESSION {
		t.Fatalf("destroyed: %d", st)
	}
}

func TestExchangeIDCases(t *testing.T) {
	m, _, _ := newManager(t)
	c, _ := session(t, m, "x")
	// Same owner, verifier, principal: same confirmed client.
	r, st := m.ExchangeID([]byte("x"), [8]byte{1}, "p", false, 1)
	if st != OK || r.ClientID != c.ID || !r.Confirmed {
		t.Fatalf("case 2: %d %+v", st, r)
	}
	// A rebooted client (new verifier) gets a new unconfirmed id; the old
	// record goes away when the new one is confirmed.
	r2, st := m.ExchangeID([]byte("x"), [8]byte{2}, "p", false, 1)
	if st != OK || r2.ClientID == c.ID || r2.Confirmed {
		t.Fatalf("reboot: %d %+v", st, r2)
	}
	if _, st := m.CreateSession(r2.ClientID, r2.Seq, "p", ChannelAttrs{MaxRequests: 1}); st != OK {
		t.Fatal(st)
	}
	if _, st := m.Client(c.ID); st != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Fatalf("old client still there: %d", st)
	}
	// Another principal cannot take over a client with state.
	if _, st := m.ExchangeID([]byte("x"), [8]byte{3}, "intruder", false, 1); st != nfsv4.NFS4ERR_CLID_INUSE {
		t.Fatalf("principal change: %d", st)
	}
	// Update of an unknown client.
	if _, st := m.ExchangeID([]byte("nobody"), [8]byte{1}, "p", true, 1); st != nfsv4.NFS4ERR_NOENT {
		t.Fatalf("update unknown: %d", st)
	}
}

func TestLeaseExpiryReleasesState(t *testing.T) {
	m, ck, unpinned := newManager(t)
	c, sid := session(t, m, "l")
	id, _, st := m.Open(c, []byte("o"), 42, nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0)
	if st != OK {
		t.Fatal(st)
	}
	ck.t = ck.t.Add(9 * time.Second)
	m.Tick()
	if _, st := m.Lookup(id, 1); st != OK { // also renews
		t.Fatalf("before expiry: %d", st)
	}
	ck.t = ck.t.Add(9 * time.Second)
	m.Tick()
	if _, st := m.Lookup(id, 1); st != OK {
		t.Fatalf("renewed lease: %d", st)
	}
	ck.t = ck.t.Add(11 * time.Second)
	m.Tick()
	if _, st := m.Lookup(id, 1); st != nfsv4.NFS4ERR_BAD_STATEID {
		t.Fatalf("after expiry: %d", st)
	}
	if _, st := m.Sequence(sid, 0, 1, true); st != nfsv4.NFS4ERR_BADSESSION {
		t.Fatalf("session after expiry: %d", st)
	}
	if len(*unpinned) != 1 || (*unpinned)[0] != 42 {
		t.Fatalf("unpinned %v", *unpinned)
	}
}

func TestLocks(t *testing.T) {
	m, _, _ := newManager(t)
	a, _ := session(t, m, "a")
	b, _ := session(t, m, "b")
	oa, _, _ := m.Open(a, []byte("o"), 7, nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0)
	ob, _, _ := m.Open(b, []byte("o"), 7, nfsv4.OPEN4_SHARE_ACCESS_READ, 0)
	la, _, st := m.Lock(LockArgs{Ino: 7, Write: true, Offset: 0, Length: 100, NewOwner: true, OpenStateid: oa, OwnerName: []byte("la")}, 1)
	if st != OK {
		t.Fatal(st)
	}
	// B cannot read-lock inside, can outside; B cannot write-lock: its open is read-only.
	if _, d, st := m.Lock(LockArgs{Ino: 7, Offset: 50, Length: 1, NewOwner: true, OpenStateid: ob, OwnerName: []byte("lb")}, 1); st != nfsv4.NFS4ERR_DENIED || d.Offset != 0 || d.Length != 100 {
		t.Fatalf("conflict: %d %+v", st, d)
	}
	lb, _, st := m.Lock(LockArgs{Ino: 7, Offset: 100, Length: ^uint64(0), NewOwner: true, OpenStateid: ob, OwnerName: []byte("lb")}, 1)
	if st != OK {
		t.Fatalf("to EOF: %d", st)
	}
	if _, _, st := m.Lock(LockArgs{Ino: 7, Write: true, LockStateid: lb, Offset: 200, Length: 1}, 1); st != nfsv4.NFS4ERR_OPENMODE {
		t.Fatalf("write lock on read open: %d", st)
	}
	// Unlocking the middle splits A's range: 40..59 becomes free.
	if _, st := m.Unlock(la, 1, 7, 40, 20); st != OK {
		t.Fatal(st)
	}
	if d, st := m.TestLock(7, b.ID, []byte("lb"), false, 45, 10); st != OK {
		t.Fatalf("hole after split: %d %+v", st, d)
	}
	if _, st := m.TestLock(7, b.ID, []byte("lb"), false, 30, 20); st != nfsv4.NFS4ERR_DENIED {
		t.Fatalf("left part: %d", st)
	}
	if _, st := m.TestLock(7, b.ID, []byte("lb"), false, 60, 1); st != nfsv4.NFS4ERR_DENIED {
		t.Fatalf("right part: %d", st)
	}
	// Zero length and overflowing ranges are invalid.
	if _, st := m.TestLock(7, b.ID, nil, false, 0, 0); st != nfsv4.NFS4ERR_INVAL {
		t.Fatal(st)
	}
	if _, st := m.TestLock(7, b.ID, nil, false, ^uint64(0)-1, 10); st != nfsv4.NFS4ERR_INVAL {
		t.Fatal(st)
	}
	// FREE_STATEID refuses a lock stateid that holds locks.
	if st := m.FreeStateid(lb, b); st != nfsv4.NFS4ERR_LOCKS_HELD {
		t.Fatalf("free with locks: %d", st)
	}
	// Closing the open releases its lock state and locks.
	if _, st := m.Close(oa, 1, 7); st != OK {
		t.Fatal(st)
	}
	if _, st := m.TestLock(7, b.ID, []byte("lb"), true, 0, 10); st != OK {
		t.Fatalf("locks survive close: %d", st)
	}
}

func TestUndoOpen(t *testing.T) {
	m, _, unpinned := newManager(t)
	c, _ := session(t, m, "u")
	id, u, _ := m.Open(c, []byte("o"), 9, nfsv4.OPEN4_SHARE_ACCESS_READ, 0)
	id2, u2, _ := m.Open(c, []byte("o"), 9, nfsv4.OPEN4_SHARE_ACCESS_WRITE, 0)
	if id2.Seqid != id.Seqid+1 {
		t.Fatal("upgrade did not bump seqid")
	}
	m.UndoOpen(u2)
	s, st := m.Lookup(id, 1)
	if st != OK || s.Access != nfsv4.OPEN4_SHARE_ACCESS_READ || s.Seqid != id.Seqid {
		t.Fatalf("undo upgrade: %d %+v", st, s)
	}
	m.UndoOpen(u)
	if _, st := m.Lookup(id, 1); st != nfsv4.NFS4ERR_BAD_STATEID {
		t.Fatalf("undo create: %d", st)
	}
	if len(*unpinned) != 1 {
		t.Fatalf("unpinned %v", *unpinned)
	}
}

// TestOwnerSeqid checks 4.0 owner sequencing (RFC 7530 §9.1.7) in the
// state machine: first use, next, replay, bad, the undo of an advance,
// wrap-around, and that a closed state still names its owner until the
// owner closes another or its client goes away.
func TestOwnerSeqid(t *testing.T) {
	m, ck, _ := newManager(t)
	id, verf := m.SetClientID([]byte("c40"), [8]byte{4}, "p")
	if st := m.SetClientIDConfirm(id, verf, "p"); st != OK {
		t.Fatal(st)
	}
	c, _ := m.Client(id)
	o := m.OpenOwner(c, []byte("oo"))
	if chk, _ := m.CheckSeqid(o, 77); chk != SeqidNext {
		t.Fatalf("first use: %v", chk)
	}
	m.AdvanceSeqid(o, 77, "reply-77")
	if chk, r := m.CheckSeqid(o, 77); chk != SeqidReplay || r != "reply-77" {
		t.Fatalf("replay: %v %v", chk, r)
	}
	for _, bad := range []uint32{76, 79, 0} {
		if chk, _ := m.CheckSeqid(o, bad); chk != SeqidBad {
			t.Fatalf("seqid %d: %v", bad, chk)
		}
	}
	undo := m.AdvanceSeqid(o, 78, "reply-78")
	undo()
	if chk, r := m.CheckSeqid(o, 77); chk != SeqidReplay || r != "reply-77" {
		t.Fatalf("after undo: %v %v", chk, r)
	}
	m.AdvanceSeqid(o, 0xffffffff, "max")
	if chk, _ := m.CheckSeqid(o, 0); chk != SeqidNext {
		t.Fatal("seqid does not wrap to 0")
	}

	sid, _, st := m.Open(c, []byte("oo"), 42, nfsv4.OPEN4_SHARE_ACCESS_READ, 0)
	if st != OK {
		t.Fatal(st)
	}
	if m.StateOwner(sid) != o {
		t.Fatal("StateOwner of an open state")
	}
	if _, st := m.Close(sid, 0, 42); st != OK {
		t.Fatal(st)
	}
	if m.StateOwner(sid) != o {
		t.Fatal("a closed state no longer names its owner")
	}
	sid2, _, _ := m.Open(c, []byte("oo"), 43, nfsv4.OPEN4_SHARE_ACCESS_READ, 0)
	m.Close(sid2, 0, 43)
	if m.StateOwner(sid) != nil || m.StateOwner(sid2) != o {
		t.Fatal("only the last closed state is remembered")
	}
	ck.t = ck.t.Add(time.Minute)
	m.Tick()
	if m.StateOwner(sid2) != nil || len(m.mu.retired) != 0 {
		t.Fatal("retired states outlive their client")
	}
}
