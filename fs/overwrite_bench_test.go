package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

// BenchmarkOverwrite1MiB: one file overwritten 1 MiB at offset 0, each
// write its own durable transaction, with the collector running as in
// `txnfs serve` (fs.RunCollector, paced by garbage) — the op=WRITE/1MiB
// NFS row without the server. reuse=true is the default store; reuse=false
// never takes space from the reuse pool (every put appends and allocates).
// Reports the p50/p90 latency, the share of puts that reused space and the
// disk space the slice files occupy at the end. Run the two variants
// several times (they alternate within one run):
//
//	go test ./fs -run XXX -bench Overwrite1MiB -benchtime 2000x -count 3
func BenchmarkOverwrite1MiB(b *testing.B) {
	ctx := context.Background()
	buf := bytes.Repeat([]byte{'o'}, 1<<20)
	for _, reuse := range []bool{true, false} {
		b.Run(fmt.Sprintf("reuse=%v", reuse), func(b *testing.B) {
			o := datadir.Options{Dir: b.TempDir()}
			if !reuse {
				o.SliceReuseMin = -1
			}
			e, err := datadir.Open(ctx, o)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			f := e.FS
			gcCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); f.RunCollector(gcCtx, fs.GCSchedule{}) }()
			defer func() { stop(); <-done }()
			var ino fs.Ino
			mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "f"); ino = a.Ino; return err })
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				mustDo(b, f, func(tx *fs.Txn) error { return tx.Write(ctx, ino, 0, buf) })
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
			if l, ok := unwrapLocal(e.Slices); ok {
				st := l.Stats()
				b.ReportMetric(float64(st.ReusePuts)/float64(max(st.Puts, 1)), "reused/put")
			}
			bs, err := e.Slices.Backings(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var alloc uint64
			for _, x := range bs {
				alloc += x.Allocated
			}
			b.ReportMetric(float64(alloc)/(1<<20), "disk-MiB")
		})
	}
}

// unwrapLocal finds the *slice.Local under a datadir engine's store.
func unwrapLocal(s slice.Store) (*slice.Local, bool) {
	if l, ok := s.(*slice.Local); ok {
		return l, true
	}
	if c, ok := s.(interface{ Next() slice.Store }); ok {
		return unwrapLocal(c.Next())
	}
	return nil, false
}
