package fs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Txn is a file-system transaction. Its operations see a consistent
// snapshot of the file system plus the transaction's own changes; nothing
// is visible to others until Commit returns nil, and then all of it is.
//
// An operation that fails with a validation error (ErrNotExist, ErrExist,
// ...) has no effect and the transaction may continue. An operation that
// fails half-way with ErrIO or ErrCorrupt poisons the transaction: later
// operations and Commit return that error, and only Abort is left.
type Txn struct {
	fs     *FS
	cred   Cred
	opts   TxnOptions
	kvTxn  kv.Txn
	gcSeq  uint64 // GC epoch at Begin, see gc.go
	done   bool
	poison error

	replaying bool
	log       []opRecord
	written   []slice.Pointer // slices this transaction wrote; synced before commit
	garbage   uint64          // slice bytes this execution made unreachable (an estimate, gcpace.go)
	orphaned  []Ino           // inodes this execution made orphans (dropLink)
	dropped   []Ino           // inodes this execution deleted as unpinned (dropLink)
	tmpfiles  []Ino           // inodes this execution made with CreateOrphan

	mutations int // bumped by every change, to detect half-done operations
	inodes    map[Ino]*cachedInode
	// fresh holds the inodes that have no span record in this execution,
	// so spansIn need not read — until a span record of one is written
	// (it then leaves the set): those it created (their numbers were just
	// allocated: never reused, unknown to others until the commit) and
	// those whose records it deleted (deleteSpans: a concurrent change of
	// their records conflicts with the inode record or range it read).
	fresh map[Ino]struct{}

	// retained is set once a put may still read its caller's buffer
	// (WritePayload): the transaction's end waits for the writes
	// (waitRetained).
	retained bool
}

type cachedInode struct {
	rec   *meta.Inode // nil: does not exist
	dirty bool
}

// opRecord is one logged operation: how to run it again and what it
// returned the first time.
type opRecord struct {
	name   string
	run    func(ctx context.Context) (any, error)
	result any
	errOf  error // the sentinel the error wrapped, or nil
}

// Begin starts a transaction running as cred.
func (f *FS) Begin(ctx context.Context, cred Cred, opts TxnOptions) (*Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := &Txn{fs: f, cred: cred, opts: opts}
	t.reset()
	t.gcSeq = f.gcState.begin(t)
	return t, nil
}

// Do runs fn in a transaction and commits it. If the commit conflicts and
// the replayed log differs, fn is run again from scratch, so Do never fails
// with ErrConflict. An error returned by fn aborts the transaction and is
// returned unchanged.
func (f *FS) Do(ctx context.Context, cred Cred, fn func(*Txn) error) error {
	return f.DoOpts(ctx, cred, TxnOptions{}, fn)
}

