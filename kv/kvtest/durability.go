package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/txnfs/txnfs/kv"
)

// ReopenOpener returns a fresh, empty store and a function that simulates a
// restart of it: reopen abandons the previous store (closing it cleanly, or
// simulating a crash first, as the backend's test chooses) and returns a
// store over the same durable state. reopen may be called several times;
// each call restarts the store returned last. The opener owns closing the
// last store.
type ReopenOpener func(t *testing.T) (s kv.Store, reopen func() kv.Store)

// RunDurability checks that every transaction whose Commit returned nil
// survives a restart, and that nothing of a rolled-back, conflicting or
// cancelled transaction does.
func RunDurability(t *testing.T, open ReopenOpener) {
	t.Helper()
	t.Run("CommittedSurvives", func(t *testing.T) { testCommittedSurvives(t, open) })
	t.Run("LargeValueSurvives", func(t *testing.T) { testLargeValueSurvives(t, open) })
}

func testCommittedSurvives(t *testing.T, open ReopenOpener) {
	s, reopen := open(t)
	model := map[string]string{}
	apply := func(s kv.Store, kvs ...string) {
		t.Helper()
		put(t, s, kvs...)
		for i := 0; i+1 < len(kvs); i += 2 {
			if kvs[i+1] == del {
				delete(model, kvs[i])
			} else {
				model[kvs[i]] = kvs[i+1]
			}
		}
	}
	for round := range 3 {
		for i := range 20 {
			apply(s, fmt.Sprintf("k%03d", i), fmt.Sprintf("r%d-v%d", round, i), fmt.Sprintf("d%d", round), "x")
		}
		apply(s, fmt.Sprintf("d%d", round-1), del, "k005", del)

		// Not committed: rolled back, conflicting, cancelled.
		rb := begin(t, s, false)
		if err := rb.Set([]byte("rolledback"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		rb.Rollback()
		c := begin(t, s, false)
		txnGet(t, c, "k001")
		if err := c.Set([]byte("conflicted"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		apply(s, "k001", fmt.Sprintf("r%d-other", round))
		wantConflict(t, c)
		// An open transaction at the time of the restart.
		open := begin(t, s, false)
		if err := open.Set([]byte("open"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		s = reopen()
		open.Rollback() // must be harmless on an abandoned store
		checkState(t, s, model, round)
	}
}

func checkState(t *testing.T, s kv.Store, model map[string]string, round int) {
	t.Helper()
	txn := begin(t, s, true)
	defer txn.Rollback()
	pairs, err := txn.Scan(bg, nil, nil, 0)
	if err != nil {
		t.Fatalf("round %d: scan after reopen: %v", round, err)
	}
	if len(pairs) != len(model) {
		t.Errorf("round %d: %d keys after reopen, want %d", round, len(pairs), len(model))
	}
	for _, p := range pairs {
		if want, ok := model[string(p.Key)]; !ok || want != string(p.Value) {
			t.Errorf("round %d: after reopen %q=%q, want %q (present %v)", round, p.Key, p.Value, want, ok)
		}
	}
	for k, want := range model {
		if v, err := txn.Get(bg, []byte(k)); err != nil || string(v) != want {
			t.Errorf("round %d: Get(%q) = %q, %v; want %q", round, k, v, err, want)
		}
	}
	if _, err := txn.Get(bg, []byte("rolledback")); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("round %d: rolled-back write visible after reopen (%v)", round, err)
	}
}

func testLargeValueSurvives(t *testing.T, open ReopenOpener) {
	s, reopen := open(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), kv.MaxValueSize/16)
	put(t, s, "big", string(big), "small", "s")
	s = reopen()
	txn := begin(t, s, true)
	defer txn.Rollback()
	v, err := txn.Get(bg, []byte("big"))
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("big value after reopen: %d bytes, %v", len(v), err)
	}
	wantGet(t, txn, "small", "s")
}
