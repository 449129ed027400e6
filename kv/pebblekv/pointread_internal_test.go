package pebblekv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/kv"
)

// TestPointReadsAcrossLevels checks Get (txn.pointGet's kept iterators)
// and Scan (one iterator re-bounded per call)
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
			if rng.IntN(4) == 0 {
				checkScan(t, txn, model, key(rng.IntN(n)), key(rng.IntN(n)), rng.IntN(4))
				continue
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

// checkScan compares txn.Scan(start, end, limit) with the model.
func checkScan(t *testing.T, txn kv.Txn, model map[string]string, start, end []byte, limit int) {
	t.Helper()
	var want []string
	for k := range model {
		if k >= string(start) && k < string(end) {
			want = append(want, k)
		}
	}
	slices.Sort(want)
	if limit > 0 && len(want) > limit {
		want = want[:limit]
	}
	pairs, err := txn.Scan(context.Background(), start, end, limit)
	if err != nil {
		t.Fatalf("Scan(%q, %q, %d): %v", start, end, limit, err)
	}
	if len(pairs) != len(want) {
		t.Fatalf("Scan(%q, %q, %d): %d pairs, want %d", start, end, limit, len(pairs), len(want))
	}
	for i, p := range pairs {
		if string(p.Key) != want[i] || string(p.Value) != model[want[i]] {
			t.Fatalf("Scan(%q, %q, %d)[%d] = %q=%q, want %q=%q", start, end, limit, i, p.Key, p.Value, want[i], model[want[i]])
		}
	}
}

// TestOptionsValidate checks that out-of-range options are refused with
// kv.ErrInvalid before anything is opened.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{},
		{Dir: "db", MaxLogBytes: -1},
		{Dir: "db", CacheBytes: -1},
		{Dir: "db", MemTableBytes: -1},
		{Dir: "db", MemTableBytes: 1},
		{Dir: "db", MemTableBytes: 1<<20 - 1},
		{Dir: "db", MemTableBytes: 4 << 30},
	} {
		o.FS = vfs.NewMem()
		if _, err := Open(o); !errors.Is(err, kv.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want kv.ErrInvalid", o, err)
		}
	}
	// The smallest memtable allowed works (several flushes).
	s, err := Open(Options{Dir: "db", FS: vfs.NewMem(), NoSync: true, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 100 {
		txn, err := s.Begin(context.Background(), kv.TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = txn.Set(fmt.Appendf(nil, "k%d", i), make([]byte, 64<<10))
		if err := txn.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
