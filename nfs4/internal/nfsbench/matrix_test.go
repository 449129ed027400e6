package nfsbench

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// The TC-NFS write matrix (SYSTOR'20 §4.1.1, "Write files"): clients
// write a set of 1,000 fixed-size files whole, the files distributed
// evenly among the clients, over and over (TC-NFS repeated the workload
// for 30 s and excluded a warm-up run); file sizes 1 KiB–16 MiB, 1–8
// clients. TC-NFS compared its transactional server with the plain one;
// here both kinds of COMPOUND run on one txnfs server.
const (
	// matrixFiles is the number of files of one side (TC-NFS: 1,000).
	matrixFiles = 1000
	// matrixSetBytes bounds one side's file set (1,000 files of 16 MiB
	// would be 16 GB of disk per side): large sizes use fewer files,
	// at least one per client.
	matrixSetBytes = 256 << 20
	// matrixRoundBytes is about the payload of one round of one side,
	// and matrixRoundFiles the most files a round writes (but at least
	// one per client): rounds of tens of milliseconds (hundreds for 16
	// MiB files with several clients), short enough for many samples,
	// long enough that a round is more than a scheduler hiccup.
	matrixRoundBytes = 8 << 20
	matrixRoundFiles = 32
	// matrixMinPairs is the fewest samples a cell reports (pairs of
	// rounds, see BenchmarkTxnMatrix).
	matrixMinPairs = 15
)

// matrixSizes are the matrix's file sizes (TC-NFS: powers of 2 from 1 KiB
// to 16 MiB; here powers of 4, to keep the run short).
var matrixSizes = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}

// matrixFileCount is the number of files of one side of the cell with
// the given file size and number of clients: matrixFiles, fewer for
// large files (matrixSetBytes), a multiple of clients.
func matrixFileCount(size, clients int) int {
	n := min(matrixFiles, matrixSetBytes/size)
	return max(clients, n/clients*clients)
}

// matrixPerClient is the number of compounds each client runs in one
// round of a cell.
func matrixPerClient(size, clients int) int {
	return max(1, min(matrixRoundFiles, matrixRoundBytes/size)/clients)
}

// matrixWorkload writes files whole: client id's k-th compound writes
// file id + clients × (k mod files/clients) of r.dir with PUTFH(dir), OPEN
// (create: UNCHECKED4, so an existing file is opened), WRITE ×
// ceil(size / 1 MiB) FILE_SYNC covering the file, CLOSE. Every WRITE of a
// compound goes in the one COMPOUND (the client asked for 17 MiB
// requests), so that a transactional compound writes the whole file
// atomically.
func matrixWorkload(size, clients int, src []byte) workload {
	perClient := int64(matrixFileCount(size, clients) / clients)
	return workload{files: 1, bytes: size, ops: func(r *run, id int, _ int64) []nfsv4.NfsArgop4 {
		c := r.cs[id]
		k := r.counts[id]
		r.counts[id]++
		name := fmt.Sprintf("m-%d", int64(id)+int64(clients)*(k%perClient))
		ops := []nfsv4.NfsArgop4{putfh(r.dir), open(c.ClientID, "w", name, nfsv4.OPEN4_SHARE_ACCESS_BOTH, true)}
		for off := 0; off < size; off += 1 << 20 {
			ops = append(ops, write(current, uint64(off), src[off:min(size, off+1<<20)], nfsv4.FILE_SYNC4))
		}
		return append(ops, closeOp(current))
	}}
}

