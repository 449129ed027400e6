package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// TestClientResendsDuringGrace restarts the server with a recorded client,
// so that it starts in its grace period, and checks that nfs4/client
// resends an OPEN answered with NFS4ERR_GRACE (bounded by the context),
// that it succeeds once the grace period ends while the client waits, and
// that a COMPOUND with a change before the refused OPEN is not resent.
func TestClientResendsDuringGrace(t *testing.T) {
	dir := t.TempDir()
	ts := startServerDir(t, dir, graceConfig(dir))
	ts.session(t, 1, "recorded")
	ts.stop()
	ts = startServerDir(t, dir, graceConfig(dir))
	ctx := context.Background()
	c := ts.dialClient(t)
	var cp client.Compound
	cp.PutRootFH()
	cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "new", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})

	// Bounded by the context: the last GRACE reply comes back (or the
	// context's error, when it expires with a resend in flight, as it can
	// on a loaded machine).
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	rep, err := c.Do(sctx, &cp)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && (err != nil || rep.Status != nfsv4.NFS4ERR_GRACE) {
		t.Fatalf("OPEN in grace with a 400ms context: %v, %v; want GRACE", rep, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Fatalf("returned after %v: did not resend (or did not stop)", d)
	}

	// A change before the OPEN: not resent.
	var mk client.Compound
	mk.PutRootFH()
	mk.Mkdir("d", nfsv4.Fattr4{})
	mk.PutRootFH()
	mk.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "new2", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	start = time.Now()
	rep, err = c.Do(ctx, &mk)
	if err != nil || rep.Status != nfsv4.NFS4ERR_GRACE || len(rep.Results) != 4 {
		t.Fatalf("MKDIR+OPEN in grace: %v, %v; want GRACE at the OPEN", rep, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("MKDIR+OPEN was resent (%v)", d)
	}

	// The grace period ends while the client backs off.
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		ts.clock.Advance(6 * time.Second)
	}()
	start = time.Now()
	rep, err = c.Do(ctx, &cp)
	<-done
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("OPEN resent until the grace period ended: %v, %v", rep, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("OPEN succeeded after %v, before the grace period ended", d)
	}
}
