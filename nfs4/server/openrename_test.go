package server_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// TestOpenRenameOverNoStale renames new files over a name while openers
// OPEN it and READ in the same compound, then READ again and CLOSE in a
// second compound through the open stateid. The OPEN must keep the file
// it opened alive (as an orphan once renamed over), so no READ may fail
// (NFS4ERR_STALE was the bug: the server pinned the inode after the OPEN's
// engine transaction, and a rename that committed in between deleted it)
// and both READs return the same content. Openers use plain compounds,
// transactional compounds (OP_TXN), multi-compound transactions (a
// conflicting END is retried) and OPEN by file handle after a LOOKUP in
// an earlier compound (STALE, never NOENT, if the file went in between). TXNFS_OPENRENAME_RENAMES sets the number of
// renames (default 150), TXNFS_OPENRENAME_SEED the seed of the openers'
// pauses.
func TestOpenRenameOverNoStale(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TXNFS_OPENRENAME_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (TXNFS_OPENRENAME_SEED to repeat)", seed)
	renames := 150
	if s := os.Getenv("TXNFS_OPENRENAME_RENAMES"); s != "" {
		renames, _ = strconv.Atoi(s)
	}
	ts := startServer(t)
	rn := ts.session(t, 1, "renamer")
	newVersion := func(i int) {
		t.Helper()
		data := []byte(fmt.Sprintf("version-%06d", i))
		okT(t)(rn.Compound(putroot(),
			openWith(rn, "tmp", "renamer", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_NONE, &nfsv4.Createhow4_UNCHECKED4{}),
			write(current, 0, data), closeOp(current), putroot(), savefh(), rename("tmp", "target")))
	}
	newVersion(0)

	deadline := time.Now().Add(60 * time.Second)
	var done atomic.Bool
	var opens, stale, retried, fhStale atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
		done.Store(true)
	}
	opener := func(k int, mode string) {
		defer wg.Done()
		c, err := testclient.Dial(ts.addr)
		if err != nil {
			report(err)
			return
		}
		defer c.Close()
		if err := c.NewSession(1, fmt.Sprintf("opener-%d", k)); err != nil {
			report(err)
			return
		}
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(k)))
		owner := fmt.Sprintf("o%d", k)
		open := openWith(c, "target", owner, nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE, nil)
		openFH := &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
			ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_READ, ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE,
			Owner:   nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte(owner)},
			Openhow: &nfsv4.Openflag4_default{},
			Claim:   &nfsv4.OpenClaim4_CLAIM_FH{},
		}}
		for !done.Load() && time.Now().Before(deadline) {
			if rng.IntN(4) == 0 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
			var res []nfsv4.NfsResop4
			switch mode {
			case "plain", "txn":
				send := c.Compound
				if mode == "txn" {
					send = c.Txn
				}
				rep, err := send(putroot(), open, getfh(), read(current, 0, 64))
				if err != nil {
					report(err)
					return
				}
				if rep.Status != nfsv4.NFS4_OK {
					if rep.Status == nfsv4.NFS4ERR_STALE {
						stale.Add(1)
					}
					report(fmt.Errorf("%s OPEN+READ: status %d", mode, rep.Status))
					return
				}
				res = rep.Results
			case "fh":
				// LOOKUP, then OPEN by file handle in another compound
				// (as a FUSE mount does): a file renamed over in between
				// is STALE (the client looks the name up again), never
				// NOENT.
				rep, err := c.Compound(putroot(), lookup("target"), getfh())
				if err != nil || rep.Status != nfsv4.NFS4_OK {
					report(fmt.Errorf("fh LOOKUP: %v, %v", rep, err))
					return
				}
				fh := fhOf(t, rep.Results[2])
				rep, err = c.Compound(putfh(fh), openFH, getfh(), read(current, 0, 64))
				if err != nil {
					report(err)
					return
				}
				if rep.Status == nfsv4.NFS4ERR_STALE {
					fhStale.Add(1)
					continue
				}
				if rep.Status != nfsv4.NFS4_OK {
					report(fmt.Errorf("fh OPEN(CLAIM_FH)+READ: status %d", rep.Status))
					return
				}
				res = append([]nfsv4.NfsResop4{nil}, rep.Results[1:]...)
			case "multi":
				id := begin41(t, c)
				j := join41(t, c, id, putroot(), open, getfh(), read(current, 0, 64))
				if j.status != nfsv4.NFS4_OK {
					report(fmt.Errorf("multi OPEN+READ: status %d", j.status))
					end41(t, c, id, false)
					return
				}
				e := end41(t, c, id, true)
				if e.status == nfsv4.NFS4ERR_NOT_SAME {
					retried.Add(1)
					continue
				}
				if e.status != nfsv4.NFS4_OK {
					report(fmt.Errorf("multi END: status %d", e.status))
					return
				}
				for _, r := range j.results[2:] {
					res = append(res, r.res)
				}
			}
			opens.Add(1)
			sid := openSid(t, res[1])
			fh := fhOf(t, res[2])
			first, _ := readData(t, res[3])
			if rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			}
			rep, err := c.Compound(putfh(fh), read(sid, 0, 64), closeOp(sid))
			if err != nil {
				report(err)
				return
			}
			if rep.Status != nfsv4.NFS4_OK {
				if rep.Status == nfsv4.NFS4ERR_STALE {
					stale.Add(1)
				}
				report(fmt.Errorf("%s: READ+CLOSE through the open stateid: status %d", mode, rep.Status))
				return
			}
			if second, _ := readData(t, rep.Results[1]); !bytes.Equal(first, second) || !bytes.HasPrefix(first, []byte("version-")) {
				report(fmt.Errorf("%s: opened file read %q then %q", mode, first, second))
				return
			}
		}
	}
	modes := []string{"plain", "plain", "txn", "multi", "fh"}
	wg.Add(len(modes))
	for k, m := range modes {
		go opener(k, m)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			done.Store(true)
			wg.Wait()
		}
	}
	defer stop() // also if a rename fails
	for i := 1; i <= renames && !done.Load() && time.Now().Before(deadline); i++ {
		newVersion(i)
	}
	stop()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d renames, %d open+read pairs, %d stale, %d multi-compound transactions retried after NOT_SAME, %d OPEN(CLAIM_FH) of a renamed-over file STALE",
		renames, opens.Load(), stale.Load(), retried.Load(), fhStale.Load())
	if opens.Load() == 0 {
		t.Fatal("no OPEN succeeded")
	}
}

