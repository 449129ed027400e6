package nfsbench

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// run is the state of one sub-benchmark: its clients and files.
type run struct {
	cs     []*client
	dir    []byte // a fresh directory
	small  []byte // 4 KiB file "small" in dir
	big    []byte // 1 MiB file "big" in dir
	fhs    [][]byte
	sids   []nfsv4.Stateid4 // per client: open stateid of fhs[id] (or of big)
	prefix string
	counts []int64 // per client: compounds it ran (BenchmarkTxnMatrix)
}

type workload struct {
	name  string
	bytes int // payload bytes per compound (for MB/s)
	files int // files created per compound (for files/s)
	setup func(b *testing.B, r *run)
	ops   func(r *run, id int, i int64) []nfsv4.NfsArgop4
}

var (
	data4K = bytes.Repeat([]byte("s"), 4<<10)
	data1M = bytes.Repeat([]byte("B"), 1<<20)
)

// setupFile creates name in r.dir with data (plain compound, FILE_SYNC)
// and returns its handle.
func setupFile(b *testing.B, r *run, name string, data []byte) []byte {
	c := r.cs[0]
	rep, err := c.Compound(putfh(r.dir), open(c.ClientID, "setup", name, nfsv4.OPEN4_SHARE_ACCESS_BOTH, true),
		write(current, 0, data, nfsv4.FILE_SYNC4), getfh(), closeOp(current))
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		b.Fatalf("%s: setup %s: %v %+v", c.tg.name, name, err, rep)
	}
	return fhOf(rep.Results[3])
}

// openAll opens fh (by name in r.dir) for every client and keeps the
// stateids.
func openAll(b *testing.B, r *run, name string, access uint32) {
	r.sids = make([]nfsv4.Stateid4, len(r.cs))
	for id, c := range r.cs {
		rep, err := c.Compound(putfh(r.dir), open(c.ClientID, fmt.Sprintf("o%d", id), name, access, true))
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			b.Fatalf("%s: open %s: %v %+v", c.tg.name, name, err, rep)
		}
		r.sids[id] = sidOf(rep.Results[1])
	}
}

func stableName(s nfsv4.StableHow4) string {
	if s == nfsv4.UNSTABLE4 {
		return "unstable+commit"
	}
	return "file_sync"
}

// writeOps is WRITE with the given stability; UNSTABLE is followed by
// COMMIT, so the data is durable when the compound returns either way.
func writeOps(sid nfsv4.Stateid4, off uint64, data []byte, stable nfsv4.StableHow4) []nfsv4.NfsArgop4 {
	if stable == nfsv4.UNSTABLE4 {
		return []nfsv4.NfsArgop4{write(sid, off, data, stable), commit()}
	}
	return []nfsv4.NfsArgop4{write(sid, off, data, stable)}
}

