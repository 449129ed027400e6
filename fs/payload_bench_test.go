package fs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/internal/hugepage"
	"github.com/txnfs/txnfs/slice"
)

// BenchmarkOverwritePayload: the durable 1 MiB overwrite of
// BenchmarkOverwrite1MiB on a store as `txnfs serve` opens it (unstaged
// puts), from a 4 KiB-aligned buffer on a huge page as the NFS server's
// WRITE payloads are, in three ways that take turns write by write (the
// host is shared: load drifts): "write" is Txn.Write (the store hashes the
// data, then writes it before Put returns), "payload" is Txn.WritePayload
// with the CRC known and the write still synchronous, "retained" is
// WritePayload as the server uses it (the write runs while the
// transaction goes on). Reports each way's p50 and mean latency.
//
//	go test ./fs -run XXX -bench OverwritePayload -benchtime 3000x -count 3
func BenchmarkOverwritePayload(b *testing.B) {
	ctx := context.Background()
	e, err := datadir.Open(ctx, datadir.Options{Dir: b.TempDir(), SliceUnstaged: true})
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
	buf := hugepage.Aligned(hugepage.Size)[:1<<20]
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	crc := slice.Checksum(buf)
	modes := []string{"write", "payload", "retained"}
	lat := make([][]time.Duration, len(modes))
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := i % len(modes)
		restore := fs.SetRetainPayloadsForTest(modes[m] == "retained")
		t0 := time.Now()
		mustDo(b, f, func(tx *fs.Txn) error {
			if modes[m] == "write" {
				return tx.Write(ctx, ino, 0, buf)
			}
			return tx.WritePayload(ctx, ino, 0, slice.NewPayload(buf, crc))
		})
		lat[m] = append(lat[m], time.Since(t0))
		restore()
	}
	b.StopTimer()
	for m, mode := range modes {
		l := lat[m]
		if len(l) == 0 {
			continue
		}
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, mode+"-p50-ms")
		b.ReportMetric(float64(sum.Microseconds())/1000/float64(len(l)), mode+"-mean-ms")
	}
}