// TestTxnMultiCloseAcrossCompounds: a stateid CLOSEd in one compound of a
// multi-compound transaction is bad in its later compounds, and a later
// OPEN of the file by the same owner gets a new state, which survives the
// commit (the CLOSE applies to the old one only). Before the fix the set
// of closed stateids was per compound: the stateid stayed usable and the
// OPEN upgraded the state being closed, which TXN_END then closed.
func TestTxnMultiCloseAcrossCompounds(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "mt-close")
	writeFile(t, c, "f", []byte("hello"))
	open := openWith(c, "f", "o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE, nil)
	rep := okT(t)(c.Compound(putroot(), open))
	old := openSid(t, rep.Results[1])

	id := begin41(t, c)
	if r := join41(t, c, id, putroot(), lookup("f"), closeOp(old)); r.status != nfsv4.NFS4_OK {
		t.Fatalf("CLOSE in txn: %d", r.status)
	}
	if r := join41(t, c, id, putroot(), lookup("f"), read(old, 0, 10)); r.status != nfsv4.NFS4ERR_BAD_STATEID {
		t.Fatalf("READ with a stateid closed earlier in the transaction: %d, want BAD_STATEID", r.status)
	}
	r := join41(t, c, id, putroot(), open)
	if r.status != nfsv4.NFS4_OK {
		t.Fatalf("re-OPEN in txn: %d", r.status)
	}
	fresh := openSid(t, r.results[3].res)
	if fresh.Other == old.Other {
		t.Fatal("re-OPEN after CLOSE in the transaction upgraded the state being closed")
	}
	if e := end41(t, c, id, true); e.status != nfsv4.NFS4_OK {
		t.Fatalf("END: %d", e.status)
	}
	rep = okT(t)(c.Compound(putroot(), lookup("f"), read(fresh, 0, 10)))
	if d, _ := readData(t, rep.Results[2]); string(d) != "hello" {
		t.Fatalf("read %q", d)
	}
	rep, err := c.Compound(putroot(), lookup("f"), read(old, 0, 10))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BAD_STATEID)
}

