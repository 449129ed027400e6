package vnfs_test

// Benchmarks of vNFS §5.2 through a latency-injecting proxy: the
// vectorized client against the scalar baseline (one POSIX call's RPCs at
// a time, like the kernel client). Each sub-benchmark times the vectorized
// call over b.N iterations (ns/op) and the scalar baseline once, and
// reports:
//
//	vec-ms, scalar-ms   wall time of one vectorized / scalar run
//	speedup             scalar-ms / vec-ms
//	vec-rpcs, scalar-rpcs  COMPOUNDs per run
//	floor-ratio         vec-ms / (vec-rpcs × RTT + bytes / 1.25 GB/s)
//	rtt-us              measured RTT through the proxy
//
// op=write-unordered writes through vnfs.Unordered (COMPOUNDs pipelined)
// and is compared with the scalar write.
//
// Environment: VNFS_BENCH_OPS (default "read,write,write-unordered"),
// VNFS_BENCH_RTTS (default "0.2ms,1ms,5ms"), VNFS_BENCH_SIZES
// (default "1KiB,16KiB,256KiB,1MiB"), VNFS_BENCH_FILES (default 1000),
// VNFS_BENCH_SERVERS (default all), VNFS_BENCH_SCALAR=0 (skip the scalar
// runs, e.g. for a profile of the vectorized calls alone; scalar-ms and
// speedup are then 0). See docs/vnfs.md.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/vnfs"
)

const benchBandwidth = 1.25e9 // bytes/s: the 10 GbE of the vNFS testbed

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

func benchRTTs(b *testing.B) []time.Duration {
	var out []time.Duration
	for _, s := range envList("VNFS_BENCH_RTTS", "0.2ms,1ms,5ms") {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func parseSize(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "KiB"):
		mult, s = 1<<10, strings.TrimSuffix(s, "KiB")
	case strings.HasSuffix(s, "MiB"):
		mult, s = 1<<20, strings.TrimSuffix(s, "MiB")
	}
	n, _ := strconv.Atoi(s)
	return n * mult
}

func benchPeers(b *testing.B) []*nfspeers.Peer {
	want := envList("VNFS_BENCH_SERVERS", "ganesha,txnfs")
	var out []*nfspeers.Peer
	for _, p := range peers {
		for _, w := range want {
			if p.Name == w {
				out = append(out, p)
			}
		}
	}
	return out
}

func rpcs(f vnfs.FS) uint64 { return f.(vnfs.StatsFS).Stats().Compounds }

// report adds the comparison metrics.
// processCPU is the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, vec, scalar time.Duration, vecRPCs, scalarRPCs uint64, bytes int64, rtt time.Duration) {
	floor := time.Duration(vecRPCs)*rtt + time.Duration(float64(bytes)/benchBandwidth*1e9)
	b.ReportMetric(float64(vec)/1e6, "vec-ms")
	b.ReportMetric(float64(scalar)/1e6, "scalar-ms")
	b.ReportMetric(float64(scalar)/float64(vec), "speedup")
	b.ReportMetric(float64(vecRPCs), "vec-rpcs")
	b.ReportMetric(float64(scalarRPCs), "scalar-rpcs")
	b.ReportMetric(float64(vec)/float64(floor), "floor-ratio")
	b.ReportMetric(float64(rtt)/1e3, "rtt-us")
}

// forEachLink runs fn for every benchmarked server and round-trip time,
// with a latency-injecting link to the server and a direct client (for
// setup), closing both afterwards.
func forEachLink(b *testing.B, fn func(p *nfspeers.Peer, rtt time.Duration, l *nfspeers.Link, direct vnfs.FS)) {
	ctx := context.Background()
	for _, p := range benchPeers(b) {
		direct, err := vnfs.Dial(ctx, vnfs.Config{Addr: p.Addr, Root: p.Root})
		if err != nil {
			b.Fatal(err)
		}
		for _, rtt := range benchRTTs(b) {
			l, err := nfspeers.NewLink(ctx, p, rtt)
			if err != nil {
				b.Fatal(err)
			}
			fn(p, rtt, l, direct)
			l.Close()
		}
		direct.Close()
	}
}

// dialPair connects a vectorized and a scalar client through the link.
func dialPair(b *testing.B, l *nfspeers.Link) (vnfs.FS, vnfs.FS) {
	ctx := context.Background()
	v, err := vnfs.Dial(ctx, vnfs.Config{Addr: l.Addr, Root: l.Peer.Root})
	if err != nil {
		b.Fatal(err)
	}
	s, err := vnfs.Dial(ctx, vnfs.Config{Addr: l.Addr, Root: l.Peer.Root, Scalar: true})
	if err != nil {
		b.Fatal(err)
	}
	return v, s
}

