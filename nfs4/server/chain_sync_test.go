package server_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// TestChainSyncFailureFailsStoppedCompound: when the sync of a chained
// COMPOUND fails, a later COMPOUND that ran meanwhile and stopped early
// (its last operation failed, after earlier ones changed the file system)
// must not be answered as if its successful operations were durable: its
// last operation fails with NFS4ERR_IO like any later reply
// (docs/protocol.md §4 "A failed sync"), not with its own status, which
// says "the operations before this one are done".
func TestChainSyncFailureFailsStoppedCompound(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	// The first sync (COMPOUND 0's) is held and then fails; every later
	// one (COMPOUND 1's own) succeeds.
	entered, gate := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	server.SetSyncForTest(ts.srv, func(ctx context.Context, sync func(context.Context) error) error {
		if !first.CompareAndSwap(false, true) {
			return sync(ctx)
		}
		close(entered)
		<-gate
		return fmt.Errorf("injected: %w", fs.ErrIO)
	})
	id := c.NewChainID()
	stopped := chainMkdir(id, 1, true, nil, "y")
	stopped.Lookup("missing") // NFS4ERR_NOENT after the MKDIR of y
	cps := []*client.Compound{chainMkdir(id, 0, false, nil, "x"), stopped}
	// COMPOUND 1 is sent once COMPOUND 0's sync is held, so the held
	// (failing) sync is COMPOUND 0's: sent together, COMPOUND 1 could
	// reach its own sync first under load, and COMPOUND 0's would then
	// succeed (answered OK, rightly).
	wait0 := sendAll(c, cps[:1])
	<-entered
	wait1 := sendAll(c, cps[1:])
	waitExists(t, c, "y") // COMPOUND 1 ran during the sync of COMPOUND 0
	close(gate)
	rep0, err0 := wait0()
	rep1, err1 := wait1()
	reps, errs := append(rep0, rep1...), append(err0, err1...)
	for i := range cps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4ERR_IO {
			t.Errorf("COMPOUND %d: %v %v, want NFS4ERR_IO", i, errs[i], reps[i])
		}
	}
}

// TestChainRandomSyncs runs chains of independent MKDIRs (two chains of
// each of two clients at a time) while every sync is delayed at random
// and fails now and then, and checks each chain's replies against
// docs/protocol.md §4: once a reply is not OK, every later one is
// NFS4ERR_IO or refused (a COMPOUND's reply waits for the outcome of the
// earlier ones); a refused COMPOUND ran nothing, one answered ran. One
// COMPOUND in 12 makes a directory that exists (NFS4ERR_EXIST: the chain
// stops; after an NFS4ERR_IO reply it is answered NFS4ERR_IO too). The
// seed is printed on failure.
func TestChainRandomSyncs(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var rmu sync.Mutex
	random := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.IntN(n)
	}
	ts := startServer(t)
	clients := []*client.Client{ts.dialClient(t), ts.dialClient(t)}
	var mk client.Compound
	mk.PutRootFH()
	mk.Mkdir("taken", nfsv4.Fattr4{})
	if rep, err := clients[0].Do(context.Background(), &mk); err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatal(err, rep)
	}
	// Syncs fail only from here on: the setup above must not.
	var failed atomic.Int64
	server.SetSyncForTest(ts.srv, func(ctx context.Context, sync func(context.Context) error) error {
		time.Sleep(time.Duration(random(3000)) * time.Microsecond)
		if random(25) == 0 {
			failed.Add(1)
			return fmt.Errorf("injected: %w", fs.ErrIO)
		}
		return sync(ctx)
	})
	const rounds, chainLen = 15, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	for r := range rounds {
		for ci, c := range clients {
			for ch := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := c.NewChainID()
					names := make([]string, chainLen)
					statuses := make([]string, chainLen)
					var cwg sync.WaitGroup
					for k := range chainLen {
						names[k] = fmt.Sprintf("r%d-c%d-ch%d-%d", r, ci, ch, k)
						if random(12) == 0 {
							names[k] = "taken"
						}
						cp := chainMkdir(id, uint32(k), k == chainLen-1, nil, names[k])
						cwg.Add(1)
						go func() {
							defer cwg.Done()
							time.Sleep(time.Duration(random(2000)) * time.Microsecond)
							statuses[k] = chainOutcome(c.Do(context.Background(), cp))
						}()
					}
					cwg.Wait()
					bad := func(format string, args ...any) {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("chain %v: ", statuses)+fmt.Sprintf(format, args...))
						mu.Unlock()
					}
					checkChainOutcomes(t, c, names, statuses, bad, nil)
				}()
			}
		}
		wg.Wait()
	}
	if len(problems) > 0 {
		t.Fatalf("seed %d: %d problems, first: %s", seed, len(problems), problems[0])
	}
	t.Logf("%d injected sync failures", failed.Load())
}

