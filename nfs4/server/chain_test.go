package server_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// chainMkdir is a COMPOUND of the chain id that makes /path/name (path
// is looked up from the root).
func chainMkdir(id uint64, seq uint32, last bool, path []string, name string) *client.Compound {
	cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: seq, Last: last}}
	cp.PutRootFH()
	for _, c := range path {
		cp.Lookup(c)
	}
	cp.Mkdir(name, nfsv4.Fattr4{})
	return cp
}

func chainExists(t *testing.T, c *client.Client, path ...string) bool {
	t.Helper()
	var cp client.Compound
	cp.PutRootFH()
	for _, p := range path {
		cp.Lookup(p)
	}
	rep, err := c.Do(context.Background(), &cp)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Status == nfsv4.NFS4_OK
}

// sendReversed sends cps concurrently, the last first, each a few
// milliseconds after the one behind it, and returns their outcomes.
func sendReversed(c *client.Client, cps []*client.Compound) ([]*client.Reply, []error) {
	reps, errs := make([]*client.Reply, len(cps)), make([]error, len(cps))
	done := make(chan int)
	for i := len(cps) - 1; i >= 0; i-- {
		go func(i int) {
			reps[i], errs[i] = c.Do(context.Background(), cps[i])
			done <- i
		}(i)
		time.Sleep(5 * time.Millisecond)
	}
	for range cps {
		<-done
	}
	return reps, errs
}

// sendAll sends cps concurrently; wait returns their outcomes once all
// are back.
func sendAll(c *client.Client, cps []*client.Compound) (wait func() ([]*client.Reply, []error)) {
	reps, errs := make([]*client.Reply, len(cps)), make([]error, len(cps))
	var wg sync.WaitGroup
	for i := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = c.Do(context.Background(), cps[i])
		}()
	}
	return func() ([]*client.Reply, []error) {
		wg.Wait()
		return reps, errs
	}
}

// TestChainOrder: the COMPOUNDs of a chain run in the chain's order even
// when they arrive in reverse (each needs the directory the one before
// it makes), and the server forgets the chain after its last COMPOUND.
func TestChainOrder(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	id := c.NewChainID()
	cps := []*client.Compound{
		chainMkdir(id, 0, false, nil, "a"),
		chainMkdir(id, 1, false, []string{"a"}, "b"),
		chainMkdir(id, 2, true, []string{"a", "b"}, "c"),
	}
	reps, errs := sendReversed(c, cps)
	for i := range cps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", i, errs[i], reps[i])
		}
	}
	if !chainExists(t, c, "a", "b", "c") {
		t.Fatal("a/b/c missing")
	}
	if n := server.ChainsForTest(ts.srv); n != 0 {
		t.Fatalf("%d chains left after the last COMPOUND", n)
	}
}

// TestChainStopsAfterFailure: once a COMPOUND of the chain stops early,
// every later one is refused with nothing run — also one that arrived
// before it and was waiting — and a COMPOUND that already ran its seq is
// refused too.
func TestChainStopsAfterFailure(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	c := ts.dialClient(t)
	id := c.NewChainID()
	cps := []*client.Compound{
		chainMkdir(id, 0, false, nil, "x"),
		chainMkdir(id, 1, false, []string{"missing"}, "y"), // fails: NOENT
		chainMkdir(id, 2, false, []string{"x"}, "z"),
		chainMkdir(id, 3, true, nil, "w"),
	}
	reps, errs := sendReversed(c, cps)
	if errs[0] != nil || reps[0].Status != nfsv4.NFS4_OK {
		t.Fatalf("COMPOUND 0: %v %v", errs[0], reps[0])
	}
	if errs[1] != nil || reps[1].Status != nfsv4.NFS4ERR_NOENT {
		t.Fatalf("COMPOUND 1: %v %v, want NOENT", errs[1], reps[1])
	}
	for _, i := range []int{2, 3} {
		var se *client.StatusError
		if !errors.Is(errs[i], client.ErrChainRefused) || !errors.As(errs[i], &se) || se.Status != nfsv4.NFS4ERR_SEQ_MISORDERED {
			t.Fatalf("COMPOUND %d: %v, want refused with SEQ_MISORDERED", i, errs[i])
		}
	}
	if chainExists(t, c, "x", "z") || chainExists(t, c, "w") {
		t.Fatal("a refused COMPOUND ran")
	}
	// A resent seq is refused: it already ran.
	if _, err := c.Do(ctx, chainMkdir(id, 0, false, nil, "v")); !errors.Is(err, client.ErrChainRefused) {
		t.Fatalf("seq 0 again: %v, want refused", err)
	}
	if chainExists(t, c, "v") {
		t.Fatal("the resent COMPOUND ran")
	}
}