func workloads() []workload {
	ws := []workload{
		{name: "op=GETATTR",
			setup: func(b *testing.B, r *run) { r.small = setupFile(b, r, "small", data4K) },
			ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
				return []nfsv4.NfsArgop4{putfh(r.small), getattr(linuxAttrs)}
			}},
		{name: "op=LOOKUP",
			setup: func(b *testing.B, r *run) { r.small = setupFile(b, r, "small", data4K) },
			ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
				return []nfsv4.NfsArgop4{putfh(r.dir), lookup("small"), getfh(), getattr(linuxAttrs)}
			}},
		{name: "op=OPEN+READ+CLOSE/size=4KiB", bytes: 4 << 10,
			setup: func(b *testing.B, r *run) { r.small = setupFile(b, r, "small", data4K) },
			ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
				c := r.cs[id]
				return []nfsv4.NfsArgop4{putfh(r.dir), open(c.ClientID, "r", "small", nfsv4.OPEN4_SHARE_ACCESS_READ, false),
					read(current, 0, 4<<10), closeOp(current)}
			}},
		{name: "op=READ/size=1MiB", bytes: 1 << 20,
			setup: func(b *testing.B, r *run) {
				r.big = setupFile(b, r, "big", data1M)
				openAll(b, r, "big", nfsv4.OPEN4_SHARE_ACCESS_READ)
			},
			ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
				return []nfsv4.NfsArgop4{putfh(r.big), read(r.sids[id], 0, 1<<20)}
			}},
	}
	for _, stable := range []nfsv4.StableHow4{nfsv4.FILE_SYNC4, nfsv4.UNSTABLE4} {
		ws = append(ws,
			workload{name: "op=CREATE+WRITE+CLOSE/size=4KiB/stable=" + stableName(stable), bytes: 4 << 10, files: 1,
				ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
					c := r.cs[id]
					ops := []nfsv4.NfsArgop4{putfh(r.dir), open(c.ClientID, "w", fmt.Sprintf("c-%d-%d", id, i), nfsv4.OPEN4_SHARE_ACCESS_BOTH, true)}
					ops = append(ops, writeOps(current, 0, data4K, stable)...)
					return append(ops, closeOp(current))
				}},
			workload{name: "op=WRITE/size=1MiB/stable=" + stableName(stable), bytes: 1 << 20,
				// Each client overwrites its own file (as in TC-NFS).
				setup: func(b *testing.B, r *run) {
					r.fhs = make([][]byte, len(r.cs))
					for id := range r.cs {
						r.fhs[id] = setupFile(b, r, fmt.Sprintf("big-%d", id), nil)
					}
					r.sids = make([]nfsv4.Stateid4, len(r.cs))
					for id, c := range r.cs {
						rep, err := c.Compound(putfh(r.dir), open(c.ClientID, "o", fmt.Sprintf("big-%d", id), nfsv4.OPEN4_SHARE_ACCESS_BOTH, false))
						if err != nil || rep.Status != nfsv4.NFS4_OK {
							b.Fatalf("%s: open: %v %+v", c.tg.name, err, rep)
						}
						r.sids[id] = sidOf(rep.Results[1])
					}
				},
				ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
					return append([]nfsv4.NfsArgop4{putfh(r.fhs[id])}, writeOps(r.sids[id], 0, data1M, stable)...)
				}},
			// 16 small files per COMPOUND: PUTFH, then per file OPEN
			// (create), WRITE 4 KiB [, COMMIT], CLOSE, PUTFH: 65 (81)
			// operations plus SEQUENCE; Ganesha allows 100.
			workload{name: "op=SMALLFILES/files=16/size=4KiB/stable=" + stableName(stable), bytes: 16 * 4 << 10, files: 16,
				ops: func(r *run, id int, i int64) []nfsv4.NfsArgop4 {
					c := r.cs[id]
					ops := []nfsv4.NfsArgop4{putfh(r.dir)}
					for k := 0; k < 16; k++ {
						ops = append(ops, open(c.ClientID, "w", fmt.Sprintf("s-%d-%d-%d", id, i, k), nfsv4.OPEN4_SHARE_ACCESS_BOTH, true))
						ops = append(ops, writeOps(current, 0, data4K, stable)...)
						ops = append(ops, closeOp(current), putfh(r.dir))
					}
					return ops
				}},
		)
	}
	return ws
}

// side is one server (or compound kind) measured in a benchmark: its
// clients and files, and the compounds run and time spent on it.
type side struct {
	name string
	pid  int // server process (0: CPU time not measured)
	r    *run
	next atomic.Int64 // iteration numbers (unique file names)
	n    int64
	dur  time.Duration
	cpu  time.Duration // the server process's CPU time during the rounds
	// switches counts the times the server's threads were switched onto
	// a CPU during the rounds (see processCPU).
	switches int64
	// metrics is the server's Prometheus address ("" for none); counters
	// sums the changes of serverCounters during the rounds.
	metrics  string
	counters map[string]float64
}

func newSide(b *testing.B, tg *target, clients int, w *workload) *side {
	r := &run{}
	for i := 0; i < clients; i++ {
		r.cs = append(r.cs, tg.dial(b))
	}
	r.dir = r.cs[0].freshDir(b)
	if w.setup != nil {
		w.setup(b, r)
	}
	return &side{name: tg.name, r: r, pid: tg.pid}
}

