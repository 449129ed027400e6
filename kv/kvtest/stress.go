package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/txnfs/txnfs/kv"
)

// Retry runs fn in a fresh read-write transaction and commits it, retrying
// on ErrConflict. It returns the number of conflicts seen.
func Retry(s kv.Store, fn func(kv.Txn) error) (conflicts int, err error) {
	for {
		txn, err := s.Begin(bg, kv.TxnOptions{})
		if err != nil {
			return conflicts, err
		}
		if err := fn(txn); err != nil {
			txn.Rollback()
			return conflicts, err
		}
		err = txn.Commit(bg)
		if err == nil {
			return conflicts, nil
		}
		if !errors.Is(err, kv.ErrConflict) {
			return conflicts, err
		}
		conflicts++
	}
}

func getInt(txn kv.Txn, key []byte) (int, error) {
	v, err := txn.Get(bg, key)
	if errors.Is(err, kv.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

// testCounterStress: N goroutines each add 1 to one counter M times with
// retry on conflict; no increment may be lost or applied twice.
func testCounterStress(t *testing.T, s kv.Store) {
	n, m := 8, 40
	if Long() {
		n, m = 16, 1000
	}
	key := []byte("counter")
	var wg sync.WaitGroup
	var conflicts atomic.Int64
	errc := make(chan error, n)
	for range n {
		wg.Go(func() {
			for range m {
				c, err := Retry(s, func(txn kv.Txn) error {
					v, err := getInt(txn, key)
					if err != nil {
						return err
					}
					runtime.Gosched() // widen the read-to-commit window
					return txn.Set(key, strconv.AppendInt(nil, int64(v+1), 10))
				})
				conflicts.Add(int64(c))
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	txn := begin(t, s, true)
	defer txn.Rollback()
	got, err := getInt(txn, key)
	if err != nil {
		t.Fatal(err)
	}
	if got != n*m {
		t.Fatalf("counter = %d, want %d (lost or duplicated increments)", got, n*m)
	}
	t.Logf("%d increments, %d conflicts retried", n*m, conflicts.Load())
}

// testBankStress moves money between accounts concurrently while readers
// check that the total never changes, through read-only snapshots and
// through read-write transactions that must validate.
func testBankStress(t *testing.T, s kv.Store) {
	seed := Seed(t)
	const accounts, initial = 8, 100
	writers, transfers, readers := 4, 60, 2
	if Long() {
		writers, transfers, readers = 8, 2000, 4
	}
	acct := func(i int) []byte { return fmt.Appendf(nil, "bank/%02d", i) }
	txn := begin(t, s, false)
	for i := range accounts {
		if err := txn.Set(acct(i), []byte(strconv.Itoa(initial))); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, txn)

	var done atomic.Bool
	var wg, rwg sync.WaitGroup
	errc := make(chan error, writers+readers)
	for w := range writers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			for range transfers {
				from, to := rng.IntN(accounts), rng.IntN(accounts-1)
				if to >= from {
					to++
				}
				amount := rng.IntN(30)
				_, err := Retry(s, func(txn kv.Txn) error {
					a, err := getInt(txn, acct(from))
					if err != nil {
						return err
					}
					b, err := getInt(txn, acct(to))
					if err != nil {
						return err
					}
					if a < amount {
						return nil // insufficient funds: commit nothing
					}
					if err := txn.Set(acct(from), strconv.AppendInt(nil, int64(a-amount), 10)); err != nil {
						return err
					}
					return txn.Set(acct(to), strconv.AppendInt(nil, int64(b+amount), 10))
				})
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	sum := func(txn kv.Txn) (int, error) {
		pairs, err := txn.Scan(bg, []byte("bank/"), kv.PrefixEnd([]byte("bank/")), 0)
		if err != nil {
			return 0, err
		}
		if len(pairs) != accounts {
			return 0, fmt.Errorf("scan saw %d accounts, want %d", len(pairs), accounts)
		}
		total := 0
		for _, p := range pairs {
			v, err := strconv.Atoi(string(p.Value))
			if err != nil {
				return 0, err
			}
			if v < 0 {
				return 0, fmt.Errorf("account %s is negative: %d", p.Key, v)
			}
			total += v
		}
		return total, nil
	}
	var checks atomic.Int64
	for r := range readers {
		rwg.Go(func() {
			for i := 0; !done.Load() || i < 3; i++ {
				ro := r%2 == 0
				var total int
				_, err := Retry(s, func(txn kv.Txn) error {
					var err error
					total, err = sum(txn)
					if err == nil && !ro {
						// A read-write audit: its reads must validate.
						err = txn.Set(fmt.Appendf(nil, "audit/%d", r), strconv.AppendInt(nil, int64(total), 10))
					}
					return err
				})
				if err == nil && total != accounts*initial {
					err = fmt.Errorf("reader %d saw total %d, want %d", r, total, accounts*initial)
				}
				if err != nil {
					errc <- err
					return
				}
				checks.Add(1)
			}
		})
	}
	wg.Wait()
	done.Store(true)
	rwg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	txn = begin(t, s, true)
	defer txn.Rollback()
	if total, err := sum(txn); err != nil || total != accounts*initial {
		t.Fatalf("final total = %d, %v; want %d", total, err, accounts*initial)
	}
	t.Logf("%d transfers, %d audits", writers*transfers, checks.Load())
}

var modelKeys = []string{"\x00", "\x00\x00", "\x00\xff", "a", "ab", "b", "m", "\xfe", "\xff", "\xff\x00", "\xff\xff"}

// testModel runs random single-threaded operation sequences against the
// store and against a plain map, and checks that they agree.
func testModel(t *testing.T, s kv.Store) {
	rapid.Check(t, func(rt *rapid.T) {
		// Start every run from an empty store.
		clearTxn := begin(rt, s, false)
		pairs, err := clearTxn.Scan(bg, nil, nil, 0)
		if err != nil {
			rt.Fatal(err)
		}
		for _, p := range pairs {
			if err := clearTxn.Delete(p.Key); err != nil {
				rt.Fatal(err)
			}
		}
		commit(rt, clearTxn)

		committed := map[string]string{}
		var txn kv.Txn
		var readOnly bool
		var pending map[string]*string // nil value: deleted
		defer func() {
			if txn != nil {
				txn.Rollback()
			}
		}()
		view := func() map[string]string {
			v := map[string]string{}
			for k, val := range committed {
				v[k] = val
			}
			for k, val := range pending {
				if val == nil {
					delete(v, k)
				} else {
					v[k] = *val
				}
			}
			return v
		}
		key := rapid.SampledFrom(modelKeys)
		actions := map[string]func(){
			"get": func() {
				k := key.Draw(rt, "key")
				want, wantOK := view()[k]
				got, err := txn.Get(bg, []byte(k))
				if errors.Is(err, kv.ErrNotFound) {
					if wantOK {
						rt.Fatalf("Get(%q) = not found, want %q", k, want)
					}
					return
				}
				if err != nil || !wantOK || string(got) != want {
					rt.Fatalf("Get(%q) = %q, %v; want %q, %v", k, got, err, want, wantOK)
				}
			},
			"set": func() {
				k := key.Draw(rt, "key")
				v := string(rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(rt, "value"))
				err := txn.Set([]byte(k), []byte(v))
				if readOnly {
					if !errors.Is(err, kv.ErrReadOnly) {
						rt.Fatalf("Set in read-only txn = %v", err)
					}
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				pending[k] = &v
			},
			"delete": func() {
				k := key.Draw(rt, "key")
				err := txn.Delete([]byte(k))
				if readOnly {
					if !errors.Is(err, kv.ErrReadOnly) {
						rt.Fatalf("Delete in read-only txn = %v", err)
					}
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				pending[k] = nil
			},
			"scan": func() {
				var start, end []byte
				if rapid.Bool().Draw(rt, "hasStart") {
					start = []byte(key.Draw(rt, "start"))
				}
				if rapid.Bool().Draw(rt, "hasEnd") {
					end = []byte(key.Draw(rt, "end"))
				}
				limit := rapid.IntRange(-1, 4).Draw(rt, "limit")
				var want []kv.Pair
				for k, v := range view() {
					if bytes.Compare([]byte(k), start) >= 0 && (end == nil || bytes.Compare([]byte(k), end) < 0) {
						want = append(want, kv.Pair{Key: []byte(k), Value: []byte(v)})
					}
				}
				slices.SortFunc(want, func(a, b kv.Pair) int { return bytes.Compare(a.Key, b.Key) })
				if limit > 0 && len(want) > limit {
					want = want[:limit]
				}
				got, err := txn.Scan(bg, start, end, limit)
				if err != nil {
					rt.Fatal(err)
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
					rt.Fatalf("Scan(%q, %q, %d) = %q, want %q", start, end, limit, got, want)
				}
			},
			"commit": func() {
				if err := txn.Commit(bg); err != nil {
					rt.Fatalf("Commit: %v", err)
				}
				committed = view()
				txn, pending = nil, nil
			},
			"rollback": func() {
				txn.Rollback()
				txn, pending = nil, nil
			},
			"snapshot": func() {
				// A separate read-only transaction sees exactly the
				// committed state, whatever the open one has pending.
				ro := begin(rt, s, true)
				defer ro.Rollback()
				got, err := ro.Scan(bg, nil, nil, 0)
				if err != nil {
					rt.Fatal(err)
				}
				if len(got) != len(committed) {
					rt.Fatalf("snapshot has %d keys, want %d", len(got), len(committed))
				}
				for _, p := range got {
					if v, ok := committed[string(p.Key)]; !ok || v != string(p.Value) {
						rt.Fatalf("snapshot has %q=%q, want %q (present %v)", p.Key, p.Value, v, ok)
					}
				}
			},
		}
		ops := rapid.SampledFrom([]string{"get", "get", "set", "set", "set", "delete", "scan", "scan", "commit", "rollback", "snapshot"})
		for range rapid.IntRange(10, 200).Draw(rt, "steps") {
			if txn == nil {
				readOnly = rapid.Float64().Draw(rt, "p") < 0.25
				txn = begin(rt, s, readOnly)
				pending = map[string]*string{}
				continue
			}
			actions[ops.Draw(rt, "op")]()
		}
	})
}