// TestChainMissingPredecessor: a COMPOUND whose predecessor never comes
// is refused with NFS4ERR_DELAY after the server's wait, and so is every
// later one; a chain's first COMPOUND does not wait.
func TestChainMissingPredecessor(t *testing.T) {
	defer server.SetChainWaitForTest(server.SetChainWaitForTest(100 * time.Millisecond))
	ts := startServer(t)
	ctx := context.Background()
	c := ts.dialClient(t)
	id := c.NewChainID()
	start := time.Now()
	_, err := c.Do(ctx, chainMkdir(id, 1, false, nil, "p"))
	var se *client.StatusError
	if !errors.Is(err, client.ErrChainRefused) || !errors.As(err, &se) || se.Status != nfsv4.NFS4ERR_DELAY {
		t.Fatalf("seq 1 without seq 0: %v, want refused with DELAY", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("refused after %v, before the wait", d)
	}
	if _, err := c.Do(ctx, chainMkdir(id, 2, false, nil, "q")); !errors.Is(err, client.ErrChainRefused) {
		t.Fatalf("seq 2: %v, want refused", err)
	}
	// The missing one still runs (nothing after it does).
	if rep, err := c.Do(ctx, chainMkdir(id, 0, false, nil, "o")); err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("seq 0: %v %v", err, rep)
	}
	if chainExists(t, c, "p") || chainExists(t, c, "q") || !chainExists(t, c, "o") {
		t.Fatal("wrong COMPOUNDs ran")
	}
}

// holdSyncs makes every call of the server's FS.Sync from now on signal
// entered (the first one) and wait until release(err) is called; they
// then return err, or run the real sync if it is nil.
func holdSyncs(t *testing.T, ts *testServer) (entered chan struct{}, release func(error)) {
	entered, gate := make(chan struct{}), make(chan struct{})
	var first sync.Once
	var syncErr error
	var once sync.Once
	release = func(err error) {
		once.Do(func() {
			syncErr = err
			close(gate)
		})
	}
	// A failed test releases them so that the server can stop (the
	// cleanup runs before startServer's).
	t.Cleanup(func() { release(nil) })
	server.SetSyncForTest(ts.srv, func(ctx context.Context, sync func(context.Context) error) error {
		first.Do(func() { close(entered) })
		<-gate
		if syncErr != nil {
			return syncErr
		}
		return sync(ctx)
	})
	return entered, release
}

// heldSyncWait bounds the waits of the tests that hold every sync
// (holdSyncs) for something that must happen meanwhile: the syncs stay
// held, so it only turns a hang into a failure, and is long enough for a
// loaded machine running the race detector.
const heldSyncWait = 10 * time.Second

