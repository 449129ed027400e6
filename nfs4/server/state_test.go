package server_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// lockOp is LOCK by a new lock-owner; in 4.0 openSeq is the open-owner's
// next seqid (4.1 ignores it).
func lockOp(c *testclient.Client, write bool, off, n uint64, open nfsv4.Stateid4, owner string, openSeq uint32) nfsv4.NfsArgop4 {
	lt := nfsv4.READ_LT
	if write {
		lt = nfsv4.WRITE_LT
	}
	return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: lt, Offset: off, Length: n,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: openSeq, OpenStateid: open,
			LockOwner: nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte(owner)}}}}}
}

func TestNFSv40OpenReadWriteLocks(t *testing.T) {
	ts := startServer(t)
	a, b := ts.dial(t), ts.dial(t)
	if err := a.SetClientID("client-a"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetClientID("client-b"); err != nil {
		t.Fatal(err)
	}
	rep := okT(t)(a.Compound(putroot(), openCreate(a, "f"), getfh()))
	sidA := openSid(t, rep.Results[1])
	fh := fhOf(t, rep.Results[2])
	okT(t)(a.Compound(putfh(fh), write(sidA, 0, []byte("hello v4.0"))))
	rep = okT(t)(b.Compound(putroot(), openWith(b, "f", "ob", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, nil)))
	sidB := openSid(t, rep.Results[1])
	rep = okT(t)(b.Compound(putfh(fh), read(sidB, 0, 100)))
	if d, eof := readData(t, rep.Results[1]); string(d) != "hello v4.0" || !eof {
		t.Fatalf("read %q eof=%v", d, eof)
	}
	// A write lock by A conflicts with B's read lock on an overlapping range.
	rep = okT(t)(a.Compound(putfh(fh), lockOp(a, true, 0, 5, sidA, "la", 1)))
	lockA := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid
	rep, err := b.Compound(putfh(fh), lockOp(b, false, 4, 10, sidB, "lb", 1))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_DENIED)
	d := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4ERR_DENIED).Denied
	if d.Offset != 0 || d.Length != 5 || d.Locktype != nfsv4.WRITE_LT {
		t.Fatalf("denied %+v", d)
	}
	// Non-overlapping is fine; LOCKT sees the conflict too.
	okT(t)(b.Compound(putfh(fh), lockOp(b, false, 5, 10, sidB, "lb", 2)))
	rep, err = b.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT, Offset: 0, Length: 1,
		Owner: nfsv4.StateOwner4{Clientid: b.ClientID, Owner: []byte("lb")}}})
	wantStatus(t, rep, err, nfsv4.NFS4ERR_DENIED)
	// After LOCKU the range is free.
	okT(t)(a.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT,
		Seqid: 1, LockStateid: lockA, Offset: 0, Length: 5}}))
	okT(t)(b.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT, Offset: 0, Length: 1,
		Owner: nfsv4.StateOwner4{Clientid: b.ClientID, Owner: []byte("lb")}}}))
	// RENEW, CLOSE, then the old stateid is bad.
	okT(t)(a.CompoundRaw(0, false, &nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: a.ClientID}}))
	okT(t)(a.Compound(putfh(fh), closeSeq(sidA, 2)))
	rep, err = a.Compound(putfh(fh), read(sidA, 0, 1))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BAD_STATEID)
	// An unknown client id.
	rep, err = a.CompoundRaw(0, false, &nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: 12345}})
	wantStatus(t, rep, err, nfsv4.NFS4ERR_STALE_CLIENTID)
}

