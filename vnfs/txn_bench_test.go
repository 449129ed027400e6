package vnfs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txnfs/txnfs/vnfs"
)

// BenchmarkTxnVector measures the cost of multi-compound transactions on
// the txnfs server: one iteration writes TXN_BENCH_FILES (500) new 4 KiB
// files three ways, in rotating order so that the machine's noise spreads
// over all of them:
//
//	plain   an ordered vector (several COMPOUNDs, each committed)
//	txn     the same vector through Txn(): one multi-compound transaction
//	tx4     an explicit Tx: the vector in 4 calls, then Commit
//
// It reports the mean wall time of each (plain-ms, txn-ms, tx4-ms) and
// the ratios txn/plain and tx4/plain.
func BenchmarkTxnVector(b *testing.B) {
	var addr, root string
	for _, p := range peers {
		if p.Txn {
			addr, root = p.Addr, p.Root
		}
	}
	if addr == "" {
		b.Skip("no txnfs peer")
	}
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: addr, Root: root})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	files := 500
	data := make([]byte, 4<<10)
	vector := func(dir string) []vnfs.IO {
		ios := make([]vnfs.IO, files)
		for i := range ios {
			ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%d", dir, i)), Data: data, Flags: vnfs.Create}
		}
		return ios
	}
	modes := []struct {
		name string
		run  func(dir string) error
	}{
		{"plain", func(dir string) error { _, err := f.VWrite(ctx, vector(dir)); return err }},
		{"txn", func(dir string) error { _, err := f.Txn().VWrite(ctx, vector(dir)); return err }},
		{"tx4", func(dir string) error {
			tx, err := vnfs.Begin(ctx, f)
			if err != nil {
				return err
			}
			defer tx.Close()
			ios := vector(dir)
			for k := 0; k < 4; k++ {
				if _, err := tx.VWrite(ctx, ios[k*files/4:(k+1)*files/4]); err != nil {
					return err
				}
			}
			return tx.Commit(ctx)
		}},
	}
	total := make([]time.Duration, len(modes))
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for k := range modes {
			m := (it + k) % len(modes)
			dir := fmt.Sprintf("/bench-txn-%d-%d-%s", time.Now().UnixNano(), it, modes[m].name)
			if err := vnfs.Mkdir(ctx, f, dir, 0o755); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := modes[m].run(dir); err != nil {
				b.Fatalf("%s: %v", modes[m].name, err)
			}
			total[m] += time.Since(start)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	for m := range modes {
		b.ReportMetric(ms(total[m]), modes[m].name+"-ms")
	}
	b.ReportMetric(float64(total[1])/float64(total[0]), "txn/plain")
	b.ReportMetric(float64(total[2])/float64(total[0]), "tx4/plain")
}
