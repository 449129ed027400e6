package memkv

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/tidwall/btree"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/internal/occ"
)

// maxLogBytes bounds the commit log kept for long-running transactions.
const maxLogBytes = 64 << 20

type item struct {
	key, value []byte
}

func itemLess(a, b item) bool { return bytes.Compare(a.key, b.key) < 0 }

type store struct {
	mu struct {
		sync.Mutex
		tree   *btree.BTreeG[item] // committed state; items are immutable
		seq    uint64              // sequence of the last commit
		log    *occ.Log
		closed bool
	}
}

var (
	_ kv.Store           = (*store)(nil)
	_ kv.Versioned       = (*store)(nil)
	_ kv.VersionedTxn    = (*txn)(nil)
	_ kv.UntrackedGetter = (*txn)(nil)
)

// Version implements kv.Versioned: the sequence of the last commit.
func (s *store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.seq
}

// New returns an empty in-memory store.
func New() kv.Store {
	s := &store{}
	s.mu.tree = btree.NewBTreeGOptions(itemLess, btree.Options{NoLocks: true})
	s.mu.log = occ.NewLog(maxLogBytes)
	return s
}

func (s *store) Begin(ctx context.Context, opts kv.TxnOptions) (kv.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memkv: begin: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, kv.ErrClosed
	}
	t := &txn{
		s:        s,
		snap:     s.mu.tree.Copy(),
		start:    s.mu.seq,
		readOnly: opts.ReadOnly,
	}
	if !opts.ReadOnly {
		t.buf = occ.NewBuffer()
		s.mu.log.Register(t.start)
	}
	return t, nil
}

// Sync implements kv.Store: memory has nothing to flush. It fails only
// after Close or with a done ctx.
func (s *store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memkv: sync: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return kv.ErrClosed
	}
	return nil
}

// Close marks the store closed. Transactions already open keep reading
// their snapshots; their Commit fails with kv.ErrClosed. Close is
// idempotent.
func (s *store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.closed = true
	return nil
}

type txn struct {
	s        *store
	snap     *btree.BTreeG[item] // private copy; never written
	start    uint64
	readOnly bool
	done     bool
	buf      *occ.Buffer // nil when readOnly
	reads    occ.ReadSet
}

var _ kv.Txn = (*txn)(nil)

func (t *txn) check(ctx context.Context, op string) error {
	if t.done {
		return fmt.Errorf("memkv: %s: %w", op, kv.ErrTxnDone)
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("memkv: %s: %w", op, err)
		}
	}
	return nil
}

func (t *txn) Get(ctx context.Context, key []byte) ([]byte, error) {
	return t.get(ctx, key, true)
}

// GetUntracked implements kv.UntrackedGetter: Get without adding key to
// the transaction's read set.
func (t *txn) GetUntracked(ctx context.Context, key []byte) ([]byte, error) {
	return t.get(ctx, key, false)
}

// get reads key; track adds it to the read set (when the transaction
// keeps one).
func (t *txn) get(ctx context.Context, key []byte, track bool) ([]byte, error) {
	if err := t.check(ctx, "get"); err != nil {
		return nil, err
	}
	if err := occ.CheckKey("memkv: get", key); err != nil {
		return nil, err
	}
	if t.buf != nil {
		if e, ok := t.buf.Get(key); ok {
			if e.Deleted {
				return nil, kv.ErrNotFound
			}
			return append([]byte{}, e.Value...), nil
		}
		if track {
			t.reads.AddKey(key)
		}
	}
	it, ok := t.snap.Get(item{key: key})
	if !ok {
		return nil, kv.ErrNotFound
	}
	return append([]byte{}, it.value...), nil
}

func (t *txn) Scan(ctx context.Context, start, end []byte, limit int) ([]kv.Pair, error) {
	if err := t.check(ctx, "scan"); err != nil {
		return nil, err
	}
	if occ.EmptyRange(start, end) {
		return nil, nil
	}
	buf := t.buf
	if buf == nil {
		buf = occ.NewBuffer()
	}
	iter := t.snap.Iter()
	defer iter.Release()
	base := &treeIter{iter: &iter, start: start, end: end}
	pairs, span, err := occ.Scan(ctx, base, buf, start, end, limit)
	if err != nil {
		return nil, fmt.Errorf("memkv: scan: %w", err)
	}
	if !t.readOnly {
		t.reads.AddSpan(span.Start, span.End)
	}
	return pairs, nil
}

type treeIter struct {
	iter       *btree.IterG[item]
	start, end []byte
	started    bool
}

func (it *treeIter) Next() ([]byte, []byte, bool, error) {
	var ok bool
	if !it.started {
		it.started = true
		ok = it.iter.Seek(item{key: it.start})
	} else {
		ok = it.iter.Next()
	}
	if !ok {
		return nil, nil, false, nil
	}
	i := it.iter.Item()
	if it.end != nil && bytes.Compare(i.key, it.end) >= 0 {
		return nil, nil, false, nil
	}
	return i.key, i.value, true, nil
}

func (t *txn) Set(key, value []byte) error {
	if err := t.checkWrite("set", key); err != nil {
		return err
	}
	if err := occ.CheckValue("memkv: set", value); err != nil {
		return err
	}
	t.buf.Set(key, value)
	return nil
}

func (t *txn) Delete(key []byte) error {
	if err := t.checkWrite("delete", key); err != nil {
		return err
	}
	t.buf.Delete(key)
	return nil
}

func (t *txn) checkWrite(op string, key []byte) error {
	if err := t.check(nil, op); err != nil {
		return err
	}
	if t.readOnly {
		return fmt.Errorf("memkv: %s: %w", op, kv.ErrReadOnly)
	}
	return occ.CheckKey("memkv: "+op, key)
}

func (t *txn) Commit(ctx context.Context) error {
	if err := t.check(ctx, "commit"); err != nil {
		if !t.done {
			t.Rollback()
		}
		return err
	}
	if t.readOnly || t.buf.Len() == 0 {
		t.Rollback()
		return nil
	}
	t.done = true
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.mu.log.Unregister(t.start)
	if s.mu.closed {
		return fmt.Errorf("memkv: commit: %w", kv.ErrClosed)
	}
	if s.mu.log.Conflicts(t.start, &t.reads) {
		return fmt.Errorf("memkv: commit: %w", kv.ErrConflict)
	}
	for _, e := range t.buf.Entries() {
		if e.Deleted {
			s.mu.tree.Delete(item{key: e.Key})
		} else {
			s.mu.tree.Set(item{key: e.Key, value: e.Value})
		}
	}
	s.mu.seq++
	s.mu.log.Append(s.mu.seq, t.buf.Keys())
	return nil
}

// SnapshotVersion implements kv.VersionedTxn.
func (t *txn) SnapshotVersion() uint64 { return t.start }

func (t *txn) Rollback() {
	if t.done {
		return
	}
	t.done = true
	if !t.readOnly {
		t.s.mu.Lock()
		t.s.mu.log.Unregister(t.start)
		t.s.mu.Unlock()
	}
}