func TestStateidRules41(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "sid")
	rep := okT(t)(c.Compound(putroot(), openCreate(c, "f"), getfh()))
	sid := openSid(t, rep.Results[1])
	fh := fhOf(t, rep.Results[2])
	// Upgrade the open: seqid advances; the old seqid is OLD_STATEID, a
	// future one BAD_STATEID, seqid 0 means "current".
	rep = okT(t)(c.Compound(putroot(), openCreate(c, "f")))
	sid2 := openSid(t, rep.Results[1])
	if sid2.Other != sid.Other || sid2.Seqid != sid.Seqid+1 {
		t.Fatalf("upgrade: %+v then %+v", sid, sid2)
	}
	r, err := c.Compound(putfh(fh), read(sid, 0, 1))
	wantStatus(t, r, err, nfsv4.NFS4ERR_OLD_STATEID)
	future := sid2
	future.Seqid += 5
	r, err = c.Compound(putfh(fh), read(future, 0, 1))
	wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
	zero := sid2
	zero.Seqid = 0
	okT(t)(c.Compound(putfh(fh), read(zero, 0, 1)))
	// A forged "other" is BAD_STATEID; the current stateid without one set
	// is BAD_STATEID.
	forged := sid2
	forged.Other[11] ^= 0xff
	r, err = c.Compound(putfh(fh), read(forged, 0, 1))
	wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
	r, err = c.Compound(putfh(fh), read(current, 0, 1))
	wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
	// TEST_STATEID and FREE_STATEID.
	rep = okT(t)(c.Compound(&nfsv4.NfsArgop4_OP_TEST_STATEID{OptestStateid: nfsv4.TestStateid4args{TsStateids: []nfsv4.Stateid4{sid2, forged}}}))
	codes := rep.Results[0].(*nfsv4.NfsResop4_OP_TEST_STATEID).OptestStateid.(*nfsv4.TestStateid4res_NFS4_OK).TsrResok4.TsrStatusCodes
	if codes[0] != nfsv4.NFS4_OK || codes[1] != nfsv4.NFS4ERR_BAD_STATEID {
		t.Fatalf("TEST_STATEID %v", codes)
	}
	// A read-only open cannot write.
	rep = okT(t)(c.Compound(putroot(), openWith(c, "f", "ro", nfsv4.OPEN4_SHARE_ACCESS_READ, 0, nil)))
	ro := openSid(t, rep.Results[1])
	r, err = c.Compound(putfh(fh), write(ro, 0, []byte("x")))
	wantStatus(t, r, err, nfsv4.NFS4ERR_OPENMODE)
	// Share reservations: deny-write blocks another owner's write open.
	r, err = c.Compound(putroot(), openWith(c, "f", "denier", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE, nil))
	wantStatus(t, r, err, nfsv4.NFS4ERR_SHARE_DENIED) // "owner" already has write access
	okT(t)(c.Compound(putfh(fh), closeOp(sid2)))
	okT(t)(c.Compound(putroot(), openWith(c, "f", "denier", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE, nil)))
	r, err = c.Compound(putroot(), openWith(c, "f", "writer", nfsv4.OPEN4_SHARE_ACCESS_WRITE, 0, nil))
	wantStatus(t, r, err, nfsv4.NFS4ERR_SHARE_DENIED)
}

func TestExclusiveCreate(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "excl")
	how := &nfsv4.Createhow4_EXCLUSIVE4_1{ChCreateboth: nfsv4.Creatverfattr{CvaVerf: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}}
	okT(t)(c.Compound(putroot(), openWith(c, "x", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, how)))
	// A retransmission with the same verifier succeeds; another verifier
	// gets EXIST; GUARDED4 gets EXIST.
	okT(t)(c.Compound(putroot(), openWith(c, "x", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, how)))
	other := &nfsv4.Createhow4_EXCLUSIVE4_1{ChCreateboth: nfsv4.Creatverfattr{CvaVerf: [8]byte{9}}}
	r, err := c.Compound(putroot(), openWith(c, "x", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, other))
	wantStatus(t, r, err, nfsv4.NFS4ERR_EXIST)
	r, err = c.Compound(putroot(), openWith(c, "x", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, &nfsv4.Createhow4_GUARDED4{}))
	wantStatus(t, r, err, nfsv4.NFS4ERR_EXIST)
	r, err = c.Compound(putroot(), openWith(c, "nope", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, nil))
	wantStatus(t, r, err, nfsv4.NFS4ERR_NOENT)
	okT(t)(c.Compound(putroot(), mkdir("d")))
	r, err = c.Compound(putroot(), openWith(c, "d", "o", nfsv4.OPEN4_SHARE_ACCESS_READ, 0, nil))
	wantStatus(t, r, err, nfsv4.NFS4ERR_ISDIR)
}

func TestLeaseExpiry(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "lease")
	rep := okT(t)(c.Compound(putroot(), openCreate(c, "f"), getfh()))
	sid := openSid(t, rep.Results[1])
	fh := fhOf(t, rep.Results[2])
	// Within the lease everything works; SEQUENCE renews.
	ts.clock.Advance(60 * time.Second)
	okT(t)(c.Compound(putfh(fh), read(sid, 0, 1)))
	ts.clock.Advance(60 * time.Second)
	okT(t)(c.Compound(putfh(fh), read(sid, 0, 1)))
	// A silent client loses its lease, its session and its opens.
	ts.clock.Advance(91 * time.Second)
	other := ts.session(t, 1, "other") // any request triggers expiry
	r, err := other.Compound(putfh(fh), read(sid, 0, 1))
	wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
	r, err = c.Compound(putroot())
	wantStatus(t, r, err, nfsv4.NFS4ERR_BADSESSION)
}

