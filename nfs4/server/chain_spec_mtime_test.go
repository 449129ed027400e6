package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// This test fails with speculation as it is (no small fix in
// nfs4/server: the engine stamps a change when the operation runs, and
// its replay keeps the stamp; see the H13 report).

// mtimeOf returns name's modification time.
func mtimeOf(t *testing.T, c *client.Client, name string) time.Time {
	t.Helper()
	var cp client.Compound
	cp.PutRootFH()
	cp.Lookup(name)
	ga := cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_TIME_MODIFY))
	rep, err := c.Do(context.Background(), &cp)
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("GETATTR %s: %v %v", name, err, rep)
	}
	a, err := client.DecodeAttrs(rep.Results[ga].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes)
	if err != nil {
		t.Fatal(err)
	}
	return a.Mtime
}

// TestChainSpecModifyTimesInChainOrder: COMPOUND 1 of a chain writes f1
// after COMPOUND 0 wrote f0 (the chain's order), so in every serial
// execution f1's modification time is not before f0's — what tools like
// make rely on (an output written after its input is not older). A
// speculative run stamps its changes with the time it ran, before its
// predecessor, and its commit keeps that time: f1 ends up older than f0.
// The same holds for one file: COMPOUND 1's write to f0 is stamped before
// COMPOUND 0's, so f0's time goes back.
func TestChainSpecModifyTimesInChainOrder(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	holdFirstUntilSpeculated(t, 8, 0, 100*time.Millisecond, nil)
	id := c.NewChainID()
	var cps []*client.Compound
	for i, name := range []string{"f0", "f1"} {
		cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(i), Last: i == 1}}
		cp.PutRootFH()
		cp.Open(c.ClientID(), []byte(name), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
		cp.Write(client.CurrentStateid, 0, []byte("data"), true)
		cp.Close(client.CurrentStateid)
		cps = append(cps, cp)
	}
	reps, errs := sendFirstLast(t, c, cps)
	for i := range reps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", i, errs[i], reps[i])
		}
	}
	if m0, m1 := mtimeOf(t, c, "f0"), mtimeOf(t, c, "f1"); m1.Before(m0) {
		t.Errorf("f1, written after f0 in the chain, has modification time %v, before f0's %v (by %v)", m1, m0, m0.Sub(m1))
	}
}
