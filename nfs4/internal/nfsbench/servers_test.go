package nfsbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// target is one server under test.
type target struct {
	name string   // sub-benchmark label: txnfs, txnfs-txn, ganesha
	addr string   // host:port
	path []string // components from the pseudo root to the export
	txn  bool     // send every COMPOUND as a transaction (OP_TXN)
	pid  int      // the server's process (0: unknown), for its CPU time
}

// processCPU returns the CPU time the threads of process pid have run so
// far (the sum of /proc/PID/task/*/schedstat, nanosecond resolution; a
// thread that exits takes its time with it) and how many times they were
// switched onto a CPU (schedstat's third field: one per context switch
// into the thread, voluntary or not), or zeros if it cannot be read.
func processCPU(pid int) (time.Duration, int64) {
	if pid <= 0 {
		return 0, 0
	}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	var sum time.Duration
	var runs int64
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // exited meanwhile
		}
		var ns, wait, n int64
		if _, err := fmt.Sscan(string(b), &ns, &wait, &n); err == nil {
			sum += time.Duration(ns)
			runs += n
		}
	}
	return sum, runs
}

// freeAddr returns a loopback address with a port that was free.
func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(addr string) bool {
	for i := 0; i < 400; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return true
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	// binDir is the temporary directory txnfsBinary built into (removed
	// by TestMain), or "".
	binDir string
)

// TestMain removes the txnfs binary txnfsBinary built, once every test
// and benchmark of the process has run (each `go test -bench` run left
// a 37 MB /tmp/nfsbench-bin-* directory behind).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// txnfsBinary builds cmd/txnfs once per process (TXNFS_BENCH_BIN: use
// that binary instead, e.g. one built from another tree).
func txnfsBinary(b *testing.B) string {
	buildOnce.Do(func() {
		if p := os.Getenv("TXNFS_BENCH_BIN"); p != "" {
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "nfsbench-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		binPath = filepath.Join(dir, "txnfs")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/txnfs/txnfs/cmd/txnfs").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binPath
}

// startTxnfs starts `txnfs serve` on a fresh data directory (with fsync:
// no NoSync option exists on the command line) and returns its address and
// process id. TXNFS_BENCH_PPROF=addr serves pprof from it,
// TXNFS_BENCH_METRICS=addr its Prometheus metrics.
func startTxnfs(b *testing.B, bin string) (string, int) {
	addr := freeAddr(b)
	// The collector runs as in production (paced by garbage, see
	// fs.RunCollector): an overwrite workload reuses the space it frees.
	args := []string{"serve", "--data", b.TempDir(), "--listen", addr, "--log-level", "warn"}
	if p := os.Getenv("TXNFS_BENCH_PPROF"); p != "" {
		args = append(args, "--debug", p)
	}
	if p := os.Getenv("TXNFS_BENCH_METRICS"); p != "" {
		args = append(args, "--metrics", p)
	}
	cmd := exec.Command(bin, args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	if !waitListening(addr) {
		b.Fatalf("txnfs serve did not start:\n%s", logs.String())
	}
	return addr, cmd.Process.Pid
}

// startGanesha starts NFS-Ganesha exporting a fresh directory
// (nfspeers.StartGanesha), or skips the benchmark if it cannot run here.
// It returns the address and the process id (0 if unknown).
func startGanesha(b *testing.B) (string, int) {
	p, err := nfspeers.StartGanesha(context.Background(), b.TempDir())
	if err != nil {
		b.Skipf("ganesha did not start: %v", err)
	}
	b.Cleanup(func() { p.Stop() })
	return p.Addr, p.PID
}

// client is one simulated NFS client: a connection with a 4.1 session.
type client struct {
	*testclient.Client
	tg *target
}

var ownerSeq atomic.Int64

func (tg *target) dial(b *testing.B) *client {
	c := tg.dialKept(b)
	b.Cleanup(func() { c.Close() })
	return c
}

// dialKept is dial of a client that the caller closes (not at the end of
// b).
func (tg *target) dialKept(b *testing.B) *client {
	c, err := testclient.Dial(tg.addr)
	if err != nil {
		b.Fatal(err)
	}
	big := nfsv4.ChannelAttrs4{CaMaxrequestsize: 17 << 20, CaMaxresponsesize: 17 << 20,
		CaMaxresponsesizeCached: 64 << 10, CaMaxoperations: 128, CaMaxrequests: 8}
	if _, err := c.NewSessionWith(1, fmt.Sprintf("nfsbench-%d-%d", os.Getpid(), ownerSeq.Add(1)), big); err != nil {
		c.Close()
		b.Fatalf("%s: %v", tg.name, err)
	}
	// Ganesha refuses OPEN (NFS4ERR_GRACE) until RECLAIM_COMPLETE.
	rep, err := c.Compound(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		c.Close()
		b.Fatalf("%s: RECLAIM_COMPLETE: %v %+v", tg.name, err, rep)
	}
	return &client{Client: c, tg: tg}
}

// do sends ops (as a transaction for txn targets) and fails unless the
// compound succeeded.
func (c *client) do(ops ...nfsv4.NfsArgop4) (*testclient.Reply, error) {
	var rep *testclient.Reply
	var err error
	if c.tg.txn {
		rep, err = c.Txn(ops...)
	} else {
		rep, err = c.Compound(ops...)
	}
	if err != nil {
		return nil, err
	}
	if rep.Status != nfsv4.NFS4_OK {
		return rep, fmt.Errorf("%s: compound status %d after %d results", c.tg.name, rep.Status, len(rep.Results))
	}
	return rep, nil
}

func (c *client) must(b *testing.B, ops ...nfsv4.NfsArgop4) *testclient.Reply {
	b.Helper()
	rep, err := c.do(ops...)
	if err != nil {
		b.Fatal(err)
	}
	return rep
}

// root returns the export root's file handle.
func (c *client) root(b *testing.B) []byte {
	ops := []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_PUTROOTFH{}}
	for _, p := range c.tg.path {
		ops = append(ops, lookup(p))
	}
	ops = append(ops, &nfsv4.NfsArgop4_OP_GETFH{})
	rep := c.must(b, ops...)
	return fhOf(rep.Last())
}

var runSeq atomic.Int64

// mkdir creates a fresh directory under the export root for one run and
// returns its handle.
func (c *client) freshDir(b *testing.B) []byte {
	name := fmt.Sprintf("run-%d-%d", os.Getpid(), runSeq.Add(1))
	rep := c.must(b, putfh(c.root(b)), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: name,
		Createattrs: nfsv4.Fattr4{Attrmask: bitmap(nfsv4.FATTR4_MODE), AttrVals: []byte{0, 0, 1, 0xff}}}},
		&nfsv4.NfsArgop4_OP_GETFH{})
	return fhOf(rep.Last())
}

