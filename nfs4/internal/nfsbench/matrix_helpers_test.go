package nfsbench

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// The write matrix's arithmetic: what a cell reports must follow from its
// samples, and its workload must be TC-NFS's (see BenchmarkTxnMatrix).

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		samples []float64
		want    ratioStats
	}{
		{[]float64{2}, ratioStats{median: 2, min: 2, max: 2, lo: 2, hi: 2}},
		{[]float64{3, 1}, ratioStats{median: 2, min: 1, max: 3, lo: 1, hi: 3}},
		{[]float64{5, 1, 4, 2, 3}, ratioStats{median: 3, min: 1, max: 5, lo: 1, hi: 5}},
		// n = 9: k = ⌊(9 − 5.88) / 2⌋ = 1.
		{[]float64{9, 1, 8, 2, 7, 3, 6, 4, 5}, ratioStats{median: 5, min: 1, max: 9, lo: 2, hi: 8}},
		// One wild sample moves neither the median nor the interval.
		{[]float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 40}, ratioStats{median: 1, min: 1, max: 40, lo: 1, hi: 1}},
		// n = 100: k = ⌊(100 − 19.6) / 2⌋ = 40.
		{seq(100), ratioStats{median: 49.5, min: 0, max: 99, lo: 40, hi: 59}},
	} {
		samples := append([]float64(nil), tc.samples...)
		if got := summarize(samples); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.samples, got, tc.want)
		}
	}
}

// seq returns n samples 0, 1, …, n−1 in reverse order.
func seq(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(n - 1 - i)
	}
	return s
}

func TestMatrixWorkload(t *testing.T) {
	src := make([]byte, 16<<20)
	for _, size := range matrixSizes {
		for _, n := range []int{1, 2, 4, 8} {
			files := matrixFileCount(size, n)
			if files%n != 0 || files < n || files > matrixFiles || (files > n && files*size > matrixSetBytes) {
				t.Errorf("size %d, %d clients: %d files", size, n, files)
			}
			if size <= 256<<10 && files < matrixFiles-n {
				t.Errorf("size %d, %d clients: %d files, want TC-NFS's %d", size, n, files, matrixFiles)
			}
			if per := matrixPerClient(size, n); per < 1 || per*n*size > max(matrixRoundBytes, n*size) {
				t.Errorf("size %d, %d clients: %d compounds per client and round", size, n, per)
			}
			// Each client cycles through its own files, and together
			// they write every file of the set.
			w := matrixWorkload(size, n, src)
			r := &run{cs: make([]*client, n), counts: make([]int64, n)}
			for id := range r.cs {
				r.cs[id] = &client{Client: &testclient.Client{}}
			}
			seen := map[string]int{}
			for k := 0; k < 2*files/n; k++ {
				for id := range n {
					ops := w.ops(r, id, 0)
					name := ops[1].(*nfsv4.NfsArgop4_OP_OPEN).Opopen.Claim.(*nfsv4.OpenClaim4_CLAIM_NULL).File
					seen[name]++
					wrote := 0
					for _, op := range ops[2 : len(ops)-1] {
						wrote += len(op.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Data)
					}
					if wrote != size {
						t.Fatalf("size %d: a compound writes %d bytes", size, wrote)
					}
				}
			}
			if len(seen) != files {
				t.Errorf("size %d, %d clients: %d distinct files written, want %d", size, n, len(seen), files)
			}
			for name, c := range seen {
				if c != 2 {
					t.Errorf("size %d, %d clients: %s written %d times in two passes", size, n, name, c)
				}
			}
		}
	}
}

func TestLastRun(t *testing.T) {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		t.Skip("no -test.benchtime flag")
	}
	old := f.Value.String()
	defer f.Value.Set(old)
	for _, tc := range []struct {
		benchtime string
		n         int
		d         time.Duration
		want      bool
	}{
		{"2s", 1, 100 * time.Millisecond, false},
		{"2s", 40, 2100 * time.Millisecond, true},
		{"10x", 1, time.Second, false},
		{"10x", 10, time.Millisecond, true},
		{"1x", 1, time.Millisecond, true},
	} {
		if err := f.Value.Set(tc.benchtime); err != nil {
			t.Fatal(err)
		}
		if got := lastRun(tc.n, tc.d); got != tc.want {
			t.Errorf("benchtime %s: lastRun(%d, %v) = %v, want %v", tc.benchtime, tc.n, tc.d, got, tc.want)
		}
	}
}

func TestParseCounters(t *testing.T) {
	text := `# HELP txnfs_nfs4_txn_total Transactional compounds by outcome.
# TYPE txnfs_nfs4_txn_total counter
txnfs_nfs4_txn_total{outcome="commit"} 120
txnfs_nfs4_txn_total{outcome="retry"} 7
txnfs_nfs4_dir_lock_total{event="split"} 2
txnfs_nfs4_dir_lock_total{event="wait"} 3.5
txnfs_slice_fsyncs_total 1e+06
txnfs_slice_fsyncs_totalx 5
`
	m := parseCounters(text)
	for name, want := range map[string]float64{
		`txnfs_nfs4_txn_total{outcome="retry"}`: 7,
		"txnfs_nfs4_dir_lock_total":             5.5,
		"txnfs_slice_fsyncs_total":              1e6,
		"txnfs_slice_puts_total":                0,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	if len(m) != len(serverCounters) {
		t.Errorf("%d counters, want %d: %v", len(m), len(serverCounters), fmt.Sprint(m))
	}
}