// BenchmarkFiles reads and writes 1,000 equally sized files in their
// entirety (vNFS Figure 6).
func BenchmarkFiles(b *testing.B) {
	ctx := context.Background()
	nfiles, _ := strconv.Atoi(envList("VNFS_BENCH_FILES", "1000")[0])
	forEachLink(b, func(p *nfspeers.Peer, rtt time.Duration, l *nfspeers.Link, direct vnfs.FS) {
		for _, sz := range envList("VNFS_BENCH_SIZES", "1KiB,16KiB,256KiB,1MiB") {
			size := parseSize(sz)
			dir := fmt.Sprintf("/bench-files-%d", seq.Add(1))
			if err := vnfs.Mkdir(ctx, direct, dir, 0o755); err != nil {
				b.Fatal(err)
			}
			mkIOs := func(write bool) []vnfs.IO {
				ios := make([]vnfs.IO, nfiles)
				for i := range ios {
					ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%04d", dir, i)), Data: make([]byte, size)}
					if write {
						ios[i].Flags = vnfs.Create | vnfs.Truncate | vnfs.Stable
						ios[i].Data[0] = byte(i)
					}
				}
				return ios
			}
			if _, err := direct.VWrite(ctx, mkIOs(true)); err != nil {
				b.Fatal(err)
			}
			var scalarWrite time.Duration
			var scalarWriteRPCs uint64
			for _, op := range envList("VNFS_BENCH_OPS", "read,write,write-unordered") {
				name := fmt.Sprintf("server=%s/rtt=%v/size=%s/op=%s", p.Name, rtt, sz, op)
				b.Run(name, func(b *testing.B) {
					v, s := dialPair(b, l)
					defer v.Close()
					defer s.Close()
					call := func(f vnfs.FS) {
						ios := mkIOs(op != "read")
						var err error
						switch op {
						case "read":
							_, err = f.VRead(ctx, ios)
						case "write":
							_, err = f.VWrite(ctx, ios)
						case "write-unordered":
							_, err = vnfs.Unordered(f).VWrite(ctx, ios)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					// The scalar baseline has no unordered mode: the
					// unordered write is compared with the scalar write.
					scalar, scalarRPCs := scalarWrite, scalarWriteRPCs
					if os.Getenv("VNFS_BENCH_SCALAR") != "0" && (op != "write-unordered" || scalar == 0) {
						r0 := rpcs(s)
						start := time.Now()
						call(s)
						scalar, scalarRPCs = time.Since(start), rpcs(s)-r0
					}
					if op == "write" {
						scalarWrite, scalarWriteRPCs = scalar, scalarRPCs
					}
					b.SetBytes(int64(size * nfiles))
					b.ResetTimer()
					r0 := rpcs(v)
					cpu0 := processCPU()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						call(v)
					}
					vec := time.Since(start) / time.Duration(b.N)
					// The in-process server's, client's and proxy's CPU:
					// less sensitive than vec-ms to other processes' load.
					b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "vec-cpu-ms")
					report(b, vec, scalar, (rpcs(v)-r0)/uint64(b.N), scalarRPCs, int64(size*nfiles), l.RTT)
				})
			}
			vnfs.RemoveRecursive(ctx, direct, dir)
		}
	})
}

// degreeOp is one API of BenchmarkDegree: setup prepares round r (not
// timed) and call runs the vector call of k items.
type degreeOp struct {
	name  string
	setup func(ctx context.Context, f vnfs.FS, dir string, k int) error
	call  func(ctx context.Context, f vnfs.FS, dir string, k, round int) error
}

func names(dir, prefix string, k, round int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%s%d-%d", dir, prefix, round, i)
	}
	return out
}