// waitExists polls until path exists, failing the test after heldSyncWait.
func waitExists(t *testing.T, c *client.Client, path ...string) {
	t.Helper()
	for deadline := time.Now().Add(heldSyncWait); !chainExists(t, c, path...); {
		if time.Now().After(deadline) {
			t.Fatalf("%v not created within %v", path, heldSyncWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestChainRunsDuringSync: a chain's next COMPOUND runs while the sync of
// the one before it is in flight (every sync is held), and no reply is
// sent before the syncs return.
func TestChainRunsDuringSync(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	entered, release := holdSyncs(t, ts)
	id := c.NewChainID()
	cps := []*client.Compound{
		chainMkdir(id, 0, false, nil, "a"),
		chainMkdir(id, 1, true, []string{"a"}, "b"),
	}
	type outcome struct {
		i   int
		rep *client.Reply
		err error
	}
	done := make(chan outcome, len(cps))
	for i, cp := range cps {
		go func() {
			rep, err := c.Do(context.Background(), cp)
			done <- outcome{i, rep, err}
		}()
	}
	<-entered // COMPOUND 0 ran and waits in its sync
	waitExists(t, c, "a", "b")
	select {
	case o := <-done:
		t.Fatalf("COMPOUND %d replied before the syncs returned", o.i)
	case <-time.After(20 * time.Millisecond):
	}
	release(nil)
	for range cps {
		if o := <-done; o.err != nil || o.rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("COMPOUND %d: %v %v", o.i, o.err, o.rep)
		}
	}
	if n := server.ChainsForTest(ts.srv); n != 0 {
		t.Fatalf("%d chains left after the last COMPOUND", n)
	}
}

// TestChainRunsDuringSyncNoDirOps: the same for COMPOUNDs that change no
// directory (SETATTR), whose last run would otherwise commit durably
// inside its execution.
func TestChainRunsDuringSyncNoDirOps(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	entered, release := holdSyncs(t, ts)
	id := c.NewChainID()
	chmod := func(seq uint32, mode uint32) *client.Compound {
		cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: seq, Last: seq == 1}}
		cp.PutRootFH()
		cp.SetAttr(nfsv4.Stateid4{}, (&client.SetAttrs{SetMode: true, Mode: mode}).Encode())
		return cp
	}
	done := make(chan error, 2)
	for i, mode := range []uint32{0o711, 0o755} {
		go func() {
			rep, err := c.Do(context.Background(), chmod(uint32(i), mode))
			if err == nil && rep.Status != nfsv4.NFS4_OK {
				err = fmt.Errorf("status %v", rep.Status)
			}
			done <- err
		}()
	}
	select {
	case <-entered: // COMPOUND 0 ran and waits in its sync
	case <-time.After(heldSyncWait):
		t.Fatal("COMPOUND 0 did not sync after its execution")
	}
	for deadline := time.Now().Add(heldSyncWait); ; time.Sleep(2 * time.Millisecond) {
		var cp client.Compound
		cp.PutRootFH()
		cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_MODE))
		rep, err := c.Do(context.Background(), &cp)
		if err != nil {
			t.Fatal(err)
		}
		if a, err := client.DecodeAttrs(attrVals(t, rep.Results[1])); err == nil && a.Mode == 0o755 {
			break // COMPOUND 1 ran
		}
		if time.Now().After(deadline) {
			t.Fatal("COMPOUND 1 did not run during the sync of COMPOUND 0")
		}
	}
	release(nil)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestChainSyncFailure: when the sync of a chained COMPOUND fails, its
// reply fails at its last operation with NFS4ERR_IO, so does the reply of
// the next COMPOUND, which ran while that sync was in flight (its effects
// visible, their durability unknown), and the COMPOUNDs after it are
// refused with nothing run. (A later reply fails even when its own sync
// succeeds: TestChainTableSyncFailure.)
func TestChainSyncFailure(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	c := ts.dialClient(t)
	entered, release := holdSyncs(t, ts)
	id := c.NewChainID()
	cps := []*client.Compound{
		chainMkdir(id, 0, false, nil, "x"),
		chainMkdir(id, 1, false, nil, "y"),
		chainMkdir(id, 2, true, nil, "z"),
	}
	wait := sendAll(c, cps[:2])
	<-entered
	waitExists(t, c, "y") // COMPOUND 1 ran during the sync of COMPOUND 0
	release(fmt.Errorf("injected: %w", fs.ErrIO))
	reps, errs := wait()
	for i := range 2 {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4ERR_IO {
			t.Fatalf("COMPOUND %d: %v %v, want NFS4ERR_IO", i, errs[i], reps[i])
		}
	}
	if _, err := c.Do(ctx, cps[2]); !errors.Is(err, client.ErrChainRefused) {
		t.Fatalf("COMPOUND 2: %v, want refused", err)
	}
	if chainExists(t, c, "z") {
		t.Fatal("the COMPOUND after the failed sync's ran")
	}
}