func (tg *target) String() string { return tg.name + "@" + tg.addr + "/" + strings.Join(tg.path, "/") }

// serverCounter is a Prometheus counter of the txnfs server that the
// benchmarks report per compound (with TXNFS_BENCH_METRICS): name is the
// series as scraped (name and labels, "name" alone sums every label
// set), short the metric's name in the report, unit its divisor.
type serverCounter struct {
	name, short string
	unit        float64
}

var serverCounters = []serverCounter{
	{"txnfs_nfs4_compound_seconds_count", "server-compounds", 1},
	{`txnfs_nfs4_txn_total{outcome="retry"}`, "txn-retries", 1},
	{"txnfs_nfs4_dir_lock_total", "dirlock-events", 1},
	{`txnfs_nfs4_write_payload_aligned_total{result="hit"}`, "aligned-writes", 1},
	{"txnfs_slice_syncs_total", "slice-syncs", 1},
	{"txnfs_slice_fsyncs_total", "fdatasyncs", 1},
	{"txnfs_slice_puts_total", "puts", 1},
	{"txnfs_slice_put_bytes_total", "put-KiB", 1 << 10},
	{"txnfs_slice_direct_puts_total", "direct-puts", 1},
	{"txnfs_slice_unstaged_puts_total", "unstaged-puts", 1},
	{"txnfs_slice_lent_puts_total", "lent-puts", 1},
}

// scrapeCounters reads serverCounters from the Prometheus text exposition
// at addr; a counter not exposed yet (a label set never incremented)
// reads as 0.
func scrapeCounters(b *testing.B, addr string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatalf("metrics: %v", err)
	}
	return parseCounters(string(text))
}

// parseCounters returns serverCounters' values in a Prometheus text
// exposition: a series name with labels matches itself, a bare name every
// series of that name (summed); counters not in text read as 0.
func parseCounters(text string) map[string]float64 {
	m := make(map[string]float64, len(serverCounters))
	for _, k := range serverCounters {
		m[k.name] = 0
	}
	for _, line := range strings.Split(text, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(series, "{")
		for _, k := range serverCounters {
			if k.name == series || k.name == name {
				m[k.name] += v
			}
		}
	}
	return m
}