// chainOutcome names the outcome of a chained COMPOUND of the random
// sync tests: ok, io, exist, refused, or the error or status.
func chainOutcome(rep *client.Reply, err error) string {
	switch {
	case errors.Is(err, client.ErrChainRefused):
		return "refused"
	case err != nil:
		return err.Error()
	case rep.Status == nfsv4.NFS4_OK:
		return "ok"
	case rep.Status == nfsv4.NFS4ERR_IO:
		return "io"
	case rep.Status == nfsv4.NFS4ERR_EXIST:
		return "exist"
	default:
		return client.StatusName(rep.Status)
	}
}

// checkChainOutcomes checks one chain's outcomes (chainOutcome, by seq)
// against docs/protocol.md §4: once a reply is not OK every later one is
// NFS4ERR_IO or refused; only the COMPOUNDs naming "taken" (which
// exists) may fail with NFS4ERR_EXIST; a refused COMPOUND created
// nothing, an answered one its name, on which created (if not nil) then
// checks more. Problems go to bad.
func checkChainOutcomes(t *testing.T, c *client.Client, names, statuses []string, bad func(string, ...any), created func(k int)) {
	notOK := false
	for k, st := range statuses {
		switch st {
		case "ok", "exist":
			if notOK {
				bad("COMPOUND %d answered %s after a failed one", k, st)
			}
			if st == "exist" && names[k] != "taken" {
				bad("COMPOUND %d: exist", k)
			}
		case "io", "refused":
		default:
			bad("COMPOUND %d: unexpected %s", k, st)
		}
		notOK = notOK || st != "ok"
		if names[k] == "taken" {
			continue // exists anyway
		}
		exists := chainExists(t, c, names[k])
		if exists != (st != "refused") {
			bad("COMPOUND %d (%s): created=%v", k, st, exists)
		} else if exists && created != nil {
			created(k)
		}
	}
}

// TestChainSlowSyncIsNotFailure: a COMPOUND whose predecessor's sync
// takes longer than the chain wait (a slow device) waits for that sync's
// outcome, which is sure to come (the predecessor runs), and is answered
// OK when it succeeds: NFS4ERR_IO says the storage failed, and slowness
// is not failure (only a COMPOUND that never arrives is given up on).
func TestChainSlowSyncIsNotFailure(t *testing.T) {
	defer server.SetChainWaitForTest(server.SetChainWaitForTest(100 * time.Millisecond))
	ts := startServer(t)
	c := ts.dialClient(t)
	entered, release := holdSyncs(t, ts)
	id := c.NewChainID()
	// COMPOUND 1 only reads (what COMPOUND 0 made): it has no sync of
	// its own and waits for COMPOUND 0's at once.
	look := &client.Compound{Chain: &client.Chain{ID: id, Seq: 1, Last: true}}
	look.PutRootFH()
	look.Lookup("s0")
	cps := []*client.Compound{chainMkdir(id, 0, false, nil, "s0"), look}
	wait := sendAll(c, cps)
	<-entered
	time.Sleep(300 * time.Millisecond) // COMPOUND 1 runs and waits meanwhile
	release(nil)
	reps, errs := wait()
	for i := range cps {
		if errs[i] != nil || reps[i].Status != nfsv4.NFS4_OK {
			t.Errorf("COMPOUND %d: %v %v, want NFS4_OK", i, errs[i], reps[i])
		}
	}
}