func TestNFSv42Ops(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 2, "v42")
	data := bytes.Repeat([]byte("0123456789"), 10000)
	writeFile(t, c, "src", data)
	writeFile(t, c, "dst", nil)
	// COPY all of src into dst.
	rep := okT(t)(c.Compound(putroot(), lookup("src"), savefh(), putroot(), lookup("dst"),
		&nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{CaSynchronous: true}}))
	n := rep.Results[5].(*nfsv4.NfsResop4_OP_COPY).Opcopy.(*nfsv4.Copy4res_NFS4_OK).CrResok4.CrResponse.WrCount
	if n != uint64(len(data)) {
		t.Fatalf("copied %d", n)
	}
	got := readAll(t, c, "dst")
	if !bytes.Equal(got, data) {
		t.Fatalf("dst differs (%d bytes)", len(got))
	}
	// CLONE a range, DEALLOCATE a range, SEEK finds the hole.
	okT(t)(c.Compound(putroot(), lookup("src"), savefh(), putroot(), lookup("dst"),
		&nfsv4.NfsArgop4_OP_CLONE{Opclone: nfsv4.Clone4args{ClSrcOffset: 0, ClDstOffset: 50000, ClCount: 10}}))
	got = readAll(t, c, "dst")
	if string(got[50000:50010]) != "0123456789" {
		t.Fatalf("clone: %q", got[50000:50010])
	}
	// A CLONE past the source's end is refused, also when offset+count
	// wraps past 2^64.
	r, err := c.Compound(putroot(), lookup("src"), savefh(), putroot(), lookup("dst"),
		&nfsv4.NfsArgop4_OP_CLONE{Opclone: nfsv4.Clone4args{ClSrcOffset: 10, ClDstOffset: 0, ClCount: math.MaxUint64 - 5}})
	wantStatus(t, r, err, nfsv4.NFS4ERR_INVAL)
	okT(t)(c.Compound(putroot(), lookup("dst"), &nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{DaOffset: 8192, DaLength: 8192}}))
	got = readAll(t, c, "dst")
	if !bytes.Equal(got[8192:16384], make([]byte, 8192)) || len(got) != len(data) {
		t.Fatal("deallocate did not zero the range")
	}
	rep = okT(t)(c.Compound(putroot(), lookup("dst"), &nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaOffset: 0, SaWhat: nfsv4.NFS4_CONTENT_HOLE}}))
	if off := rep.Results[2].(*nfsv4.NfsResop4_OP_SEEK).Opseek.(*nfsv4.Seek4res_NFS4_OK).Resok4.SrOffset; off > 8192 {
		t.Fatalf("hole at %d", off)
	}
	r, err = c.Compound(putroot(), lookup("dst"), &nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaOffset: 1 << 40, SaWhat: nfsv4.NFS4_CONTENT_DATA}})
	wantStatus(t, r, err, nfsv4.NFS4ERR_NXIO)
	// ALLOCATE extends; READ_PLUS reads.
	okT(t)(c.Compound(putroot(), lookup("dst"), &nfsv4.NfsArgop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4args{AaOffset: 0, AaLength: 200000}}))
	rep = okT(t)(c.Compound(putroot(), lookup("dst"), &nfsv4.NfsArgop4_OP_READ_PLUS{OpreadPlus: nfsv4.ReadPlus4args{RpaOffset: 0, RpaCount: 10}}))
	rp := rep.Results[2].(*nfsv4.NfsResop4_OP_READ_PLUS).OpreadPlus.(*nfsv4.ReadPlus4res_NFS4_OK).RpResok4
	if len(rp.RprContents) != 1 || string(rp.RprContents[0].(*nfsv4.ReadPlusContent_NFS4_CONTENT_DATA).RpcData.DData) != "0123456789" {
		t.Fatalf("READ_PLUS %+v", rp)
	}
	rep = okT(t)(c.Compound(putroot(), lookup("dst"), getattr(nfsv4.FATTR4_SIZE)))
	if v := attrVals(t, rep.Results[2]).AttrVals; v[5] != 0x03 || v[6] != 0x0d || v[7] != 0x40 { // 200000
		t.Fatalf("size %x", v)
	}
}

// readAll reads a file in 64 KiB READs.
func readAll(t *testing.T, c *testclient.Client, name string) []byte {
	t.Helper()
	var out []byte
	for {
		rep := okT(t)(c.Compound(putroot(), lookup(name), read(anon, uint64(len(out)), 64<<10)))
		d, eof := readData(t, rep.Results[2])
		out = append(out, d...)
		if eof || len(d) == 0 {
			return out
		}
	}
}

func closeSeq(sid nfsv4.Stateid4, seq uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{Seqid: seq, OpenStateid: sid}}
}

