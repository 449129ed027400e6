package pebblekv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/kv"
)

// TestPointReadsAcrossLevels checks Get (txn.pointGet's kept iterator)
// against a map model on data spread over several sstables and the
// memtable, with overwrites, deletes, keys that are prefixes of others,
// more leading key bytes than the transaction has point iterators,
// and reads in random order (seeks backwards and forwards, hits and
// misses) within one transaction.
func TestPointReadsAcrossLevels(t *testing.T) {
	ctx := context.Background()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ks, err := Open(Options{Dir: "db", FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	s := ks.(*store)
	const n = 600
	key := func(i int) []byte {
		lead := "abcdefg"[(i/3)%7] // more leading bytes than iterators
		if i%3 == 0 {
			return fmt.Appendf(nil, "%ck%d", lead, i/3) // prefix of the next two
		}
		return fmt.Appendf(nil, "%ck%d/%d", lead, i/3, i%3)
	}
	model := map[string]string{}
	for round := range 5 {
		txn, err := s.Begin(ctx, kv.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range n / 2 {
			k := key(rng.IntN(n))
			if rng.IntN(3) == 0 {
				_ = txn.Delete(k)
				delete(model, string(k))
			} else {
				v := fmt.Sprintf("v%d-%d", round, rng.IntN(1000))
				_ = txn.Set(k, []byte(v))
				model[string(k)] = v
			}
		}
		if err := txn.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if round < 4 {
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ro := range []bool{false, true} {
		txn, err := s.Begin(ctx, kv.TxnOptions{ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 * n {
			i := rng.IntN(n + 20)
			k := key(i)
			if i >= n {
				k = append(k, 'x') // never written
			}
			got, err := txn.Get(ctx, k)
			want, ok := model[string(k)]
			switch {
			case !ok && !errors.Is(err, kv.ErrNotFound):
				t.Fatalf("readOnly=%v Get(%q) = %q, %v; want not found", ro, k, got, err)
			case ok && (err != nil || string(got) != want):
				t.Fatalf("readOnly=%v Get(%q) = %q, %v; want %q", ro, k, got, err, want)
			}
		}
		txn.Rollback()
	}
}