// BenchmarkTxnMatrix is the TC-NFS write matrix on txnfs: every cell
// (file size, clients) has two sides, plain COMPOUNDs and transactional
// ones, each with its own clients, directory and file set (see
// matrixWorkload). Before the timed part each side writes all its files
// once (TC-NFS's warm-up run; it creates them), so the samples measure
// the steady state of the workload: whole-file overwrites.
//
// One sample is a pair of rounds, one per side, each round running
// matrixPerClient compounds on every client concurrently, so both sides
// see the same machine load; each side runs first in half the pairs, in
// a random order (seeded by the cell) so that no recurring background
// work of the server falls on one side's rounds. A pair's ratio is the
// transactional side's throughput over the plain side's. The cell reports
// the median ratio (txn/plain), its range (txn/plain-min, -max), an about
// 95% confidence interval of the median (txn/plain-ci-lo, -hi; see
// summarize), the number of pairs, at least matrixMinPairs (extra pairs
// beyond b.N run with the timer stopped, in the last run of the benchmark
// function only, see lastRun), and cpu-txn/plain, the server's CPU time
// per transactional compound over that per plain one; and per side
// files/s over all its rounds and the server's CPU µs and thread switches
// per compound (one server for both sides: per side only because rounds
// never overlap). ns/op is the time of one pair.
//
// TXNFS_MATRIX_ONLY=plain (or txn) runs that side's rounds only (no
// ratio is reported), to profile or strace the server on one kind of
// compound (TXNFS_BENCH_PPROF=127.0.0.1:PORT serves pprof).
//
// TXNFS_BENCH_METRICS=127.0.0.1:PORT also reports per side and compound
// the changes of the server's counters (serverCounters) — syncs, slice
// puts and their bytes, transaction retries, directory-lock waits.
//
//	go test ./nfs4/internal/nfsbench -run XXX -bench TxnMatrix -benchtime 2s
func BenchmarkTxnMatrix(b *testing.B) {
	addr, pid := startTxnfs(b, txnfsBinary(b))
	metrics := os.Getenv("TXNFS_BENCH_METRICS")
	only := os.Getenv("TXNFS_MATRIX_ONLY")
	src := bytes.Repeat([]byte("t"), 16<<20)
	for _, size := range matrixSizes {
		for _, n := range []int{1, 2, 4, 8} {
			w := matrixWorkload(size, n, src)
			per := matrixPerClient(size, n)
			// The sides' clients and files live across the benchmark's
			// calibration runs: dialed, and warmed up, once.
			var runs []*run
			b.Run(fmt.Sprintf("size=%s/clients=%d", sizeName(size), n), func(b *testing.B) {
				if runs == nil {
					runs = matrixSides(b, addr, n, &w, matrixFileCount(size, n)/n)
				}
				plain := &side{name: "plain", r: runs[0], pid: pid, metrics: metrics}
				txn := &side{name: "txn", r: runs[1], pid: pid, metrics: metrics}
				if only != "" {
					s := map[string]*side{"plain": plain, "txn": txn}[only]
					if s == nil {
						b.Fatalf("TXNFS_MATRIX_ONLY=%q: want plain or txn", only)
					}
					b.ResetTimer() // not the warm-up
					for range b.N {
						s.round(b, per, w.ops)
					}
					b.StopTimer()
					reportSide(b, s, &w)
					return
				}
				var ratios []float64
				// Pairs come in blocks of two, (plain, txn) then
				// (txn, plain) or the reverse, at random: each side
				// runs first equally often, and background work of
				// the server that recurs every few rounds (its
				// collector, the Go GC, the kv store's flushes) does
				// not fall on one side's rounds by aliasing, as it
				// did with a fixed alternation (1 MiB, 1 client: 0.75
				// in 2 of 8 runs, server CPU per txn compound +14–20%,
				// while each side alone costs the same CPU).
				rng := rand.New(rand.NewPCG(uint64(size), uint64(n)))
				plainFirst := false
				pair := func() {
					if len(ratios)%2 == 0 {
						plainFirst = rng.IntN(2) == 0
					} else {
						plainFirst = !plainFirst
					}
					first, second := plain, txn
					if !plainFirst {
						first, second = txn, plain
					}
					pd, td := plain.dur, txn.dur
					first.round(b, per, w.ops)
					second.round(b, per, w.ops)
					// Same compounds on both sides: the throughput
					// ratio is the inverse ratio of the times.
					ratios = append(ratios, float64(plain.dur-pd)/float64(txn.dur-td))
				}
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					pair()
				}
				b.StopTimer()
				if lastRun(b.N, time.Since(start)) {
					for len(ratios) < matrixMinPairs {
						pair()
					}
				}
				reportMatrix(b, plain, txn, ratios, &w)
			})
			for _, r := range runs {
				for _, c := range r.cs {
					c.Close()
				}
			}
		}
	}
}

