package kvtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/txnfs/txnfs/kv"
)

// testHistory interleaves several open transactions, read-write and
// read-only, in one goroutine over a few keys, and checks every read
// against a model of the committed history: a transaction reads the state
// committed when it began plus its own writes, and a read-write commit
// fails with ErrConflict exactly when a key it read (found or not) was
// written by a commit after it began. Unlike testModel (one transaction
// at a time), it catches a store that serves a read from anything other
// than its snapshot (a stale or too-new cached value, a snapshot taken
// at the wrong point). Values are unique, so any stale one is told apart.
func testHistory(t *testing.T, s kv.Store) {
	History(t, s, 4000)
}

// History runs the interleaved-history check of Run's "History" subtest
// for steps random steps; stores with caches call it with small sizes.
func History(t *testing.T, s kv.Store, steps int) {
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	// Start from an empty store.
	wipe := begin(t, s, false)
	pairs, err := wipe.Scan(bg, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if err := wipe.Delete(p.Key); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, wipe)

	type open struct {
		id      int
		txn     kv.Txn
		ro      bool
		snap    map[string]string  // committed state at Begin
		pending map[string]*string // nil: deleted
		read    map[string]bool
		began   int // commits applied before Begin
	}
	committed := map[string]string{}
	var writers []map[string]bool // keys written by each commit, in order
	var txns []*open
	defer func() {
		for _, o := range txns {
			o.txn.Rollback()
		}
	}()
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		if len(log) > 40 {
			log = log[len(log)-40:]
		}
		t.Fatalf("%s\nlast steps:\n%s", fmt.Sprintf(format, args...), strings.Join(log, "\n"))
	}
	nextID, nextVal := 0, 0
	for step := 0; step < steps; step++ {
		if len(txns) == 0 || (len(txns) < 4 && rng.IntN(4) == 0) {
			ro := rng.IntN(3) == 0
			snap := make(map[string]string, len(committed))
			for k, v := range committed {
				snap[k] = v
			}
			o := &open{id: nextID, txn: begin(t, s, ro), ro: ro, snap: snap, pending: map[string]*string{},
				read: map[string]bool{}, began: len(writers)}
			nextID++
			txns = append(txns, o)
			log = append(log, fmt.Sprintf("%d: begin ro=%v", o.id, ro))
			continue
		}
		i := rng.IntN(len(txns))
		o := txns[i]
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(10); {
		case op < 5: // get
			want, wantOK := o.snap[k]
			if p, ok := o.pending[k]; ok {
				want, wantOK = "", p != nil
				if p != nil {
					want = *p
				}
			} else {
				o.read[k] = true
			}
			got, err := o.txn.Get(bg, []byte(k))
			log = append(log, fmt.Sprintf("%d: get %s = %q, %v", o.id, k, got, err))
			switch {
			case errors.Is(err, kv.ErrNotFound):
				if wantOK {
					fail("txn %d: Get(%q) = not found, want %q (seed %d)", o.id, k, want, seed)
				}
			case err != nil:
				fail("txn %d: Get(%q): %v", o.id, k, err)
			case !wantOK || string(got) != want:
				fail("txn %d: Get(%q) = %q, want %q (found %v) (seed %d)", o.id, k, got, want, wantOK, seed)
			}
		case op < 7 && !o.ro: // set
			v := fmt.Sprintf("v%d", nextVal)
			nextVal++
			if err := o.txn.Set([]byte(k), []byte(v)); err != nil {
				fail("txn %d: Set: %v", o.id, err)
			}
			o.pending[k] = &v
			log = append(log, fmt.Sprintf("%d: set %s %s", o.id, k, v))
		case op < 8 && !o.ro: // delete
			if err := o.txn.Delete([]byte(k)); err != nil {
				fail("txn %d: Delete: %v", o.id, err)
			}
			o.pending[k] = nil
			log = append(log, fmt.Sprintf("%d: delete %s", o.id, k))
		case op < 9: // commit
			wantConflict := false
			if !o.ro && len(o.pending) > 0 {
				for _, w := range writers[o.began:] {
					for k := range o.read {
						wantConflict = wantConflict || w[k]
					}
				}
			}
			err := o.txn.Commit(bg)
			log = append(log, fmt.Sprintf("%d: commit = %v", o.id, err))
			switch {
			case wantConflict && !errors.Is(err, kv.ErrConflict):
				fail("txn %d: Commit = %v, want a conflict (it read a key written since it began)", o.id, err)
			case !wantConflict && err != nil:
				fail("txn %d: Commit = %v, want success", o.id, err)
			}
			if err == nil && len(o.pending) > 0 {
				w := map[string]bool{}
				for k, p := range o.pending {
					w[k] = true
					if p == nil {
						delete(committed, k)
					} else {
						committed[k] = *p
					}
				}
				writers = append(writers, w)
			}
			txns = append(txns[:i], txns[i+1:]...)
		default: // rollback
			o.txn.Rollback()
			log = append(log, fmt.Sprintf("%d: rollback", o.id))
			txns = append(txns[:i], txns[i+1:]...)
		}
	}
}