// DoOpts is Do with transaction options (e.g. TxnOptions{NoSync: true}).
func (f *FS) DoOpts(ctx context.Context, cred Cred, opts TxnOptions, fn func(*Txn) error) error {
	for attempt := 0; ; attempt++ {
		t, err := f.Begin(ctx, cred, opts)
		if err != nil {
			return err
		}
		if err := fn(t); err != nil {
			t.Abort()
			return err
		}
		err = t.Commit(ctx)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

// View runs fn in a read-only transaction.
func (f *FS) View(ctx context.Context, cred Cred, fn func(*Txn) error) error {
	t, err := f.Begin(ctx, cred, TxnOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer t.Abort()
	return fn(t)
}

// SnapshotMark names the kv snapshot a transaction has read from (Mark);
// FS.UnchangedSince tells whether any commit was applied after it. The
// zero mark is never unchanged.
type SnapshotMark struct {
	v  uint64
	ok bool
}

// Mark returns the mark of the snapshot the transaction's reads so far
// came from: the zero mark before its first read, or when the kv store
// cannot tell (it does not implement kv.Versioned). A transaction whose
// commit conflicted and was replayed reads a later snapshot; its older
// mark is then stale, never unchanged.
func (t *Txn) Mark() SnapshotMark {
	if t.kvTxn == nil {
		return SnapshotMark{}
	}
	vt, ok := t.kvTxn.(kv.VersionedTxn)
	if !ok {
		return SnapshotMark{}
	}
	if _, ok := t.fs.kv.(kv.Versioned); !ok {
		return SnapshotMark{}
	}
	return SnapshotMark{v: vt.SnapshotVersion(), ok: true}
}

// UnchangedSince reports whether no commit was applied since the snapshot
// of m was taken: a transaction begun now would read what that snapshot
// reads (the marked transaction's own uncommitted writes aside). False
// when unknown. It replaces taking a fresh snapshot to check that
// something read in m's snapshot still holds (the NFS server's OPEN pin
// check, ENGINE-REQUESTS 16).
func (f *FS) UnchangedSince(m SnapshotMark) bool {
	if !m.ok {
		return false
	}
	vs, ok := f.kv.(kv.Versioned)
	return ok && vs.Version() == m.v
}

// Cred returns the credential the transaction runs as.
func (t *Txn) Cred() Cred { return t.cred }

// SetCred changes the credential for the following operations (for
// transactions spanning requests of different users).
func (t *Txn) SetCred(c Cred) { t.cred = c }

func (t *Txn) reset() {
	if t.kvTxn != nil {
		t.kvTxn.Rollback()
		t.kvTxn = nil
	}
	t.inodes = map[Ino]*cachedInode{}
	t.fresh = nil
	t.orphaned = nil
	t.dropped = nil
	t.tmpfiles = nil
	t.garbage = 0
}

// kvt returns the transaction's kv transaction, beginning it on first use.
func (t *Txn) kvt(ctx context.Context) (kv.Txn, error) {
	if t.kvTxn == nil {
		kt, err := t.fs.kv.Begin(ctx, kv.TxnOptions{ReadOnly: t.opts.ReadOnly, NoSync: t.opts.NoSync})
		if err != nil {
			return nil, kvErr(err)
		}
		t.kvTxn = kt
	}
	return t.kvTxn, nil
}

// do runs one operation and logs it for replay.
func (t *Txn) do(ctx context.Context, name string, run func(ctx context.Context) (any, error)) (any, error) {
	if t.done {
		return nil, ErrTxnDone
	}
	if t.poison != nil {
		return nil, t.poison
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	before := t.mutations
	res, err := run(ctx)
	if t.opts.ReadOnly && t.mutations != before {
		t.poison = fmt.Errorf("%w: %s in a read-only transaction", ErrReadOnly, name)
		return nil, t.poison
	}
	if err != nil && t.mutations != before {
		t.poison = fmt.Errorf("transaction poisoned by failed %s: %w", name, err)
	}
	if !t.opts.ReadOnly {
		t.log = append(t.log, opRecord{name: name, run: run, result: res, errOf: sentinel(err)})
	}
	return res, err
}

// internal runs an engine-internal step as a logged operation, so that a
// replay repeats it.
func (t *Txn) internal(ctx context.Context, name string, run func(ctx context.Context) (any, error)) error {
	_, err := t.do(ctx, name, run)
	return err
}

// Commit makes the transaction's changes durable and visible atomically
// (with TxnOptions.NoSync: visible now, durable at the next FS.Sync).
// On a kv conflict it replays the operation log on a fresh snapshot and
// retries; it returns ErrConflict only if a replayed operation returned a
// different result than it did the first time.
func (t *Txn) Commit(ctx context.Context) error {
	if t.done {
		return ErrTxnDone
	}
	t.done = true
	committed := false
	defer func() { t.fs.gcState.end(t, committed) }()
	defer t.waitRetained()
	if t.poison != nil {
		t.reset()
		return t.poison
	}
	if t.kvTxn == nil || t.opts.ReadOnly {
		t.reset()
		return nil
	}
	for attempt := 0; ; attempt++ {
		if err := t.flush(); err != nil {
			t.reset()
			return err
		}
		if len(t.written) > 0 {
			if err := t.settleSlices(ctx); err != nil {
				t.reset()
				return err
			}
		}
		dropped := t.dropped
		if len(dropped) > 0 && !t.fs.startDeleting(dropped) {
			// An inode it deletes was pinned since: replay, which makes
			// it an orphan instead.
			if err := t.replay(ctx); err != nil {
				t.reset()
				return err
			}
			continue
		}
		cseq, described, acked, err := t.describeCovered(t.kvTxn)
		if err != nil {
			if len(dropped) > 0 {
				t.fs.endDeleting(dropped)
			}
			t.reset()
			return err
		}
		err = t.kvTxn.Commit(ctx)
		t.fs.endCovered(cseq, err, t.opts.NoSync, acked)
		if len(dropped) > 0 {
			t.fs.endDeleting(dropped)
		}
		if err == nil {
			committed = true
			t.kvTxn = nil
			if described > 0 {
				t.fs.committedCovered(described)
			}
			t.fs.pacer.add(t.garbage)
			orphaned, tmpfiles := t.orphaned, t.tmpfiles
			t.reset()
			for _, ino := range tmpfiles {
				t.fs.Pin(ino) // the pin CreateOrphan hands to its caller
			}
			t.fs.noteOrphans(ctx, orphaned)
			return nil
		}
		t.kvTxn = nil
		if !errors.Is(err, kv.ErrConflict) {
			t.reset()
			return kvErr(err)
		}
		if err := backoff(ctx, attempt); err != nil {
			t.reset()
			return err
		}
		if err := t.replay(ctx); err != nil {
			t.reset()
			return err
		}
	}
}

// settleSlices makes the transaction's slices ready for the kv commit
// that names them. Without SlicesOrdered, and for a durable commit, they
// are synced first (Sync). With SlicesOrdered the store makes the data
// durable before the log anyway, but a write that failed is not there to
// make durable: a NoSync commit waits for its writes (WaitWritten), so
// that no commit names a failed one — except the covered puts still being
// written, which are pledged (slice.Pledge): the commit's metadata work,
// and the log write of a durable commit, overlap their device writes;
// the log's acknowledging flush follows them (datadir), and a pledged
// write that fails fails every later log write.
func (t *Txn) settleSlices(ctx context.Context) error {
	rest := t.written
	if t.fs.cfg.SlicesOrdered {
		var err error
		if rest, err = slice.Pledge(ctx, t.fs.slices, rest); err != nil {
			return storeErr("writing slices", err)
		}
		if len(rest) == 0 {
			return nil
		}
	}
	if !(t.opts.NoSync && t.fs.cfg.SlicesOrdered) {
		if err := t.fs.slices.Sync(ctx, rest); err != nil {
			return storeErr("syncing slices", err)
		}
	} else if err := slice.WaitWritten(ctx, t.fs.slices, rest); err != nil {
		return storeErr("writing slices", err)
	}
	return nil
}

// Sync makes every transaction that committed before the call durable: the
// barrier for TxnOptions.NoSync commits (one metadata log flush, shared
// with concurrent commits and Syncs). Their slice data was flushed when
// they committed.
func (f *FS) Sync(ctx context.Context) error {
	return f.syncCovered(func() error { return kvErr(f.kv.Sync(ctx)) })
}

// replay re-executes the log on a fresh kv transaction.
func (t *Txn) replay(ctx context.Context) error {
	t.reset()
	t.replaying = true
	defer func() { t.replaying = false }()
	for i, rec := range t.log {
		res, err := rec.run(ctx)
		if sentinel(err) != rec.errOf || (err == nil && !reflect.DeepEqual(res, rec.result)) {
			if err != nil && rec.errOf == nil {
				if isFatal(err) {
					return err
				}
			}
			t.fs.log.Debug("transaction replay differs", "op", rec.name, "index", i, "err", err)
			return ErrConflict
		}
	}
	return nil
}

// Abort discards the transaction. It is a no-op after Commit or Abort.
func (t *Txn) Abort() {
	if t.done {
		return
	}
	t.done = true
	t.reset()
	t.waitRetained()
	t.fs.gcState.end(t, false)
}

// waitRetained waits until the slice writes of the transaction's retained
// payloads (WritePayload) have finished, so that the caller may reuse
// their buffers once Commit or Abort returns. Their failure, if any, is
// the commit's (Sync or WaitWritten fail); here it only waits.
func (t *Txn) waitRetained() {
	if t.retained {
		t.retained = false
		slice.WaitWritten(context.WithoutCancel(context.Background()), t.fs.slices, t.written)
	}
}

// flush writes the cached inodes into the kv transaction (span records
// are written through as operations change them, spans.go).
func (t *Txn) flush() error {
	kt := t.kvTxn
	for ino, c := range t.inodes {
		if !c.dirty {
			continue
		}
		if err := t.putRecord(kt, meta.InodeKey(uint64(ino)), c.rec); err != nil {
			return err
		}
		c.dirty = false
	}
	return nil
}

// putRecord writes an inode record (nil deletes it).
func (t *Txn) putRecord(kt kv.Txn, key []byte, rec *meta.Inode) error {
	if rec == nil {
		return kvErr(kt.Delete(key))
	}
	b, err := meta.Marshal(rec)
	if err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrCorrupt, err)
	}
	return kvErr(kt.Set(key, b))
}

// loadInode returns a copy of inode ino's record.
func (t *Txn) loadInode(ctx context.Context, ino Ino) (*meta.Inode, error) {
	c, ok := t.inodes[ino]
	if !ok {
		key := meta.InodeKey(uint64(ino))
		b, err := t.getRaw(ctx, key)
		c = &cachedInode{}
		if err == nil {
			// Not through the decode cache: meta decodes the current
			// layout's records without reflection, faster than a lookup
			// in the cache's large map (docs/vnfs.md "Trees, session 8").
			c.rec = new(meta.Inode)
			if err := decodeInode(ino, b, c.rec); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, ErrNotExist) {
			return nil, err
		}
		t.inodes[ino] = c
	}
	if c.rec == nil {
		return nil, noInode(ino)
	}
	cp := *c.rec
	return &cp, nil
}

// readInode decodes ino's inode record into dst, like loadInode, but
// does not keep it in t.inodes when it is not there already: for reads
// of many inodes that the transaction will not read again (a directory
// page's attributes), where filling the map cost more than the reads
// (its growth, an entry and two records per inode). The read is tracked
// as loadInode's is; a later loadInode of ino reads the record again,
// from the same snapshot.
func (t *Txn) readInode(ctx context.Context, ino Ino, dst *meta.Inode) error {
	if c, ok := t.inodes[ino]; ok {
		if c.rec == nil {
			return noInode(ino)
		}
		*dst = *c.rec
		return nil
	}
	b, err := t.getRaw(ctx, meta.InodeKey(uint64(ino)))
	if errors.Is(err, ErrNotExist) {
		return noInode(ino)
	} else if err != nil {
		return err
	}
	return decodeInode(ino, b, dst)
}

// peekInode returns ino's inode record like loadInode, but reads it
// without adding it to the kv transaction's read set when the store can
// (kv.UntrackedGetter), and without caching it in t.inodes: a later
// loadInode of ino must still make the tracked read. Only for
// CheckHandle (see there).
func (t *Txn) peekInode(ctx context.Context, ino Ino) (*meta.Inode, error) {
	if _, ok := t.inodes[ino]; ok {
		return t.loadInode(ctx, ino)
	}
	kt, err := t.kvt(ctx)
	if err != nil {
		return nil, err
	}
	u, ok := kt.(kv.UntrackedGetter)
	if !ok {
		return t.loadInode(ctx, ino)
	}
	b, err := u.GetUntracked(ctx, meta.InodeKey(uint64(ino)))
	if err != nil {
		if err = kvErr(err); errors.Is(err, ErrNotExist) {
			return nil, noInode(ino)
		}
		return nil, err
	}
	rec := new(meta.Inode)
	if err := decodeInode(ino, b, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// decodeInode decodes inode ino's record b into dst.
func decodeInode(ino Ino, b []byte, dst *meta.Inode) error {
	*dst = meta.Inode{}
	if err := meta.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("%w: inode %d: %v", ErrCorrupt, ino, err)
	}
	return nil
}

// noInode is the error for an inode that does not exist.
func noInode(ino Ino) error { return fmt.Errorf("%w: inode %d", ErrNotExist, ino) }

// markFresh records that this execution created inode ino (Txn.fresh).
func (t *Txn) markFresh(ino Ino) {
	if t.fresh == nil {
		t.fresh = map[Ino]struct{}{}
	}
	t.fresh[ino] = struct{}{}
}

// putInode stores rec (nil deletes the inode) in the transaction.
func (t *Txn) putInode(ino Ino, rec *meta.Inode) {
	t.mutations++
	c := &cachedInode{dirty: true}
	if rec != nil {
		cp := *rec
		c.rec = &cp
	}
	t.inodes[ino] = c
}

func (t *Txn) getRaw(ctx context.Context, key []byte) ([]byte, error) {
	kt, err := t.kvt(ctx)
	if err != nil {
		return nil, err
	}
	v, err := kt.Get(ctx, key)
	return v, kvErr(err)
}

func (t *Txn) scanRaw(ctx context.Context, start, end []byte, limit int) ([]kv.Pair, error) {
	kt, err := t.kvt(ctx)
	if err != nil {
		return nil, err
	}
	p, err := kt.Scan(ctx, start, end, limit)
	return p, kvErr(err)
}

func (t *Txn) setRaw(ctx context.Context, key, value []byte) error {
	if t.opts.ReadOnly {
		return ErrReadOnly
	}
	kt, err := t.kvt(ctx)
	if err != nil {
		return err
	}
	t.mutations++
	return kvErr(kt.Set(key, value))
}

func (t *Txn) deleteRaw(ctx context.Context, key []byte) error {
	if t.opts.ReadOnly {
		return ErrReadOnly
	}
	kt, err := t.kvt(ctx)
	if err != nil {
		return err
	}
	t.mutations++
	return kvErr(kt.Delete(key))
}

// kvErr maps kv errors into the engine's vocabulary. kv.ErrConflict is
// kept as is: it is handled inside the engine and never reaches callers.
func kvErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kv.ErrNotFound):
		return ErrNotExist
	case errors.Is(err, kv.ErrConflict), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, kv.ErrReadOnly):
		return ErrReadOnly
	case errors.Is(err, kv.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	default:
		return storeErr("metadata store", err)
	}
}

var sentinels = []error{ErrNotExist, ErrExist, ErrNotDir, ErrIsDir, ErrNotEmpty, ErrInvalid, ErrBadName,
	ErrNameTooLong, ErrAccess, ErrPerm, ErrTooManyLinks, ErrFileTooBig, ErrNoSpace, ErrNoAttr, ErrRange,
	ErrNotSupported, ErrWrongType, ErrBadSlice, ErrCorrupt, ErrConflict, ErrTxnDone, ErrReadOnly, ErrIO,
	kv.ErrConflict, context.Canceled, context.DeadlineExceeded}

// sentinel returns the sentinel error err wraps (or err itself).
func sentinel(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

func isFatal(err error) bool {
	return errors.Is(err, ErrIO) || errors.Is(err, ErrCorrupt) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kv.ErrConflict)
}

func encodeUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeUint64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: counter of %d bytes", ErrCorrupt, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
