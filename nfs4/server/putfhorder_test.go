package server_test

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestPutFHAfterChange: a plain compound CREATE y in B; PUTFH A; GETFH
// runs while another client removes the empty directory A and a third
// reads both directories in one snapshot (a read-only compound), over and
// over. If the reader saw A gone and y not yet there while the compound
// answered OK throughout, no order of the compound's operations one by one
// explains the results: the CREATE came after the reader, the rmdir before
// it, and the PUTFH after the CREATE found A. That happened when a grouped
// run's PUTFH checked its handle outside the run's read set after the
// run's CREATE (fs.Txn.CheckHandle is linearized at the run's snapshot):
// 3 or 4 compounds in 1500, in 3 runs of 3 (plainRun; none in 4000
// since). Iterations: NFS4_PUTFH_ORDER_ITERS
// (default 1500, about 10 s; 300 with -short). The test raises GOMAXPROCS
// to 2: the three compounds must overlap.
func TestPutFHAfterChange(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 300
	}
	if s := os.Getenv("NFS4_PUTFH_ORDER_ITERS"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n <= 0 {
			t.Fatalf("NFS4_PUTFH_ORDER_ITERS: %q", s)
		}
	}
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	ts := startServer(t)
	s := ts.session(t, 1, "putfh-order-setup")
	c1 := ts.session(t, 1, "putfh-order-1")
	c2 := ts.session(t, 1, "putfh-order-2")
	c3 := ts.session(t, 1, "putfh-order-3")
	hB := fhOf(t, okT(t)(s.Compound(putroot(), mkdir("B"), getfh())).Last())
	readdir := &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 1 << 20, Dircount: 1 << 20}}
	has := func(r nfsv4.NfsResop4, name string) bool {
		ok := r.(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
		for e := ok.Reply.Entries; e != nil; e = e.Nextentry {
			if e.Name == name {
				return true
			}
		}
		return false
	}
	anomalies, okRuns := 0, 0
	for i := 0; i < n; i++ {
		hA := fhOf(t, okT(t)(s.Compound(putroot(), mkdir("A"), getfh())).Last())
		y := fmt.Sprintf("y%d", i)
		var wg, obs sync.WaitGroup
		var st1 nfsv4.Nfsstat4
		var stop atomic.Bool
		seen := false
		obs.Add(1)
		go func() {
			defer obs.Done()
			for !stop.Load() {
				r, err := c3.Compound(putroot(), readdir, putfh(hB), readdir)
				if err != nil || r.Status != nfsv4.NFS4_OK {
					t.Errorf("observer: %v", err)
					return
				}
				if !has(r.Results[1], "A") && !has(r.Results[3], y) {
					seen = true
				}
			}
		}()
		wg.Add(2)
		go func() {
			defer wg.Done()
			r, err := c1.Compound(putfh(hB), symlink(y, "t"), putfh(hA), getfh())
			if err != nil {
				t.Error(err)
				return
			}
			st1 = r.Status
		}()
		go func() {
			defer wg.Done()
			if _, err := c2.Compound(putroot(), remove("A")); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		stop.Store(true)
		obs.Wait()
		if st1 == nfsv4.NFS4_OK {
			okRuns++
		}
		if st1 == nfsv4.NFS4_OK && seen {
			anomalies++
		}
	}
	t.Logf("%d iterations: %d compounds answered OK", n, okRuns)
	if anomalies > 0 {
		t.Errorf("%d compounds answered OK although a reader saw their directory A removed before their CREATE", anomalies)
	}
}
