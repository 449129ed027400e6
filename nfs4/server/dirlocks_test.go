package server_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

// TestDirLocksCrossingRuns: plain compounds from several clients remove
// and create names in the same directories at once, each alternating
// between the directories in its own order, so that grouped runs wait for
// directory locks and split (dirlocks.go). Every compound must still
// answer as if its operations ran one by one: all results present and OK,
// every name removed or created exactly once, and a compound that fails
// half-way keeps its earlier effects and stops at the failure. The test
// fails if no run ever waited or split (the locks were not exercised;
// with GOMAXPROCS 1 the runs never overlap and that check is skipped).
func TestDirLocksCrossingRuns(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	setup := ts.session(t, 1, "dirlocks-setup")
	const dirs, workers, perDir = 3, 6, 12
	fhs := make([][]byte, dirs)
	for d := range fhs {
		rep := okT(t)(setup.Compound(putroot(), mkdir(fmt.Sprintf("d%d", d)), getfh()))
		fhs[d] = fhOf(t, rep.Last())
	}
	clients := make([]*testclient.Client, workers)
	for w := range clients {
		clients[w] = ts.session(t, 1, fmt.Sprintf("dirlocks-%d", w))
	}
	name := func(round, w, d, k int) string { return fmt.Sprintf("r%d-w%d-d%d-%d", round, w, d, k) }
	for round := 0; round < 20; round++ {
		// Every worker's names (directories: MKDIR leaves the current
		// handle on the new one, hence the PUTFHs).
		for w := 0; w < workers; w++ {
			for d := 0; d < dirs; d++ {
				ops := []nfsv4.NfsArgop4{putfh(fhs[d])}
				for k := 0; k < perDir; k++ {
					ops = append(ops, mkdir(name(round, w, d, k)), putfh(fhs[d]))
				}
				okT(t)(setup.Compound(ops...))
			}
		}
		// Each worker removes its names, visiting the directories in a
		// random order several times per compound; worker 0 also hits a
		// missing name half-way, so what it names after that stays.
		stays := map[string]bool{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			var ops []nfsv4.NfsArgop4
			failAt := -1
			for pass := 0; pass < perDir/4; pass++ {
				for _, d := range rng.Perm(dirs) {
					ops = append(ops, putfh(fhs[d]))
					for k := pass * 4; k < pass*4+4; k++ {
						ops = append(ops, remove(name(round, w, d, k)))
						if failAt >= 0 {
							stays[name(round, w, d, k)] = true
						}
					}
					if w == 0 && pass == 1 && failAt < 0 {
						failAt = len(ops)
						ops = append(ops, remove("missing"))
					}
				}
			}
			wg.Add(1)
			go func(w int, ops []nfsv4.NfsArgop4, failAt int) {
				defer wg.Done()
				rep, err := clients[w].Compound(ops...)
				switch {
				case err != nil:
					errs <- fmt.Errorf("worker %d: %v", w, err)
				case failAt >= 0:
					if rep.Status != nfsv4.NFS4ERR_NOENT || len(rep.Results) != failAt+1 {
						errs <- fmt.Errorf("worker %d: status %v with %d results, want NOENT at result %d", w, rep.Status, len(rep.Results), failAt)
					}
				case rep.Status != nfsv4.NFS4_OK || len(rep.Results) != len(ops):
					errs <- fmt.Errorf("worker %d: status %v with %d results, want OK with %d", w, rep.Status, len(rep.Results), len(ops))
				}
				for i, r := range rep.Results {
					if st := resStatus(r); st != nfsv4.NFS4_OK && i != failAt {
						errs <- fmt.Errorf("worker %d: result %d is %v", w, i, st)
					}
				}
			}(w, ops, failAt)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		// What is left: exactly worker 0's names after its failure.
		for d := 0; d < dirs; d++ {
			names := listNames(t, setup, fhs[d])
			ops := []nfsv4.NfsArgop4{putfh(fhs[d])}
			for _, n := range names {
				if !stays[n] {
					t.Fatalf("round %d: %s is still in d%d", round, n, d)
				}
				delete(stays, n)
				ops = append(ops, remove(n))
			}
			okT(t)(setup.Compound(ops...))
		}
		if len(stays) > 0 {
			t.Fatalf("round %d: removed after the failure: %v", round, stays)
		}
	}
	var waits, splits float64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "txnfs_nfs4_dir_lock_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch m.GetLabel()[0].GetValue() {
			case "wait":
				waits += m.GetCounter().GetValue()
			case "split":
				splits += m.GetCounter().GetValue()
			}
		}
	}
	t.Logf("directory-lock waits %v, splits %v", waits, splits)
	if waits+splits == 0 {
		if runtime.GOMAXPROCS(0) < 2 {
			// One P: a grouped run never blocks (NoSync store), so runs
			// do not overlap; the results were still checked.
			t.Skip("GOMAXPROCS 1: grouped runs did not overlap")
		}
		t.Fatal("no grouped run waited for a directory lock or split: the test did not exercise the locks")
	}
}

// listNames returns the names in directory fh (one READDIR).
func listNames(t *testing.T, c *testclient.Client, fh []byte) []string {
	t.Helper()
	rep := okT(t)(c.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 1 << 20, Dircount: 1 << 20}}))
	ok := rep.Last().(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
	if !ok.Reply.Eof {
		t.Fatal("READDIR of 1 MiB did not reach the end")
	}
	var names []string
	for e := ok.Reply.Entries; e != nil; e = e.Nextentry {
		names = append(names, e.Name)
	}
	return names
}

// resStatus is the status of an operation result.
func resStatus(r nfsv4.NfsResop4) nfsv4.Nfsstat4 {
	switch r := r.(type) {
	case *nfsv4.NfsResop4_OP_PUTFH:
		return r.Opputfh.Status
	case *nfsv4.NfsResop4_OP_REMOVE:
		switch r.Opremove.(type) {
		case *nfsv4.Remove4res_NFS4_OK:
			return nfsv4.NFS4_OK
		default:
			return nfsv4.NFS4ERR_IO
		}
	}
	return nfsv4.NFS4ERR_SERVERFAULT
}
