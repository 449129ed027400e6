package fs_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// spanStats counts a file's span records and their extents.
type spanStats struct {
	records, extents, maxExtents int
}

func spanStatsOf(t *testing.T, s kv.Store, ino fs.Ino) spanStats {
	t.Helper()
	ctx := context.Background()
	kt, err := s.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kt.Rollback()
	prefix := meta.SpanPrefix(uint64(ino))
	pairs, err := kt.Scan(ctx, prefix, kv.PrefixEnd(prefix), 0)
	if err != nil {
		t.Fatal(err)
	}
	var st spanStats
	for _, p := range pairs {
		_, _, _, rec, err := meta.UnmarshalSpan(p.Key, p.Value)
		if err != nil {
			t.Fatal(err)
		}
		st.records++
		st.extents += len(rec.Extents)
		st.maxExtents = max(st.maxExtents, len(rec.Extents))
	}
	return st
}

// TestSpanRecordCounts is a performance sanity check of data layout 3 with
// the default thresholds: a file written sequentially (1 MiB and 128 KiB
// writes, as NFS and FUSE send them) has few span records, and random
// 4 KiB overwrites keep every record within its extent limit and the
// record count bounded by the number of writes. The default run writes
// 256 MiB; TXNFS_LONG=1 writes 1 GiB.
func TestSpanRecordCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("writes hundreds of MiB")
	}
	total := scale(256<<20, 1<<30)
	for _, wsize := range []int{1 << 20, 128 << 10} {
		tf := newTestFS(t, fsOpts{inlineMax: 64, slicesOrdered: true})
		f := tf.FS
		inos := createFiles(t, f, 1)
		ino := inos[0]
		data := pattern(7, wsize)
		start := time.Now()
		ctx := context.Background()
		for off := 0; off < total; off += wsize {
			if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
				return tx.Write(ctx, ino, uint64(off), data)
			}); err != nil {
				t.Fatal(err)
			}
		}
		st := spanStatsOf(t, tf.KV, ino)
		t.Logf("sequential %d MiB in %d KiB writes (%v): %d span records, %d extents, at most %d in a record",
			total>>20, wsize>>10, time.Since(start).Round(time.Millisecond), st.records, st.extents, st.maxExtents)
		// One record per 2*spanMax slices at worst (the open record is
		// split past 64 extents); joined pointers make it fewer.
		if limit := total/wsize/64 + 2; st.records > limit {
			t.Errorf("sequential write: %d span records, want at most %d", st.records, limit)
		}
		if wsize != 128<<10 {
			continue
		}
		// Random 4 KiB overwrites of the first 64 MiB.
		const region = 64 << 20
		const writes = 3000
		rng := rand.New(rand.NewPCG(1, 2))
		small := pattern(9, 4096)
		start = time.Now()
		for i := 0; i < writes; i++ {
			off := uint64(rng.IntN(region/4096)) * 4096
			if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
				return tx.Write(ctx, ino, off, small)
			}); err != nil {
				t.Fatal(err)
			}
		}
		after := spanStatsOf(t, tf.KV, ino)
		t.Logf("after %d random 4 KiB writes (%v): %d span records, %d extents, at most %d in a record",
			writes, time.Since(start).Round(time.Millisecond), after.records, after.extents, after.maxExtents)
		// A record holds at most 2*spanMax = 64 extents before it is
		// compacted (32 past its compacted length) and split; splits
		// make records of 16 extents, so records stay within ~2 per 16
		// extents written.
		if after.maxExtents > 96 {
			t.Errorf("a record holds %d extents", after.maxExtents)
		}
		if limit := st.records + 2*writes*2/16 + 2; after.records > limit {
			t.Errorf("random writes: %d span records, want at most %d", after.records, limit)
		}
		requireCheckClean(t, f)
	}
}
