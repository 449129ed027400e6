package vtools_test

// Benchmarks of vNFS §5.3: cp -r, ls -lR, rm -r, tar and untar of a tree
// shaped like the Linux source (scaled down: treegen.LinuxLike, 5,000
// files of mean 12 KiB in 350 directories) through a latency-injecting
// proxy, with the vectorized tools and with the same tools on the scalar
// baseline client (one POSIX call's RPCs at a time, like GNU tools on the
// kernel client). Metrics as in vnfs/bench_test.go.
//
// Environment: VNFS_BENCH_RTTS (default "0.2ms,1ms,5ms"),
// VNFS_BENCH_SERVERS (default "ganesha,txnfs"), VNFS_BENCH_TOOLS (default
// "cp,ls,rm,tar,untar"), VNFS_BENCH_TREE ("files,dirs,meanKiB"; default
// "5000,350,12"), VNFS_BENCH_SCALAR=0 (skip the scalar runs, which take
// minutes at 5 ms: no speedup is reported), VNFS_BENCH_CPUPROFILE (a directory: a CPU profile of
// this process — client and in-process txnfs server — is written there
// for each timed run, named server-rtt-tool-vec|scalar-i.pprof; merge
// them with go tool pprof -proto).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/internal/treegen"
	"github.com/txnfs/txnfs/vnfs"
	"github.com/txnfs/txnfs/vnfs/vtools"
)

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

var (
	benchTreeOnce sync.Once
	benchTreeDir  string
	benchTreeTar  string
	benchTreeSt   treegen.Stats
	benchTreeErr  error
)

// benchTree generates the tree and a tar archive of it once per run.
func benchTree(b *testing.B) (string, string, treegen.Stats) {
	benchTreeOnce.Do(func() {
		spec := treegen.LinuxLike
		if v := os.Getenv("VNFS_BENCH_TREE"); v != "" {
			f := strings.Split(v, ",")
			spec.Files, _ = strconv.Atoi(f[0])
			spec.Dirs, _ = strconv.Atoi(f[1])
			kib, _ := strconv.Atoi(f[2])
			spec.MeanSize = kib << 10
		}
		dir, err := os.MkdirTemp("", "vtools-bench-")
		if err != nil {
			benchTreeErr = err
			return
		}
		benchTreeDir = filepath.Join(dir, "linux")
		if benchTreeSt, benchTreeErr = treegen.Generate(benchTreeDir, spec); benchTreeErr != nil {
			return
		}
		benchTreeTar = filepath.Join(dir, "linux.tar")
		env := &vtools.Env{Mounts: &vnfs.Mounts{}, Stdout: io.Discard, Stderr: io.Discard}
		defer env.Mounts.Close()
		benchTreeErr = vtools.Tar(context.Background(), env, []string{benchTreeDir}, vtools.TarOptions{Archive: benchTreeTar})
	})
	if benchTreeErr != nil {
		b.Fatal(benchTreeErr)
	}
	return benchTreeDir, benchTreeTar, benchTreeSt
}

const benchBandwidth = 1.25e9