// ratioStats summarizes a cell's samples: their median, range, and a
// distribution-free confidence interval of the median of about 95%
// (lo, hi: the order statistics k and n-1-k with k = ⌊(n − 1.96√n) / 2⌋;
// the whole range for fewer than 6 samples).
type ratioStats struct {
	median, min, max, lo, hi float64
}

// summarize returns the ratioStats of samples (sorting them).
func summarize(samples []float64) ratioStats {
	slices.Sort(samples)
	n := len(samples)
	st := ratioStats{median: samples[n/2], min: samples[0], max: samples[n-1]}
	if n%2 == 0 {
		st.median = (samples[n/2-1] + samples[n/2]) / 2
	}
	k := 0
	if n >= 6 {
		k = int((float64(n) - 1.96*math.Sqrt(float64(n))) / 2)
	}
	st.lo, st.hi = samples[k], samples[n-1-k]
	return st
}

// lastRun reports whether the testing package will not call the
// benchmark function again after a run of n iterations that took d: d
// reached -test.benchtime, or n its count (-test.benchtime Nx). Extra
// samples are only worth their time in that run; the calibration runs
// before it are discarded.
func lastRun(n int, d time.Duration) bool {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return true
	}
	bt := f.Value.String()
	if count, ok := strings.CutSuffix(bt, "x"); ok {
		want, err := strconv.Atoi(count)
		return err != nil || n >= want
	}
	want, err := time.ParseDuration(bt)
	return err != nil || d >= want
}

// matrixSides makes the runs of a cell's plain and transactional sides:
// their clients (closed by the caller) and directories, and writes each
// side's files once with perClient compounds per client.
func matrixSides(b *testing.B, addr string, clients int, w *workload, perClient int) []*run {
	var runs []*run
	for _, name := range []string{"plain", "txn"} {
		tg := &target{name: name, addr: addr, txn: name == "txn"}
		r := &run{counts: make([]int64, clients)}
		for range clients {
			r.cs = append(r.cs, tg.dialKept(b))
		}
		runs = append(runs, r)
		r.dir = r.cs[0].freshDir(b)
		s := &side{name: name, r: r}
		s.round(b, perClient, w.ops)
	}
	return runs
}

// reportMatrix reports a matrix cell's metrics (see BenchmarkTxnMatrix).
func reportMatrix(b *testing.B, plain, txn *side, ratios []float64, w *workload) {
	st := summarize(ratios)
	b.ReportMetric(st.median, "txn/plain")
	b.ReportMetric(st.min, "txn/plain-min")
	b.ReportMetric(st.max, "txn/plain-max")
	b.ReportMetric(st.lo, "txn/plain-ci-lo")
	b.ReportMetric(st.hi, "txn/plain-ci-hi")
	b.ReportMetric(float64(len(ratios)), "pairs")
	if plain.cpu > 0 && txn.cpu > 0 {
		// Server CPU per transactional compound over that per plain
		// one: the work each kind costs, much less sensitive to the
		// load of a shared machine than throughput.
		b.ReportMetric(float64(txn.cpu)/float64(txn.n)/(float64(plain.cpu)/float64(plain.n)), "cpu-txn/plain")
	}
	reportSide(b, plain, w)
	reportSide(b, txn, w)
}

// reportSide reports one side's throughput, server CPU and counters.
func reportSide(b *testing.B, s *side, w *workload) {
	b.ReportMetric(float64(s.n)*float64(w.files)/s.dur.Seconds(), s.name+"-files/s")
	if s.cpu > 0 {
		b.ReportMetric(float64(s.cpu.Microseconds())/float64(s.n), s.name+"-cpu-us/op")
		b.ReportMetric(float64(s.switches)/float64(s.n), s.name+"-switches/op")
	}
	for _, k := range serverCounters {
		if v, ok := s.counters[k.name]; ok {
			b.ReportMetric(v/k.unit/float64(s.n), s.name+"-"+k.short+"/op")
		}
	}
}
