package datadir

import (
	"bytes"
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txnfs/txnfs/fs"
)

// TestMetrics: the storage collector reports the slice store's and the
// memory tier's counters as they move.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.Metrics())
	if n, err := testutil.GatherAndCount(reg); err != nil || n != len(localStats)+len(cacheStats) {
		t.Fatalf("gathered %d metrics (%v), want %d", n, err, len(localStats)+len(cacheStats))
	}
	data := bytes.Repeat([]byte("x"), 256<<10) // above InlineMax: a slice
	var ino fs.Ino
	if err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		if err != nil {
			return err
		}
		ino = a.Ino
		return tx.Write(ctx, ino, 0, data)
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second read at least is served from memory
		if err := e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			_, _, err := tx.Read(ctx, ino, 0, make([]byte, len(data)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for name, min := range map[string]float64{
		"txnfs_slice_puts_total": 1, "txnfs_slice_put_bytes_total": float64(len(data)),
		"txnfs_slice_fsyncs_total": 1, "txnfs_cache_hits_total": 1,
	} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			found = true
			m := mf.GetMetric()[0]
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if v < min {
				t.Errorf("%s = %v, want at least %v", name, v, min)
			}
		}
		if !found {
			t.Errorf("%s not gathered", name)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
