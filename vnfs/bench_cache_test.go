package vnfs_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/vnfs"
)

// BenchmarkRepeatRead is vNFS Figure 8: one file opened, read whole and
// closed VNFS_BENCH_REPEAT times (default 100), by three clients, each
// starting cold: the vectorized client without a cache (one COMPOUND per
// read: OPEN, READ..., CLOSE), the vectorized client with its data cache
// (Config.Cache: after the first read, one COMPOUND of PUTFH, LOOKUP,
// VERIFY per read and no data), and the baseline with the kernel-like
// data cache of Config.ScalarCache (after the first read OPEN+GETATTR for
// revalidation and CLOSE: 2 RPCs). Metrics: vec-* (no cache), cached-*,
// scalar-*; speedup and cached-speedup are the baseline's time over each.
// Sizes: VNFS_BENCH_SIZES (default 1KiB,16KiB,256KiB,1MiB,16MiB); RTTs:
// VNFS_BENCH_RTTS.
func BenchmarkRepeatRead(b *testing.B) {
	ctx := context.Background()
	repeat, _ := strconv.Atoi(envList("VNFS_BENCH_REPEAT", "100")[0])
	forEachLink(b, func(p *nfspeers.Peer, rtt time.Duration, l *nfspeers.Link, direct vnfs.FS) {
		for _, sz := range envList("VNFS_BENCH_SIZES", "1KiB,16KiB,256KiB,1MiB,16MiB") {
			size := parseSize(sz)
			name := fmt.Sprintf("/bench-repeat-%d", seq.Add(1))
			if err := vnfs.WriteFile(ctx, direct, name, make([]byte, size), 0o644); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("server=%s/rtt=%v/size=%s", p.Name, rtt, sz), func(b *testing.B) {
				v, err := vnfs.Dial(ctx, vnfs.Config{Addr: l.Addr, Root: p.Root})
				if err != nil {
					b.Fatal(err)
				}
				defer v.Close()
				s, err := vnfs.Dial(ctx, vnfs.Config{Addr: l.Addr, Root: p.Root, Scalar: true, ScalarCache: true})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				buf := make([]byte, size)
				run := func(f vnfs.FS) {
					for i := 0; i < repeat; i++ {
						ios := []vnfs.IO{{File: vnfs.P(name), Data: buf}}
						if _, err := f.VRead(ctx, ios); err != nil {
							b.Fatal(err)
						}
						if ios[0].N != size {
							b.Fatalf("read %d bytes, want %d", ios[0].N, size)
						}
					}
				}
				cf, err := vnfs.Dial(ctx, vnfs.Config{Addr: l.Addr, Root: p.Root, Cache: int64(size) + 1<<20})
				if err != nil {
					b.Fatal(err)
				}
				defer cf.Close()
				r0 := rpcs(s)
				start := time.Now()
				run(s)
				scalar, scalarRPCs := time.Since(start), rpcs(s)-r0
				r0 = rpcs(cf)
				start = time.Now()
				run(cf)
				cached, cachedRPCs := time.Since(start), rpcs(cf)-r0
				b.SetBytes(int64(size * repeat))
				b.ResetTimer()
				r0 = rpcs(v)
				start = time.Now()
				for i := 0; i < b.N; i++ {
					run(v)
				}
				vec := time.Since(start) / time.Duration(b.N)
				report(b, vec, scalar, (rpcs(v)-r0)/uint64(b.N), scalarRPCs, int64(size*repeat), l.RTT)
				b.ReportMetric(float64(cached)/1e6, "cached-ms")
				b.ReportMetric(float64(cachedRPCs), "cached-rpcs")
				b.ReportMetric(float64(scalar)/float64(cached), "cached-speedup")
			})
			vnfs.Remove(ctx, direct, name)
		}
	})
}

// BenchmarkRepeatReadVector extends Figure 8 to many files: a tree of
// VNFS_BENCH_FILES (default 1000) files of VNFS_BENCH_SIZES (default
// 1KiB,64KiB) in 10 directories is read whole twice by each client; the
// second (warm) read is measured. Clients: the vectorized client without
// a cache (vec-*), with its data cache (cached-*: LOOKUP+VERIFY per file,
// many files per COMPOUND) and the kernel-like baseline with its cache
// (scalar-*: OPEN+GETATTR and CLOSE per file).
func BenchmarkRepeatReadVector(b *testing.B) {
	ctx := context.Background()
	nfiles, _ := strconv.Atoi(envList("VNFS_BENCH_FILES", "1000")[0])
	forEachLink(b, func(p *nfspeers.Peer, rtt time.Duration, l *nfspeers.Link, direct vnfs.FS) {
		for _, sz := range envList("VNFS_BENCH_SIZES", "1KiB,64KiB") {
			size := parseSize(sz)
			dir := fmt.Sprintf("/bench-rrv-%d", seq.Add(1))
			var dirs []vnfs.MkdirItem
			dirs = append(dirs, vnfs.MkdirItem{Path: dir})
			for d := 0; d < 10; d++ {
				dirs = append(dirs, vnfs.MkdirItem{Path: fmt.Sprintf("%s/d%d", dir, d)})
			}
			if _, err := direct.VMkdir(ctx, dirs); err != nil {
				b.Fatal(err)
			}
			mkIOs := func() []vnfs.IO {
				ios := make([]vnfs.IO, nfiles)
				for i := range ios {
					ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/d%d/f%04d", dir, i%10, i)), Data: make([]byte, size)}
				}
				return ios
			}
			ws := mkIOs()
			for i := range ws {
				ws[i].Flags = vnfs.Create | vnfs.Truncate
				ws[i].Data[0] = byte(i)
			}
			if _, err := vnfs.Unordered(direct).VWrite(ctx, ws); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("server=%s/rtt=%v/size=%s", p.Name, rtt, sz), func(b *testing.B) {
				cfgs := []vnfs.Config{
					{Addr: l.Addr, Root: p.Root},
					{Addr: l.Addr, Root: p.Root, Cache: int64(nfiles) * int64(size+512)},
					{Addr: l.Addr, Root: p.Root, Scalar: true, ScalarCache: true},
				}
				var times [3]time.Duration
				var calls [3]uint64
				for k, cfg := range cfgs {
					f, err := vnfs.Dial(ctx, cfg)
					if err != nil {
						b.Fatal(err)
					}
					for round := 0; round < 2; round++ {
						ios := mkIOs()
						r0, start := rpcs(f), time.Now()
						if _, err := f.VRead(ctx, ios); err != nil {
							b.Fatal(err)
						}
						times[k], calls[k] = time.Since(start), rpcs(f)-r0
						for i := range ios {
							if ios[i].N != size || ios[i].Data[0] != byte(i) {
								b.Fatalf("client %d: item %d read %d bytes", k, i, ios[i].N)
							}
						}
					}
					f.Close()
				}
				b.ReportMetric(float64(times[0])/1e6, "vec-ms")
				b.ReportMetric(float64(calls[0]), "vec-rpcs")
				b.ReportMetric(float64(times[1])/1e6, "cached-ms")
				b.ReportMetric(float64(calls[1]), "cached-rpcs")
				b.ReportMetric(float64(times[2])/1e6, "scalar-ms")
				b.ReportMetric(float64(calls[2]), "scalar-rpcs")
				b.ReportMetric(float64(times[2])/float64(times[1]), "cached-speedup")
				b.ReportMetric(float64(times[0])/float64(times[1]), "cached-vs-vec")
				b.ReportMetric(float64(l.RTT)/1e3, "rtt-us")
			})
			vnfs.RemoveRecursive(ctx, direct, dir)
		}
	})
}
