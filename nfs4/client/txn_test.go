package client_test

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/nfs4/client"
)

// txnCreate writes data to dir/name inside transaction id (the zero id:
// outside any).
func txnCreate(ctx context.Context, c *client.Client, id client.TxnID, dir, name, data string) (*client.Reply, error) {
	cp := client.Compound{TxnID: id}
	lookupPath(&cp, dir)
	cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	cp.Write(client.CurrentStateid, 0, []byte(data), true)
	cp.Close(client.CurrentStateid)
	return c.Do(ctx, &cp)
}

// visible reports whether dir/name exists for c (outside transactions).
func visible(t *testing.T, c *client.Client, dir, name string) bool {
	t.Helper()
	var cp client.Compound
	lookupPath(&cp, path.Join(dir, name))
	rep, err := c.Do(context.Background(), &cp)
	if err != nil {
		t.Fatal(err)
	}
	switch rep.Status {
	case nfsv4.NFS4_OK:
		return true
	case nfsv4.NFS4ERR_NOENT:
		return false
	}
	t.Fatalf("lookup %s/%s: %v", dir, name, rep.Err())
	return false
}

func TestTxnMultiCompound(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		ctx := context.Background()
		id, err := c.TxnBegin(ctx)
		if !p.Txn {
			if !errors.Is(err, client.ErrTxnUnsupported) {
				t.Fatalf("TxnBegin on %s: %v, want ErrTxnUnsupported", p.Name, err)
			}
			// Joining is refused before anything runs.
			_, err := txnCreate(ctx, c, client.TxnID{1}, dir, "f", "x")
			if !errors.Is(err, client.ErrTxnUnsupported) {
				t.Fatalf("join on %s: %v, want ErrTxnUnsupported", p.Name, err)
			}
			if visible(t, c, dir, "f") {
				t.Fatal("refused joined compound created a file")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		other, err := client.Dial(ctx, client.Config{Addr: p.Addr})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		for _, n := range []string{"a", "b"} {
			rep, err := txnCreate(ctx, c, id, dir, n, "data "+n)
			if err != nil || rep.Err() != nil {
				t.Fatalf("create %s in txn: %v %v", n, err, rep.Err())
			}
			if visible(t, other, dir, n) || visible(t, c, dir, n) {
				t.Fatalf("%s visible outside the transaction before commit", n)
			}
		}
		// The transaction sees its own changes; a failing operation
		// stops the compound but leaves the transaction usable.
		cp := client.Compound{TxnID: id}
		lookupPath(&cp, path.Join(dir, "a"))
		lookupPath(&cp, dir)
		cp.Lookup("missing")
		rep, err := c.Do(ctx, &cp)
		if err != nil || rep.Status != nfsv4.NFS4ERR_NOENT {
			t.Fatalf("lookup in txn: %v %v", err, rep.Err())
		}
		// Another client cannot use it.
		if _, err := txnCreate(ctx, other, id, dir, "c", "x"); !errors.Is(err, client.ErrTxnNotOwner) {
			t.Fatalf("other client joining: %v, want ErrTxnNotOwner", err)
		}
		if err := other.TxnEnd(ctx, id, true); !errors.Is(err, client.ErrTxnNotOwner) {
			t.Fatalf("other client ending: %v, want ErrTxnNotOwner", err)
		}
		if err := c.TxnEnd(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a", "b"} {
			if !visible(t, other, dir, n) {
				t.Fatalf("%s not visible after commit", n)
			}
		}
		if err := c.TxnEnd(ctx, id, true); !errors.Is(err, client.ErrTxnExpired) {
			t.Fatalf("second TxnEnd: %v, want ErrTxnExpired", err)
		}
		if _, err := txnCreate(ctx, c, id, dir, "c", "x"); !errors.Is(err, client.ErrTxnExpired) {
			t.Fatalf("join after end: %v, want ErrTxnExpired", err)
		}

		// Abort leaves nothing.
		id, err = c.TxnBegin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := txnCreate(ctx, c, id, dir, "gone", "x"); err != nil || rep.Err() != nil {
			t.Fatalf("create in txn: %v %v", err, rep.Err())
		}
		if err := c.TxnEnd(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if visible(t, other, dir, "gone") {
			t.Fatal("aborted transaction left a file")
		}

		// Conflict: the transaction reads a name another client then
		// creates.
		id, err = c.TxnBegin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cp = client.Compound{TxnID: id}
		lookupPath(&cp, dir)
		cp.Lookup("contested")
		if rep, err := c.Do(ctx, &cp); err != nil || rep.Status != nfsv4.NFS4ERR_NOENT {
			t.Fatalf("lookup contested: %v %v", err, rep)
		}
		if rep, err := txnCreate(ctx, c, id, dir, "mine", "x"); err != nil || rep.Err() != nil {
			t.Fatalf("create in txn: %v %v", err, rep.Err())
		}
		if rep, err := txnCreate(ctx, other, client.TxnID{}, dir, "contested", "y"); err != nil || rep.Err() != nil {
			t.Fatalf("concurrent create: %v %v", err, rep.Err())
		}
		err = c.TxnEnd(ctx, id, true)
		var ce *client.TxnConflictError
		if !errors.As(err, &ce) {
			t.Fatalf("commit after conflicting change: %v, want *TxnConflictError", err)
		}
		if !strings.Contains(ce.Report, "/contested (created by another client)") || strings.Contains(ce.Report, "/mine (") {
			t.Errorf("report does not single out the conflicting path:\n%s", ce.Report)
		}
		t.Logf("conflict report:\n%s", ce.Report)
		if visible(t, other, dir, "mine") {
			t.Fatal("conflicting transaction committed part of its changes")
		}
	})
}

// TestTxnRefusedCompoundNotUnsupported checks that a transactional (or
// joining) COMPOUND refused as a whole, with no results at all (here: more
// operations than the server accepts), is reported with the server's
// status and not as ErrTxnUnsupported: only OP_ILLEGAL for the
// transaction operation means the server lacks the extension.
func TestTxnRefusedCompoundNotUnsupported(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		ctx := context.Background()
		for _, join := range []bool{false, true} {
			cp := client.Compound{Txn: !join}
			if join {
				cp.TxnID = client.TxnID{1}
			}
			for i := 0; i < 1100; i++ { // the txnfs server's cap is 1024, Ganesha's 100
				cp.PutRootFH()
			}
			_, err := c.Do(ctx, &cp)
			if err == nil {
				t.Fatalf("join=%v: a COMPOUND of 1100 operations succeeded", join)
			}
			var se *client.StatusError
			if p.Txn {
				if errors.Is(err, client.ErrTxnUnsupported) || !errors.As(err, &se) ||
					(se.Status != nfsv4.NFS4ERR_TOO_MANY_OPS && se.Status != nfsv4.NFS4ERR_RESOURCE) {
					t.Fatalf("join=%v: got %v, want a TOO_MANY_OPS/RESOURCE status error", join, err)
				}
			} else if !errors.Is(err, client.ErrTxnUnsupported) && !errors.As(err, &se) {
				t.Fatalf("join=%v on %s: got %v, want ErrTxnUnsupported or a status error", join, p.Name, err)
			}
			t.Logf("join=%v on %s: %v", join, p.Name, err)
		}
		// The session is still usable.
		var cp client.Compound
		lookupPath(&cp, dir)
		mustOK(t, c, &cp)
	})
}