// TestSetattrSizeThroughWriteOpen: SETATTR(size) with an open stateid that
// has write access succeeds, like ftruncate on a descriptor opened for
// writing, even after chmod took write permission away; with the
// anonymous stateid the mode bits are checked (pjdfstest
// ftruncate::affected_create_flags_only). Before the fix it was ACCESS.
func TestSetattrSizeThroughWriteOpen(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "ftrunc")
	mode := func(m uint32) nfsv4.Fattr4 {
		return nfsv4.Fattr4{Attrmask: bmOf(nfsv4.FATTR4_MODE), AttrVals: []byte{0, 0, byte(m >> 8), byte(m)}}
	}
	rep := okT(t)(c.Compound(putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "pub", Createattrs: mode(0o777)}}, getfh()))
	pub := fhOf(t, rep.Results[2])
	c.Uid, c.Gid = 1000, 1000
	rep = okT(t)(c.Compound(putfh(pub),
		openWith(c, "f", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_NONE, &nfsv4.Createhow4_UNCHECKED4{Createattrs: mode(0o644)}),
		write(current, 0, []byte("0123456789")),
		&nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: anon, ObjAttributes: mode(0o444)}}))
	sid := openSid(t, rep.Results[1])
	setSize := func(id nfsv4.Stateid4, n uint64) (*testclient.Reply, error) {
		return c.Compound(putfh(pub), lookup("f"),
			&nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: id, ObjAttributes: sizeAttr(n)}})
	}
	rep, err := setSize(anon, 2)
	wantStatus(t, rep, err, nfsv4.NFS4ERR_ACCESS)
	okT(t)(setSize(sid, 3))
	rep = okT(t)(c.Compound(putfh(pub), lookup("f"), read(sid, 0, 100)))
	if d, _ := readData(t, rep.Results[2]); string(d) != "012" {
		t.Fatalf("after truncate through the open: %q", d)
	}
	// A read-only open does not allow it.
	rep = okT(t)(c.Compound(putfh(pub), openWith(c, "f", "r", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE, nil)))
	rd := openSid(t, rep.Results[1])
	rep, err = setSize(rd, 1)
	wantStatus(t, rep, err, nfsv4.NFS4ERR_OPENMODE)
}

// TestAnonCopyCloneSeekAccess: COPY, CLONE and SEEK under anonymous
// stateids check the credential like READ and WRITE do — the source must
// be readable and the destination writable — so a user cannot get the
// bytes (or the data layout) of a file it may not read. Before the fix a
// uid-1000 client copied and cloned a mode-0600 root file (found by Q10
// through `txnfs cp`).
func TestAnonCopyCloneSeekAccess(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 2, "anoncopy")
	mode := func(m uint32) nfsv4.Fattr4 {
		return nfsv4.Fattr4{Attrmask: bmOf(nfsv4.FATTR4_MODE), AttrVals: []byte{0, 0, byte(m >> 8), byte(m)}}
	}
	create := func(name string, m uint32) {
		t.Helper()
		okT(t)(c.Compound(putroot(), lookup("pub"),
			openWith(c, name, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_NONE, &nfsv4.Createhow4_UNCHECKED4{Createattrs: mode(0o600)}),
			write(current, 0, []byte("secret bytes")),
			&nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: anon, ObjAttributes: mode(m)}},
			closeOp(current)))
	}
	okT(t)(c.Compound(putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "pub", Createattrs: mode(0o777)}}))
	create("secret", 0o600)   // root's, unreadable to others
	create("readable", 0o644) // root's, readable, not writable by others
	create("open", 0o666)     // writable by all
	copyOp := &nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{CaCount: 6, CaSynchronous: true}}
	cloneOp := &nfsv4.NfsArgop4_OP_CLONE{Opclone: nfsv4.Clone4args{ClCount: 6}}
	seekOp := &nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaWhat: nfsv4.NFS4_CONTENT_DATA}}
	from := func(src, dst string, op nfsv4.NfsArgop4) (*testclient.Reply, error) {
		return c.Compound(putroot(), lookup("pub"), lookup(src), savefh(), putroot(), lookup("pub"), lookup(dst), op)
	}
	c.Uid, c.Gid = 1000, 1000
	for _, tc := range []struct {
		src, dst string
		op       nfsv4.NfsArgop4
		want     nfsv4.Nfsstat4
	}{
		{"secret", "open", copyOp, nfsv4.NFS4ERR_ACCESS},
		{"secret", "open", cloneOp, nfsv4.NFS4ERR_ACCESS},
		{"readable", "secret", copyOp, nfsv4.NFS4ERR_ACCESS},
		{"readable", "readable", cloneOp, nfsv4.NFS4ERR_ACCESS},
		{"readable", "open", copyOp, nfsv4.NFS4_OK},
		{"readable", "open", cloneOp, nfsv4.NFS4_OK},
	} {
		rep, err := from(tc.src, tc.dst, tc.op)
		if tc.want == nfsv4.NFS4_OK {
			okT(t)(rep, err)
			continue
		}
		wantStatus(t, rep, err, tc.want)
	}
	rep, err := c.Compound(putroot(), lookup("pub"), lookup("secret"), seekOp)
	wantStatus(t, rep, err, nfsv4.NFS4ERR_ACCESS)
	okT(t)(c.Compound(putroot(), lookup("pub"), lookup("readable"), seekOp))
	// The secret is unchanged in "open" only by the copies that were
	// allowed: it holds "secret" from the readable file, never more.
	c.Uid, c.Gid = 0, 0
	rep = okT(t)(c.Compound(putroot(), lookup("pub"), lookup("secret"), read(anon, 0, 100)))
	if d, _ := readData(t, rep.Results[3]); string(d) != "secret bytes" {
		t.Fatalf("secret after refused copies: %q", d)
	}
}