func BenchmarkTree(b *testing.B) {
	ctx := context.Background()
	src, archive, st := benchTree(b)
	var rtts []time.Duration
	for _, s := range envList("VNFS_BENCH_RTTS", "0.2ms,1ms,5ms") {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, d)
	}
	servers := envList("VNFS_BENCH_SERVERS", "ganesha,txnfs")
	tools := envList("VNFS_BENCH_TOOLS", "cp,ls,rm,tar,untar")
	modes := []bool{false, true} // vectorized, scalar
	if os.Getenv("VNFS_BENCH_SCALAR") == "0" {
		modes = modes[:1]
	}
	for _, p := range peers {
		if !contains(servers, p.Name) {
			continue
		}
		direct := &vtools.Env{Mounts: &vnfs.Mounts{}, Stdout: io.Discard, Stderr: io.Discard}
		base := fmt.Sprintf("benchtree%d", seq.Add(1))
		if err := vtools.Cp(ctx, direct, []string{src}, url(p, base), vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
			b.Fatal(err)
		}
		for _, rtt := range rtts {
			l, err := nfspeers.NewLink(ctx, p, rtt)
			if err != nil {
				b.Fatal(err)
			}
			lurl := func(rel string) string { return "nfs://" + l.Addr + filepath.Join(p.Root, rel) }
			for _, tool := range tools {
				b.Run(fmt.Sprintf("server=%s/rtt=%v/tool=%s", p.Name, rtt, tool), func(b *testing.B) {
					var times, cpu [2]time.Duration
					var calls [2]uint64
					var bytes int64
					for k, scalar := range modes {
						n := 1
						if !scalar {
							n = b.N
						}
						for i := 0; i < n; i++ {
							name := fmt.Sprintf("%s-%s-%d", base, tool, seq.Add(1))
							var run func(env *vtools.Env) error
							switch tool {
							case "cp":
								run = func(env *vtools.Env) error {
									return vtools.Cp(ctx, env, []string{lurl(base)}, lurl(name), vtools.CpOptions{Recursive: true})
								}
								bytes = 2 * st.Bytes
							case "ls":
								run = func(env *vtools.Env) error {
									return vtools.Ls(ctx, env, []string{lurl(base)}, vtools.LsOptions{Long: true, Recursive: true})
								}
							case "rm":
								if err := vtools.Cp(ctx, direct, []string{url(p, base)}, url(p, name), vtools.CpOptions{Recursive: true}); err != nil {
									b.Fatal(err)
								}
								run = func(env *vtools.Env) error {
									return vtools.Rm(ctx, env, []string{lurl(name)}, vtools.RmOptions{Recursive: true})
								}
							case "tar":
								out := filepath.Join(b.TempDir(), "out.tar")
								run = func(env *vtools.Env) error {
									return vtools.Tar(ctx, env, []string{lurl(base)}, vtools.TarOptions{Archive: out})
								}
								bytes = st.Bytes
							case "untar":
								if err := vtools.Mkdir(ctx, direct, []string{url(p, name)}, vtools.MkdirOptions{}); err != nil {
									b.Fatal(err)
								}
								run = func(env *vtools.Env) error {
									return vtools.Untar(ctx, env, vtools.UntarOptions{Archive: archive, Dir: lurl(name)})
								}
								bytes = st.Bytes
							}
							env := &vtools.Env{Mounts: &vnfs.Mounts{Config: vnfs.Config{Scalar: scalar}}, Stdout: io.Discard, Stderr: io.Discard}
							if !scalar && i == 0 {
								b.ResetTimer()
							}
							stopProfile := startProfile(b, fmt.Sprintf("%s-%v-%s-%s-%d", p.Name, rtt, tool, map[bool]string{false: "vec", true: "scalar"}[scalar], i))
							start, cpu0 := time.Now(), procCPU()
							if err := run(env); err != nil {
								b.Fatalf("%s client: %v", map[bool]string{false: "vectorized", true: "scalar"}[scalar], err)
							}
							stopProfile()
							times[k] += time.Since(start)
							cpu[k] += procCPU() - cpu0
							calls[k] += env.Mounts.Stats().Compounds
							env.Mounts.Close()
							if !scalar && i == n-1 {
								b.StopTimer()
							}
							if tool == "cp" || tool == "untar" {
								vtools.Rm(ctx, direct, []string{url(p, name)}, vtools.RmOptions{Recursive: true, Force: true})
							}
						}
						times[k] /= time.Duration(n)
						cpu[k] /= time.Duration(n)
						calls[k] /= uint64(n)
					}
					vec, scalar := times[0], times[1]
					floor := time.Duration(calls[0])*l.RTT + time.Duration(float64(bytes)/benchBandwidth*1e9)
					b.ReportMetric(float64(vec)/1e6, "vec-ms")
					b.ReportMetric(float64(calls[0]), "vec-rpcs")
					if len(modes) > 1 {
						b.ReportMetric(float64(scalar)/1e6, "scalar-ms")
						b.ReportMetric(float64(scalar)/float64(vec), "speedup")
						b.ReportMetric(float64(calls[1]), "scalar-rpcs")
					}
					b.ReportMetric(float64(vec)/float64(floor), "floor-ratio")
					b.ReportMetric(float64(l.RTT)/1e3, "rtt-us")
					if p.Name == "txnfs" {
						// CPU of this process: the txnfs server runs in
						// it (Ganesha does not), so this is mostly
						// server time.
						b.ReportMetric(float64(cpu[0])/1e6, "vec-cpu-ms")
						if len(modes) > 1 {
							b.ReportMetric(float64(cpu[1])/1e6, "scalar-cpu-ms")
						}
					}
				})
			}
			l.Close()
		}
		vtools.Rm(ctx, direct, []string{url(p, base)}, vtools.RmOptions{Recursive: true, Force: true})
		direct.Mounts.Close()
	}
}

// startProfile starts a CPU profile into $VNFS_BENCH_CPUPROFILE/name.pprof
// when that variable is set (a name already there is kept: the first
// run's when the benchmark is run again) and returns its stop function.
func startProfile(b *testing.B, name string) func() {
	dir := os.Getenv("VNFS_BENCH_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, name+".pprof")
	if _, err := os.Stat(path); err == nil {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// procCPU is the user and system CPU time this process used so far.
func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