var degreeOps = []degreeOp{
	{name: "read4k", setup: func(ctx context.Context, f vnfs.FS, dir string, k int) error {
		ios := make([]vnfs.IO, k)
		for i := range ios {
			ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/r%d", dir, i)), Data: make([]byte, 4096), Flags: vnfs.Create}
		}
		_, err := f.VWrite(ctx, ios)
		return err
	}, call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		ios := make([]vnfs.IO, k)
		for i := range ios {
			ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/r%d", dir, i)), Data: make([]byte, 4096)}
		}
		_, err := f.VRead(ctx, ios)
		return err
	}},
	{name: "write4ksync", call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		ios := make([]vnfs.IO, k)
		for i, n := range names(dir, "w", k, round%2) {
			ios[i] = vnfs.IO{File: vnfs.P(n), Data: make([]byte, 4096), Flags: vnfs.Create | vnfs.Stable}
		}
		_, err := f.VWrite(ctx, ios)
		return err
	}},
	{name: "getattr", setup: func(ctx context.Context, f vnfs.FS, dir string, k int) error {
		_, err := f.VMkdir(ctx, mkdirs(names(dir, "g", k, 0)))
		return err
	}, call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		it := make([]vnfs.AttrItem, k)
		for i, n := range names(dir, "g", k, 0) {
			it[i] = vnfs.AttrItem{File: vnfs.P(n), Mask: vnfs.AttrStat}
		}
		_, err := f.VGetAttrs(ctx, it)
		return err
	}},
	{name: "setattr4", setup: func(ctx context.Context, f vnfs.FS, dir string, k int) error {
		ios := make([]vnfs.IO, k)
		for i, n := range names(dir, "s", k, 0) {
			ios[i] = vnfs.IO{File: vnfs.P(n), Flags: vnfs.Create}
		}
		_, err := f.VWrite(ctx, ios)
		return err
	}, call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		it := make([]vnfs.AttrItem, k)
		for i, n := range names(dir, "s", k, 0) {
			it[i] = vnfs.AttrItem{File: vnfs.P(n), Mask: vnfs.AttrMode | vnfs.AttrUid | vnfs.AttrMtime | vnfs.AttrSize,
				Attr: vnfs.Attr{Mode: 0o600 | uint32(round&1)<<2, Uid: uint32(round), Mtime: time.Unix(int64(round), 0), Size: uint64(round % 7)}}
		}
		_, err := f.VSetAttrs(ctx, it)
		return err
	}},
	{name: "mkdir", call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		_, err := f.VMkdir(ctx, mkdirs(names(dir, "m", k, round)))
		return err
	}},
	{name: "symlink", call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		it := make([]vnfs.SymlinkItem, k)
		for i, n := range names(dir, "l", k, round) {
			it[i] = vnfs.SymlinkItem{Path: n, Target: "target/of/the/link"}
		}
		_, err := f.VSymlink(ctx, it)
		return err
	}},
	{name: "rename", setup: func(ctx context.Context, f vnfs.FS, dir string, k int) error {
		_, err := f.VMkdir(ctx, mkdirs(names(dir, "n", k, 0)))
		return err
	}, call: func(ctx context.Context, f vnfs.FS, dir string, k, round int) error {
		from, to := names(dir, "n", k, round), names(dir, "n", k, round+1)
		it := make([]vnfs.RenameItem, k)
		for i := range it {
			it[i] = vnfs.RenameItem{Old: from[i], New: to[i]}
		}
		_, err := f.VRename(ctx, it)
		return err
	}},
}

func mkdirs(ps []string) []vnfs.MkdirItem {
	out := make([]vnfs.MkdirItem, len(ps))
	for i, p := range ps {
		out[i] = vnfs.MkdirItem{Path: p}
	}
	return out
}

// BenchmarkDegree varies the number of items per vector call from 1 to
// 256 (vNFS Figure 7); the baseline issues the same items one POSIX call
// at a time.
func BenchmarkDegree(b *testing.B) {
	ctx := context.Background()
	rtts := benchRTTs(b)[:1]
	for _, p := range benchPeers(b) {
		for _, rtt := range rtts {
			l, err := nfspeers.NewLink(ctx, p, rtt)
			if err != nil {
				b.Fatal(err)
			}
			for _, op := range degreeOps {
				for _, k := range []int{1, 4, 16, 64, 256} {
					b.Run(fmt.Sprintf("server=%s/rtt=%v/api=%s/degree=%d", p.Name, rtt, op.name, k), func(b *testing.B) {
						v, s := dialPair(b, l)
						defer v.Close()
						defer s.Close()
						measure := func(f vnfs.FS, n int, timer bool) (time.Duration, uint64) {
							dir := fmt.Sprintf("/bench-deg-%d", seq.Add(1))
							if err := vnfs.Mkdir(ctx, f, dir, 0o755); err != nil {
								b.Fatal(err)
							}
							if op.setup != nil {
								if err := op.setup(ctx, f, dir, k); err != nil {
									b.Fatal(err)
								}
							}
							r0 := rpcs(f)
							if timer {
								b.ResetTimer()
							}
							start := time.Now()
							for i := 0; i < n; i++ {
								if err := op.call(ctx, f, dir, k, i); err != nil {
									b.Fatal(err)
								}
							}
							d := time.Since(start) / time.Duration(n)
							if timer {
								b.StopTimer()
							}
							r := (rpcs(f) - r0) / uint64(n)
							vnfs.RemoveRecursive(ctx, f, dir)
							return d, r
						}
						scalar, sr := measure(s, 3, false)
						vec, vr := measure(v, b.N, true)
						report(b, vec, scalar, vr, sr, 0, l.RTT)
					})
				}
			}
			l.Close()
		}
	}
}
