package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

// openPrev is OPEN with CLAIM_PREVIOUS (a reclaim of the current file).
func openPrev(c *testclient.Client, owner string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_BOTH,
		ShareDeny:   nfsv4.OPEN4_SHARE_DENY_NONE,
		Owner:       nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte(owner)},
		Openhow:     &nfsv4.Openflag4_default{},
		Claim:       &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: nfsv4.OPEN_DELEGATE_NONE},
	}}
}

// lockNew is LOCK of [off, off+10) by a new lock owner of open stateid sid.
func lockNew(c *testclient.Client, sid nfsv4.Stateid4, lockOwner string, off uint64, reclaim bool) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{
		Locktype: nfsv4.WRITE_LT, Reclaim: reclaim, Offset: off, Length: 10,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{
			OpenStateid: sid, LockOwner: nfsv4.LockOwner4{Clientid: c.ClientID, Owner: []byte(lockOwner)}}},
	}}
}

func reclaimComplete() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{} }

func graceConfig(dir string) func(*server.Config) {
	return func(cfg *server.Config) {
		cfg.StateDir = dir
		cfg.Lease = time.Minute
		cfg.Grace = 5 * time.Second
	}
}

// recorded returns the owners in the client-record file (hex lines).
func recorded(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "nfs4-clients"))
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) - 1
}

// TestGraceReclaim restarts the server with two recorded clients (4.1
// "gx", 4.0 "gy") and checks the grace period (fake clock): new opens and
// locks get GRACE, recorded clients reclaim opens and locks, an unrecorded
// client's reclaim and one after RECLAIM_COMPLETE get NO_GRACE, the grace
// period lasts while a 4.0 client may still reclaim, and when its time is
// up everything is normal again and the records of clients that did not
// come back are dropped.
func TestGraceReclaim(t *testing.T) {
	dir := t.TempDir()
	ts := startServerDir(t, dir, graceConfig(dir))
	x := ts.session(t, 1, "gx")
	rep := okT(t)(x.Compound(putroot(), openCreate(x, "f"), getfh()))
	fh := fhOf(t, rep.Results[2])
	y := ts.dial(t)
	if err := y.SetClientID("gy"); err != nil {
		t.Fatal(err)
	}
	d := ts.session(t, 1, "gone") // destroys itself: not recorded
	okT(t)(d.CompoundRaw(1, false, &nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: d.SessionID}}))
	okT(t)(d.CompoundRaw(1, false, &nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: d.ClientID}}))
	if n := recorded(t, dir); n != 2 {
		t.Fatalf("%d client records, want 2", n)
	}
	ts.stop()

	ts = startServerDir(t, dir, graceConfig(dir))
	z := ts.session(t, 1, "gz")
	r, err := z.Compound(putroot(), openCreate(z, "new"))
	wantStatus(t, r, err, nfsv4.NFS4ERR_GRACE)
	r, err = z.Compound(putfh(fh), openPrev(z, "owner"))
	wantStatus(t, r, err, nfsv4.NFS4ERR_NO_GRACE) // gz was not recorded

	x = ts.session(t, 1, "gx")
	rep = okT(t)(x.Compound(putfh(fh), openPrev(x, "owner")))
	sid := openSid(t, rep.Results[1])
	okT(t)(x.Compound(putfh(fh), lockNew(x, sid, "lo1", 0, true)))
	r, err = x.Compound(putfh(fh), lockNew(x, sid, "lo2", 100, false))
	wantStatus(t, r, err, nfsv4.NFS4ERR_GRACE)
	okT(t)(x.Compound(reclaimComplete()))
	r, err = x.Compound(putfh(fh), openPrev(x, "other"))
	wantStatus(t, r, err, nfsv4.NFS4ERR_NO_GRACE) // after RECLAIM_COMPLETE

	// The 4.0 client reclaims too; it cannot say it is done, so the
	// grace period goes on.
	y = ts.dial(t)
	if err := y.SetClientID("gy"); err != nil {
		t.Fatal(err)
	}
	open40 := openPrev(y, "o40").(*nfsv4.NfsArgop4_OP_OPEN)
	rep = okT(t)(y.CompoundRaw(0, false, putfh(fh), open40))
	if st := openSid(t, rep.Results[1]); st.Seqid == 0 {
		t.Fatalf("4.0 reclaim stateid %+v", st)
	}
	r, err = z.Compound(putroot(), openCreate(z, "new"))
	wantStatus(t, r, err, nfsv4.NFS4ERR_GRACE)

	ts.clock.Advance(6 * time.Second)
	okT(t)(z.Compound(putroot(), openCreate(z, "new")))
	okT(t)(x.Compound(putfh(fh), lockNew(x, sid, "lo2", 100, false)))
	r, err = x.Compound(putfh(fh), lockNew(x, sid, "lo3", 200, true))
	wantStatus(t, r, err, nfsv4.NFS4ERR_NO_GRACE)
	// Records now: gx, gy, gz (all confirmed in this instance).
	if n := recorded(t, dir); n != 3 {
		t.Fatalf("%d client records after the grace period, want 3", n)
	}
}

// TestGraceEndsWhenAllReclaimed checks that the grace period ends as soon
// as every recorded (4.1) client has sent RECLAIM_COMPLETE, and that
// without records there is no grace period at all.
func TestGraceEndsWhenAllReclaimed(t *testing.T) {
	dir := t.TempDir()
	ts := startServerDir(t, dir, graceConfig(dir))
	ts.session(t, 1, "ga")
	ts.session(t, 2, "gb")
	ts.stop()

	ts = startServerDir(t, dir, graceConfig(dir))
	z := ts.session(t, 1, "gz")
	a := ts.session(t, 1, "ga")
	okT(t)(a.Compound(reclaimComplete()))
	r, err := z.Compound(putroot(), openCreate(z, "f"))
	wantStatus(t, r, err, nfsv4.NFS4ERR_GRACE) // gb may still reclaim
	b := ts.session(t, 2, "gb")
	okT(t)(b.Compound(reclaimComplete()))
	okT(t)(z.Compound(putroot(), openCreate(z, "f"))) // no clock advance
	for _, c := range []*testclient.Client{a, b, z} {
		okT(t)(c.CompoundRaw(c.Minor, false, &nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: c.SessionID}}))
	}
	ts.stop()

	// z still holds an open: it is recorded; without records (another
	// directory) there is no grace period.
	other := t.TempDir()
	ts = startServerDir(t, other, graceConfig(other))
	c := ts.session(t, 1, "fresh")
	okT(t)(c.Compound(putroot(), openCreate(c, "f")))
	r, err = c.Compound(putroot(), lookup("f"), openPrev(c, "owner"))
	wantStatus(t, r, err, nfsv4.NFS4ERR_NO_GRACE)
}
