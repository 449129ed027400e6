package server_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// cpuTime returns the CPU time (user + system) used by the process so
// far. The server runs in the benchmark's process, so the CPU of a timed
// section is the server's plus the test client's (which encodes and
// decodes the compound: a small share, see docs/nfs-server.md).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMetaCompound measures the server CPU per operation of the
// vectorized compounds of vNFS tree workloads (brief P, session 3): one
// COMPOUND of SEQUENCE, PUTFH(dir) and
//
//   - REMOVE: 256 REMOVEs of 12 KiB files of the directory (rm -r);
//   - CREATE+WRITE: 64 × PUTFH(dir) + OPEN(create) + WRITE 1 KiB
//     (FILE_SYNC) + CLOSE (untar; the vNFS client goes back to the
//     directory with PUTFH after each file);
//   - LOOKUP+GETATTR: 128 × PUTFH(dir) + LOOKUP + GETATTR (type, size,
//     mode, change, times, fileid, numlinks): a stat of every file.
//
// The metrics are µs of wall time and of process CPU per listed object
// (per file: 1 REMOVE, 4 ops of CREATE+WRITE, 3 of LOOKUP+GETATTR), timed
// around the measured compound only (the setup of each iteration, e.g.
// creating the files to remove, is done for all iterations before the
// timed loop). One client, so one CPU at most does the server's work.
// TXNFS_META_PPROF=file writes a CPU profile of the timed loop only
// (-cpuprofile would be mostly setup). Run:
//
//	go test ./nfs4/server -run XXX -bench MetaCompound -benchtime 40x -count 3
func BenchmarkMetaCompound(b *testing.B) {
	data := bytes.Repeat([]byte("d"), 1024)
	// The files rm -r removes have data: 12 KiB, the mean size of
	// treegen.LinuxLike (a removed file's data is freed).
	rmData := bytes.Repeat([]byte("r"), 12<<10)
	type load struct {
		name  string
		files int
		setup func(b *testing.B, c *testclient.Client, dir []byte, names []string)
		ops   func(c *testclient.Client, dir []byte, names []string) []nfsv4.NfsArgop4
	}
	createOpsOf := func(data []byte) func(c *testclient.Client, dir []byte, names []string) []nfsv4.NfsArgop4 {
		return func(c *testclient.Client, dir []byte, names []string) []nfsv4.NfsArgop4 {
			var ops []nfsv4.NfsArgop4
			for _, n := range names {
				ops = append(ops, putfh(dir), openCreate(c, n), write(current, 0, data), closeOp(current))
			}
			return ops
		}
	}
	createOps := createOpsOf(data)
	mustDo := func(b *testing.B, c *testclient.Client, ops []nfsv4.NfsArgop4) {
		rep, err := c.Compound(ops...)
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			b.Fatalf("compound: %v %+v", err, rep)
		}
	}
	loads := []load{
		{name: "REMOVE", files: 256,
			setup: func(b *testing.B, c *testclient.Client, dir []byte, names []string) {
				for k := 0; k < len(names); k += 64 {
					mustDo(b, c, createOpsOf(rmData)(c, dir, names[k:k+64]))
				}
			},
			ops: func(c *testclient.Client, dir []byte, names []string) []nfsv4.NfsArgop4 {
				ops := []nfsv4.NfsArgop4{putfh(dir)}
				for _, n := range names {
					ops = append(ops, remove(n))
				}
				return ops
			}},
		{name: "CREATE+WRITE", files: 64, ops: createOps},
		{name: "LOOKUP+GETATTR", files: 128,
			setup: func(b *testing.B, c *testclient.Client, dir []byte, names []string) {
				for k := 0; k < len(names); k += 64 {
					mustDo(b, c, createOps(c, dir, names[k:k+64]))
				}
			},
			ops: func(c *testclient.Client, dir []byte, names []string) []nfsv4.NfsArgop4 {
				var ops []nfsv4.NfsArgop4
				for _, n := range names {
					ops = append(ops, putfh(dir), lookup(n), getattr(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE,
						nfsv4.FATTR4_MODE, nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_FILEID, nfsv4.FATTR4_NUMLINKS,
						nfsv4.FATTR4_TIME_MODIFY, nfsv4.FATTR4_TIME_METADATA))
				}
				return ops
			}},
	}
	for _, l := range loads {
		b.Run("op="+l.name, func(b *testing.B) {
			ts := startServer(b)
			c := ts.session(b, 1, "meta-bench")
			// Set up every iteration first, so that the timed loop
			// (and the profile) holds only the measured compounds.
			all := make([][]nfsv4.NfsArgop4, b.N)
			for i := range all {
				rep, err := c.Compound(putroot(), mkdir(fmt.Sprintf("d%d", i)), getfh())
				if err != nil || rep.Status != nfsv4.NFS4_OK {
					b.Fatalf("mkdir: %v %+v", err, rep)
				}
				dir := fhOf(b, rep.Last())
				names := make([]string, l.files)
				for j := range names {
					names[j] = fmt.Sprintf("file-%06d-%d", j, i)
				}
				if l.setup != nil {
					l.setup(b, c, dir, names)
				}
				all[i] = l.ops(c, dir, names)
			}
			if p := os.Getenv("TXNFS_META_PPROF"); p != "" {
				f, err := os.Create(p)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					b.Fatal(err)
				}
				defer pprof.StopCPUProfile()
			}
			b.ReportAllocs()
			c0 := cpuTime(b)
			b.ResetTimer()
			for i := range all {
				mustDo(b, c, all[i])
			}
			b.StopTimer()
			n := float64(b.N * l.files)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "wall-µs/file")
			b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/n, "cpu-µs/file")
		})
	}
}