// round runs perClient compounds on every client of s concurrently (one
// in flight per client) and adds the wall time to s.
func (s *side) round(b *testing.B, perClient int, ops func(r *run, id int, i int64) []nfsv4.NfsArgop4) {
	var wg sync.WaitGroup
	var failed atomic.Value
	var m0 map[string]float64
	if s.metrics != "" {
		m0 = scrapeCounters(b, s.metrics)
	}
	cpu0, runs0 := processCPU(s.pid)
	start := time.Now()
	for id, c := range s.r.cs {
		wg.Add(1)
		go func(id int, c *client) {
			defer wg.Done()
			for k := 0; k < perClient; k++ {
				if _, err := c.do(ops(s.r, id, s.next.Add(1))...); err != nil {
					failed.Store(err.Error())
					return
				}
			}
		}(id, c)
	}
	wg.Wait()
	s.dur += time.Since(start)
	cpu1, runs1 := processCPU(s.pid)
	s.cpu += cpu1 - cpu0
	s.switches += runs1 - runs0
	if m0 != nil {
		if s.counters == nil {
			s.counters = map[string]float64{}
		}
		for k, v := range scrapeCounters(b, s.metrics) {
			s.counters[k] += v - m0[k]
		}
	}
	s.n += int64(perClient * len(s.r.cs))
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
}

// interleave runs b.N rounds; each round runs a few compounds per client
// on every side in turn, so that all sides see the same machine load (the
// benchmark host is shared: load drifts over seconds). It reports, per
// side, compounds/s and (with bytes or files per compound) MB/s or
// files/s, and each side's throughput relative to the last side.
func interleave(b *testing.B, sides []*side, perClient int, w *workload) {
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range sides {
			s.round(b, perClient, w.ops)
		}
	}
	b.StopTimer()
	base := sides[len(sides)-1]
	rate := func(s *side) float64 { return float64(s.n) / s.dur.Seconds() }
	for _, s := range sides {
		switch {
		case w.files > 0:
			b.ReportMetric(rate(s)*float64(w.files), s.name+"-files/s")
		case w.bytes >= 1<<20:
			b.ReportMetric(rate(s)*float64(w.bytes)/1e6, s.name+"-MB/s")
		default:
			b.ReportMetric(rate(s), s.name+"-compounds/s")
		}
		if s != base {
			b.ReportMetric(rate(s)/rate(base), s.name+"/"+base.name)
		}
		if s.cpu > 0 {
			// Server CPU per compound: less sensitive to the load of
			// a shared machine than throughput.
			b.ReportMetric(float64(s.cpu.Microseconds())/float64(s.n), s.name+"-cpu-us/op")
			// Thread switches per compound: each costs the server a
			// scheduler round (and, on a VM, more).
			b.ReportMetric(float64(s.switches)/float64(s.n), s.name+"-switches/op")
		}
	}
}

// BenchmarkVsGanesha runs the workloads of issue 3 against txnfs (plain
// and transactional compounds) and NFS-Ganesha in the same run, with 1
// and 16 clients, interleaved in short rounds (see interleave). Both
// servers make data durable before replying: FILE_SYNC WRITEs (Ganesha
// fsyncs the file; txnfs commits durably), and the
// stable=unstable+commit variants send UNSTABLE WRITEs followed by COMMIT
// in the same compound.
//
//	go test ./nfs4/internal/nfsbench -run XXX -bench VsGanesha -benchtime 20x
//
// TXNFS_BENCH_BASE=path adds a side "base" (plain compounds) served by
// another txnfs binary, e.g. one built from an earlier commit, for an A/B
// comparison under the same load.
func BenchmarkVsGanesha(b *testing.B) {
	gaddr, gpid := startGanesha(b)
	taddr, tpid := startTxnfs(b, txnfsBinary(b))
	targets := []*target{
		{name: "txnfs", addr: taddr, pid: tpid},
		{name: "txnfs-txn", addr: taddr, txn: true, pid: tpid},
	}
	if base := os.Getenv("TXNFS_BENCH_BASE"); base != "" {
		baddr, bpid := startTxnfs(b, base)
		targets = append(targets, &target{name: "base", addr: baddr, pid: bpid})
	}
	targets = append(targets, &target{name: "ganesha", addr: gaddr, path: []string{"export"}, pid: gpid})
	for _, w := range workloads() {
		for _, n := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", w.name, n), func(b *testing.B) {
				var sides []*side
				for _, tg := range targets {
					sides = append(sides, newSide(b, tg, n, &w))
				}
				per := 64 / n
				if w.bytes >= 1<<20 || w.files > 1 {
					per = max(1, 16/n)
				}
				interleave(b, sides, per, &w)
			})
		}
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return fmt.Sprintf("%dKiB", n>>10)
	}
}
