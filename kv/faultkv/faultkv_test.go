package faultkv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/faultkv"
	"github.com/txnfs/txnfs/kv/kvtest"
	"github.com/txnfs/txnfs/kv/memkv"
)

var bg = context.Background()

// With no faults configured the wrapper is transparent.
func TestConformanceNoFaults(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		s := faultkv.Wrap(memkv.New(), faultkv.Options{Seed: 1})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

var sentinels = []error{kv.ErrNotFound, kv.ErrConflict, kv.ErrTxnDone, kv.ErrReadOnly, kv.ErrClosed, kv.ErrInvalid}

func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func get(t *testing.T, s kv.Store, key string) (string, error) {
	t.Helper()
	txn, err := s.Begin(bg, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	v, err := txn.Get(bg, []byte(key))
	return string(v), err
}

func TestConflictInjection(t *testing.T) {
	inner := memkv.New()
	s := faultkv.Wrap(inner, faultkv.Options{Seed: 1, ConflictRate: 1})
	txn, _ := s.Begin(bg, kv.TxnOptions{})
	_ = txn.Set([]byte("k"), []byte("v"))
	if err := txn.Commit(bg); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("Commit = %v, want ErrConflict", err)
	}
	if err := txn.Commit(bg); !errors.Is(err, kv.ErrTxnDone) {
		t.Fatalf("second Commit = %v, want ErrTxnDone", err)
	}
	if _, err := get(t, inner, "k"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("injected conflict applied the write (%v)", err)
	}
	// Read-only transactions never conflict.
	ro, _ := s.Begin(bg, kv.TxnOptions{ReadOnly: true})
	if err := ro.Commit(bg); err != nil {
		t.Fatalf("read-only Commit = %v", err)
	}
}

func TestErrorInjection(t *testing.T) {
	inner := memkv.New()
	s := faultkv.Wrap(inner, faultkv.Options{Seed: 1, ErrorRate: 1})
	txn, _ := s.Begin(bg, kv.TxnOptions{})
	_, err := txn.Get(bg, []byte("k"))
	if !errors.Is(err, faultkv.ErrInjected) || isSentinel(err) {
		t.Fatalf("Get = %v, want an injected non-kv error", err)
	}
	_, err = txn.Scan(bg, nil, nil, 0)
	if !errors.Is(err, faultkv.ErrInjected) || isSentinel(err) {
		t.Fatalf("Scan = %v, want an injected non-kv error", err)
	}
	_ = txn.Set([]byte("k"), []byte("v"))
	err = txn.Commit(bg)
	if !errors.Is(err, faultkv.ErrInjected) || isSentinel(err) {
		t.Fatalf("Commit = %v, want an injected non-kv error", err)
	}
	if _, err := get(t, inner, "k"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("failed Commit applied the write (%v)", err)
	}
	if _, err := txn.Get(bg, []byte("k")); !errors.Is(err, kv.ErrTxnDone) {
		t.Fatalf("Get after failed Commit = %v, want ErrTxnDone", err)
	}
}

func TestLostAck(t *testing.T) {
	inner := memkv.New()
	s := faultkv.Wrap(inner, faultkv.Options{Seed: 1, ErrorRate: 1, LostAckRate: 1})
	txn, _ := s.Begin(bg, kv.TxnOptions{})
	_ = txn.Set([]byte("k"), []byte("v"))
	if err := txn.Commit(bg); !errors.Is(err, faultkv.ErrInjected) {
		t.Fatalf("Commit = %v, want injected error", err)
	}
	if v, err := get(t, inner, "k"); err != nil || v != "v" {
		t.Fatalf("lost-ack commit not applied: %q, %v", v, err)
	}
}

// outcomes runs a fixed sequence of transactions and returns what happened.
func outcomes(seed int64) string {
	s := faultkv.Wrap(memkv.New(), faultkv.Options{Seed: seed, ConflictRate: 0.3, ErrorRate: 0.2, LostAckRate: 0.5})
	var out []byte
	for i := range 200 {
		txn, _ := s.Begin(bg, kv.TxnOptions{})
		_, gerr := txn.Get(bg, []byte("k"))
		_ = txn.Set(fmt.Appendf(nil, "k%d", i), []byte("v"))
		cerr := txn.Commit(bg)
		out = fmt.Appendf(out, "%v/%v;", errors.Is(gerr, faultkv.ErrInjected), cerr)
	}
	return string(out)
}

func TestDeterministic(t *testing.T) {
	a, b, c := outcomes(42), outcomes(42), outcomes(43)
	if a != b {
		t.Fatal("same seed gave different faults")
	}
	if a == c {
		t.Fatal("different seeds gave identical faults")
	}
}

func TestRates(t *testing.T) {
	s := faultkv.Wrap(memkv.New(), faultkv.Options{Seed: 7, ConflictRate: 0.25})
	conflicts := 0
	const n = 2000
	for range n {
		txn, _ := s.Begin(bg, kv.TxnOptions{})
		_ = txn.Set([]byte("k"), []byte("v"))
		if err := txn.Commit(bg); errors.Is(err, kv.ErrConflict) {
			conflicts++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if conflicts < n/5 || conflicts > n*3/10 {
		t.Fatalf("%d conflicts in %d commits at rate 0.25", conflicts, n)
	}
}

func TestLatency(t *testing.T) {
	const lat = 5 * time.Millisecond
	s := faultkv.Wrap(memkv.New(), faultkv.Options{Seed: 1, Latency: lat})
	txn, _ := s.Begin(bg, kv.TxnOptions{})
	defer txn.Rollback()
	start := time.Now()
	_, _ = txn.Get(bg, []byte("k"))
	_, _ = txn.Scan(bg, nil, nil, 0)
	if d := time.Since(start); d < 2*lat {
		t.Fatalf("two calls took %v, want >= %v", d, 2*lat)
	}
	// A done context ends the wait at once.
	slow := faultkv.Wrap(memkv.New(), faultkv.Options{Seed: 1, Latency: time.Hour})
	ctx, cancel := context.WithCancel(bg)
	cancel()
	txn2, _ := slow.Begin(bg, kv.TxnOptions{})
	if _, err := txn2.Get(ctx, []byte("k")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with cancelled ctx = %v", err)
	}
	_ = txn2.Set([]byte("k"), []byte("v"))
	if err := txn2.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with cancelled ctx = %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []faultkv.Options{{ErrorRate: -0.1}, {ConflictRate: 1.5}, {Latency: -1}} {
		if err := o.Validate(); !errors.Is(err, kv.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v", o, err)
		}
	}
}
