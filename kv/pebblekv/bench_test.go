package pebblekv_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/pebblekv"
)

// BenchmarkFsync is the baseline for group commit: how many 100-byte
// append+fdatasync rounds per second the disk under b.TempDir() does. A
// committer that fsyncs alone cannot beat it.
func BenchmarkFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "f"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 100)
	start := time.Now()
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "fsyncs/s")
}

// BenchmarkCommit measures durable single-key commits with 1 and 16
// concurrent committers on the real disk. commits/fsync > 1 shows that
// concurrent commits share WAL syncs.
func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("committers=%d", n), func(b *testing.B) {
			var syncs atomic.Int64
			counter := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if strings.HasSuffix(op.Path, ".log") &&
					(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
					syncs.Add(1)
				}
				return nil
			})
			s, err := pebblekv.Open(pebblekv.Options{Dir: b.TempDir(), FS: errorfs.Wrap(vfs.Default, counter)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			syncs.Store(0)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					val := make([]byte, 100)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						txn, err := s.Begin(bg, kv.TxnOptions{})
						if err != nil {
							b.Error(err)
							return
						}
						_ = txn.Set(fmt.Appendf(nil, "key/%010d", i), val)
						if err := txn.Commit(bg); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
			if s := syncs.Load(); s > 0 {
				b.ReportMetric(float64(b.N)/float64(s), "commits/fsync")
			}
		})
	}
}
