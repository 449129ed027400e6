package faultkv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/txnfs/txnfs/kv"
)

// ErrInjected is the cause of every injected I/O error.
var ErrInjected = errors.New("faultkv: injected I/O error")

// Options says which faults to inject and how often.
type Options struct {
	// Seed makes injection reproducible.
	Seed int64
	// ConflictRate is the probability that Commit of a read-write
	// transaction returns kv.ErrConflict having applied nothing.
	ConflictRate float64
	// ErrorRate is the probability that a Get, Scan or Commit fails with an
	// error wrapping ErrInjected. An injected Commit error applies nothing,
	// unless it is a lost acknowledgement (LostAckRate).
	ErrorRate float64
	// LostAckRate is the probability that an injected Commit error comes
	// after the wrapped transaction committed: the caller sees an I/O error
	// although the writes are durable, as when a reply is lost.
	LostAckRate float64
	// Latency is added before every Get, Scan and Commit; the wait ends
	// early with the context's error if the context is done.
	Latency time.Duration
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	for _, r := range []float64{o.ConflictRate, o.ErrorRate, o.LostAckRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("faultkv: rate %v outside [0, 1]: %w", r, kv.ErrInvalid)
		}
	}
	if o.Latency < 0 {
		return fmt.Errorf("faultkv: negative latency: %w", kv.ErrInvalid)
	}
	return nil
}

type store struct {
	inner kv.Store
	opts  Options
	mu    struct {
		sync.Mutex
		rng *rand.Rand
	}
}

// Wrap returns s with faults injected as opts says. It panics if opts is
// invalid (a programming error in a test); call opts.Validate first to
// check options that come from elsewhere.
func Wrap(s kv.Store, opts Options) kv.Store {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	w := &store{inner: s, opts: opts}
	w.mu.rng = rand.New(rand.NewPCG(uint64(opts.Seed), 0x6661756c746b76))
	return w
}

// roll reports whether an event of probability p happens.
func (s *store) roll(p float64) bool {
	if p <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.rng.Float64() < p
}

func (s *store) wait(ctx context.Context) error {
	if s.opts.Latency <= 0 {
		return nil
	}
	t := time.NewTimer(s.opts.Latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *store) Begin(ctx context.Context, opts kv.TxnOptions) (kv.Txn, error) {
	inner, err := s.inner.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &txn{s: s, inner: inner, readOnly: opts.ReadOnly}, nil
}

// Sync delegates to the wrapped store; with ErrorRate it may instead fail
// with ErrInjected (nothing is then known about durability).
func (s *store) Sync(ctx context.Context) error {
	if err := s.wait(ctx); err != nil {
		return fmt.Errorf("faultkv: sync: %w", err)
	}
	if s.roll(s.opts.ErrorRate) {
		return fmt.Errorf("faultkv: sync: %w", ErrInjected)
	}
	return s.inner.Sync(ctx)
}

func (s *store) Close() error { return s.inner.Close() }

type txn struct {
	s        *store
	inner    kv.Txn
	readOnly bool
	done     bool
}

func (t *txn) Get(ctx context.Context, key []byte) ([]byte, error) {
	if !t.done {
		if err := t.s.wait(ctx); err != nil {
			return nil, fmt.Errorf("faultkv: get: %w", err)
		}
		if t.s.roll(t.s.opts.ErrorRate) {
			return nil, fmt.Errorf("faultkv: get %q: %w", key, ErrInjected)
		}
	}
	return t.inner.Get(ctx, key)
}

func (t *txn) Scan(ctx context.Context, start, end []byte, limit int) ([]kv.Pair, error) {
	if !t.done {
		if err := t.s.wait(ctx); err != nil {
			return nil, fmt.Errorf("faultkv: scan: %w", err)
		}
		if t.s.roll(t.s.opts.ErrorRate) {
			return nil, fmt.Errorf("faultkv: scan [%q, %q): %w", start, end, ErrInjected)
		}
	}
	return t.inner.Scan(ctx, start, end, limit)
}

func (t *txn) Set(key, value []byte) error { return t.inner.Set(key, value) }

func (t *txn) Delete(key []byte) error { return t.inner.Delete(key) }

func (t *txn) Commit(ctx context.Context) error {
	if t.done {
		return t.inner.Commit(ctx)
	}
	t.done = true
	if err := t.s.wait(ctx); err != nil {
		t.inner.Rollback()
		return fmt.Errorf("faultkv: commit: %w", err)
	}
	if t.s.roll(t.s.opts.ErrorRate) {
		if t.s.roll(t.s.opts.LostAckRate) {
			if err := t.inner.Commit(ctx); err != nil {
				return err
			}
			return fmt.Errorf("faultkv: commit acknowledgement lost: %w", ErrInjected)
		}
		t.inner.Rollback()
		return fmt.Errorf("faultkv: commit: %w", ErrInjected)
	}
	if !t.readOnly && t.s.roll(t.s.opts.ConflictRate) {
		t.inner.Rollback()
		return fmt.Errorf("faultkv: injected: %w", kv.ErrConflict)
	}
	return t.inner.Commit(ctx)
}

func (t *txn) Rollback() {
	t.done = true
	t.inner.Rollback()
}
