package server_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// exists reports whether name exists under the root.
func exists(t *testing.T, c *testclient.Client, path ...string) bool {
	t.Helper()
	ops := []nfsv4.NfsArgop4{putroot()}
	for _, p := range path {
		ops = append(ops, lookup(p))
	}
	rep, err := c.Compound(ops...)
	if err != nil {
		t.Fatal(err)
	}
	switch rep.Status {
	case nfsv4.NFS4_OK:
		return true
	case nfsv4.NFS4ERR_NOENT:
		return false
	}
	t.Fatalf("lookup %v: status %d", path, rep.Status)
	return false
}

// TC-NFS §4 atomicity: "a forced invalid op mid-compound rolls back
// everything before it", for every mutating operation type.
func TestTxnAtomicityEveryMutatingOp(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 2, "atom")
	writeFile(t, c, "src", bytes.Repeat([]byte("s"), 5000))
	writeFile(t, c, "victim", []byte("original"))
	okT(t)(c.Compound(putroot(), mkdir("dir"), mkdir("sub")))

	fail := lookup("does-not-exist") // the forced failure
	cases := map[string][]nfsv4.NfsArgop4{
		"CREATE dir":        {putroot(), mkdir("newdir")},
		"CREATE symlink":    {putroot(), symlink("newlink", "x")},
		"OPEN create+WRITE": {putroot(), openCreate(c, "newfile"), write(current, 0, []byte("data"))},
		"OPEN truncate": {putroot(), openWith(c, "victim", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0,
			&nfsv4.Createhow4_UNCHECKED4{Createattrs: sizeAttr(0)})},
		"WRITE":      {putroot(), lookup("victim"), write(anon, 0, []byte("CHANGED!"))},
		"SETATTR":    {putroot(), lookup("victim"), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{ObjAttributes: sizeAttr(1)}}},
		"REMOVE":     {putroot(), remove("victim")},
		"LINK":       {putroot(), lookup("victim"), savefh(), putroot(), link("victim2")},
		"RENAME dir": {putroot(), savefh(), rename("dir", "dir2")},
		"COPY": {putroot(), lookup("src"), savefh(), putroot(), lookup("victim"),
			&nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{CaCount: 100, CaSynchronous: true}}},
		"CLONE": {putroot(), lookup("src"), savefh(), putroot(), lookup("victim"),
			&nfsv4.NfsArgop4_OP_CLONE{Opclone: nfsv4.Clone4args{ClCount: 100}}},
		"DEALLOCATE": {putroot(), lookup("victim"), &nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{DaOffset: 0, DaLength: 4}}},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			// As a plain compound the effects before the failure stay;
			// as a transaction none do. Check only the transaction here
			// (the plain case would change the fixture).
			rep, err := c.Txn(append(append([]nfsv4.NfsArgop4{}, ops...), putroot(), fail)...)
			wantStatus(t, rep, err, nfsv4.NFS4ERR_NOENT)
			if rep.Txn == nil || *rep.Txn != nfsv4.NFS4_OK {
				t.Fatalf("txn result %v", rep.Txn)
			}
			for _, n := range []string{"newdir", "newlink", "newfile", "victim2", "dir2"} {
				if exists(t, c, n) {
					t.Fatalf("%s exists after abort", n)
				}
			}
			if !exists(t, c, "dir") || !exists(t, c, "dir", "sub") {
				t.Fatal("dir lost after abort")
			}
			if got := readFile(t, c, "victim"); string(got) != "original" {
				t.Fatalf("victim = %q after abort", got)
			}
		})
	}
	// The same compounds commit when nothing fails.
	rep := okT(t)(c.Txn(putroot(), mkdir("newdir"), putroot(), savefh(), rename("dir", "dir2"),
		putroot(), lookup("victim"), write(anon, 0, []byte("CHANGED!"))))
	if rep.Txn == nil || *rep.Txn != nfsv4.NFS4_OK {
		t.Fatal("no txn result")
	}
	if !exists(t, c, "newdir") || !exists(t, c, "dir2", "sub") || exists(t, c, "dir") {
		t.Fatal("committed transaction not visible")
	}
	if got := readFile(t, c, "victim"); string(got) != "CHANGED!" {
		t.Fatalf("victim = %q", got)
	}
}

func sizeAttr(n uint64) nfsv4.Fattr4 {
	var v bytes.Buffer
	nfsv4.WriteFattr4Size(&v, n)
	return nfsv4.Fattr4{Attrmask: []uint32{1 << nfsv4.FATTR4_SIZE}, AttrVals: v.Bytes()}
}

// A plain compound keeps the effects of operations before a failure
// (standard semantics, no transactional cost).
func TestPlainCompoundKeepsPartialEffects(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "plain")
	rep, err := c.Compound(putroot(), mkdir("kept"), putroot(), lookup("nope"), putroot(), mkdir("never"))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOENT)
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want 4", len(rep.Results))
	}
	if !exists(t, c, "kept") || exists(t, c, "never") {
		t.Fatal("plain compound semantics broken")
	}
}