func openSeq(c *testclient.Client, name string, seq uint32, create bool) nfsv4.NfsArgop4 {
	var how nfsv4.Openflag4 = &nfsv4.Openflag4_default{}
	if create {
		how = &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{}}
	}
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: seq,
		ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_BOTH, ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE,
		Owner:   nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte("seq-owner")},
		Openhow: how, Claim: &nfsv4.OpenClaim4_CLAIM_NULL{File: name}}}
}

func lockuSeq(sid nfsv4.Stateid4, seq uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT, Seqid: seq,
		LockStateid: sid, Offset: 0, Length: 1}}
}

// TestNFSv40Seqid checks open-owner and lock-owner sequencing (RFC 7530
// §9.1.7): the next seqid runs, the last one replays the cached reply
// (also for a CLOSE whose state is gone), others are BAD_SEQID; errors
// advance the seqid except the exempt ones; a new lock-owner starts at
// lock_seqid; 4.1 ignores seqids.
func TestNFSv40Seqid(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	if err := c.SetClientID("seq"); err != nil {
		t.Fatal(err)
	}
	// A new owner may start anywhere.
	rep := okT(t)(c.Compound(putroot(), openSeq(c, "f", 5, true), getfh()))
	sid, fh := openSid(t, rep.Results[1]), fhOf(t, rep.Results[2])
	// A retransmission replays: same stateid (no upgrade), and the
	// current file handle is the opened file's.
	rep = okT(t)(c.Compound(putroot(), openSeq(c, "f", 5, true), getfh()))
	if got := openSid(t, rep.Results[1]); got != sid {
		t.Fatalf("replayed OPEN gave %+v, want %+v", got, sid)
	}
	if !bytes.Equal(fhOf(t, rep.Results[2]), fh) {
		t.Fatal("replayed OPEN left another current file handle")
	}
	rep, err := c.Compound(putroot(), openSeq(c, "f", 7, true))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BAD_SEQID)
	// A failure advances the seqid and is replayed as such.
	rep, err = c.Compound(putroot(), openSeq(c, "missing", 6, false))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOENT)
	rep, err = c.Compound(putroot(), openSeq(c, "missing", 6, false))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOENT)
	// ... except the exempt errors (here NOFILEHANDLE).
	rep, err = c.Compound(openSeq(c, "f", 7, false))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOFILEHANDLE)
	rep = okT(t)(c.Compound(putroot(), openSeq(c, "f", 7, false)))
	sid = openSid(t, rep.Results[1]) // upgraded: seqid 2
	if sid.Seqid != 2 {
		t.Fatalf("upgrade gave stateid seqid %d", sid.Seqid)
	}

	// Lock-owner sequencing.
	rep = okT(t)(c.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Length: 1,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: 8, OpenStateid: sid, LockSeqid: 10,
			LockOwner: nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte("lo")}}}}}))
	lsid := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid
	rep = okT(t)(c.Compound(putfh(fh), lockuSeq(lsid, 11)))
	after := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCKU).Oplocku.(*nfsv4.Locku4res_NFS4_OK).LockStateid
	rep = okT(t)(c.Compound(putfh(fh), lockuSeq(lsid, 11)))
	if got := rep.Results[1].(*nfsv4.NfsResop4_OP_LOCKU).Oplocku.(*nfsv4.Locku4res_NFS4_OK).LockStateid; got != after {
		t.Fatalf("replayed LOCKU gave %+v, want %+v", got, after)
	}
	rep, err = c.Compound(putfh(fh), lockuSeq(after, 13))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BAD_SEQID)

	// CLOSE, then its retransmission, replayed although the state is
	// gone; a new CLOSE of it is BAD_STATEID.
	rep = okT(t)(c.Compound(putfh(fh), closeSeq(sid, 9)))
	closed := rep.Results[1].(*nfsv4.NfsResop4_OP_CLOSE).Opclose.(*nfsv4.Close4res_NFS4_OK).OpenStateid
	rep = okT(t)(c.Compound(putfh(fh), closeSeq(sid, 9)))
	if got := rep.Results[1].(*nfsv4.NfsResop4_OP_CLOSE).Opclose.(*nfsv4.Close4res_NFS4_OK).OpenStateid; got != closed {
		t.Fatalf("replayed CLOSE gave %+v, want %+v", got, closed)
	}
	rep, err = c.Compound(putfh(fh), closeSeq(sid, 10))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BAD_STATEID)

	// 4.1 ignores open-owner seqids.
	s := ts.session(t, 1, "seq41")
	okT(t)(s.Compound(putroot(), openSeq(s, "g", 3, true)))
	rep = okT(t)(s.Compound(putroot(), openSeq(s, "g", 3, true)))
	if openSid(t, rep.Results[1]).Seqid != 2 {
		t.Fatal("4.1 OPEN with a repeated seqid was replayed")
	}
}