// TC-NFS serializability: concurrent transactional compounds creating
// sets of files in many directories are all-or-nothing; whole-file
// writers never interleave.
func TestTxnSerializability(t *testing.T) {
	ts := startServer(t)
	setup := ts.session(t, 1, "setup")
	const clients, rounds, files = 6, 8, 4
	for f := 0; f < files; f++ {
		writeFile(t, setup, fmt.Sprintf("shared-%d", f), bytes.Repeat([]byte{'0'}, 64))
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := 0; w < clients; w++ {
		c := ts.session(t, 1, fmt.Sprintf("w%d", w))
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				// Every client rewrites every shared file whole with its
				// own byte, and creates a directory set.
				b := bytes.Repeat([]byte{byte('A' + w)}, 64)
				var ops []nfsv4.NfsArgop4
				for f := 0; f < files; f++ {
					ops = append(ops, putroot(), lookup(fmt.Sprintf("shared-%d", f)), write(anon, 0, b))
				}
				dir := fmt.Sprintf("set-%d-%d", w, r)
				ops = append(ops, putroot(), mkdir(dir), mkdir("x"), lookupp(), mkdir("y"))
				rep, err := c.Txn(ops...)
				if err != nil {
					errs <- err
					return
				}
				if rep.Status != nfsv4.NFS4_OK && rep.Status != nfsv4.NFS4ERR_DELAY {
					errs <- fmt.Errorf("client %d round %d: status %d", w, r, rep.Status)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// All shared files hold the same writer's bytes (the last committed
	// transaction wrote all of them), each file whole.
	var first byte
	for f := 0; f < files; f++ {
		got := readFile(t, setup, fmt.Sprintf("shared-%d", f))
		if len(got) != 64 || !bytes.Equal(got, bytes.Repeat(got[:1], 64)) {
			t.Fatalf("shared-%d mixed: %q", f, got)
		}
		if f == 0 {
			first = got[0]
		} else if got[0] != first {
			t.Fatalf("shared-%d written by %c, shared-0 by %c: not serializable", f, got[0], first)
		}
	}
	// Every directory set is whole.
	for w := 0; w < clients; w++ {
		for r := 0; r < rounds; r++ {
			dir := fmt.Sprintf("set-%d-%d", w, r)
			if exists(t, setup, dir) != exists(t, setup, dir, "y") || exists(t, setup, dir) != exists(t, setup, dir, "x") {
				t.Fatalf("%s is partial", dir)
			}
		}
	}
}

// Standard servers answer the private opcode NFS4ERR_OP_ILLEGAL; ours
// runs it. A session error before the transaction leaves nothing done.
func TestTxnOpcodeRules(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "rules")
	// Session-management operations are not allowed inside a transaction.
	rep, err := c.Txn(&nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: c.ClientID}})
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOTSUPP)
	// 4.0 transactions work too (no SEQUENCE).
	c0 := ts.dial(t)
	if err := c0.SetClientID("v40"); err != nil {
		t.Fatal(err)
	}
	okT(t)(c0.Txn(putroot(), mkdir("t40"), putroot(), mkdir("t40b")))
	if !exists(t, c, "t40") || !exists(t, c, "t40b") {
		t.Fatal("4.0 transaction lost")
	}
	// A retransmitted transactional compound is answered from the slot
	// cache, not executed twice.
	c.Seq++
	ops := []nfsv4.NfsArgop4{c.SequenceOp(c.Seq), putroot(), mkdir("once")}
	okT(t)(c.CompoundRaw(1, true, ops...))
	okT(t)(c.CompoundRaw(1, true, ops...))
}

// TestPlainCompoundGrouping checks that running a plain compound's
// changing operations in one engine transaction (runGrouped) keeps the
// standard semantics: the operations before a failing one take effect,
// the failing one has none — even when it failed after part of its work
// (CREATE whose attribute setting fails after the create) — and nothing
// after it runs.
func TestPlainCompoundGrouping(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "group")
	mode777 := nfsv4.Fattr4{Attrmask: bmOf(nfsv4.FATTR4_MODE), AttrVals: []byte{0, 0, 1, 0xff}}
	rep := okT(t)(c.Compound(putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "pub", Createattrs: mode777}}, getfh()))
	pub := fhOf(t, rep.Results[2])
	c.Uid, c.Gid = 1000, 1000
	// Owner "0" (root) cannot be given away by uid 1000: the directory
	// is created, then chown fails.
	owner := nfsv4.Fattr4{Attrmask: bmOf(nfsv4.FATTR4_OWNER), AttrVals: []byte{0, 0, 0, 1, '0', 0, 0, 0}}
	rep, err := c.Compound(putfh(pub), mkdir("before"), putfh(pub),
		&nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "chowned", Createattrs: owner}},
		putfh(pub), mkdir("after"))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_PERM)
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want 4", len(rep.Results))
	}
	if !exists(t, c, "pub", "before") || exists(t, c, "pub", "chowned") || exists(t, c, "pub", "after") {
		t.Fatalf("before=%v chowned=%v after=%v, want true false false",
			exists(t, c, "pub", "before"), exists(t, c, "pub", "chowned"), exists(t, c, "pub", "after"))
	}
	// A failure at the first operation of a run, then runs after LOCK-
	// like operations that are not grouped: 4 files in one compound.
	ops := []nfsv4.NfsArgop4{putfh(pub)}
	for i := 0; i < 4; i++ {
		ops = append(ops, openCreate(c, fmt.Sprintf("f%d", i)), write(current, 0, []byte("data")), closeOp(current), putfh(pub))
	}
	okT(t)(c.Compound(ops...))
	for i := 0; i < 4; i++ {
		if got := string(okT(t)(c.Compound(putfh(pub), lookup(fmt.Sprintf("f%d", i)), read(anon, 0, 100))).Results[2].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data); got != "data" {
			t.Fatalf("f%d holds %q", i, got)
		}
	}
}

func bmOf(bits ...uint32) []uint32 {
	var bm []uint32
	for _, b := range bits {
		for uint32(len(bm)) <= b/32 {
			bm = append(bm, 0)
		}
		bm[b/32] |= 1 << (b % 32)
	}
	return bm
}
