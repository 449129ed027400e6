package fs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// DefaultInlineMax is the largest write stored inline in the metadata
// instead of as a slice (see docs/benchmarks.md for the measurement).
const DefaultInlineMax = 8192

// Config configures an FS.
type Config struct {
	KV     kv.Store    // required
	Slices slice.Store // required
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
	// InlineMax: writes of at most this many bytes are stored inline
	// in metadata (default DefaultInlineMax; negative disables inlining).
	InlineMax int
	// GCWait bounds how long a garbage collection waits for transactions
	// older than its scan to finish before it frees anything (default
	// 200ms; if they are still running, freeing waits for the next run).
	GCWait time.Duration
	// Capacity reports total and free bytes for StatFS (optional).
	Capacity func() (total, free uint64, err error)
	// Reserve, with Capacity, is the free space growth may not use:
	// writes, creates, links and xattrs fail with ErrNoSpace rather than
	// leave less than Reserve bytes free, so that the metadata store
	// never runs out (see space.go). Zero: no reserve.
	Reserve uint64
	// SlicesOrdered promises that no byte of the kv store's log reaches the
	// OS before every slice put earlier is durable (datadir arranges this
	// by writing pebble's files through a vfs.FS that syncs the slice store
	// first). NoSync commits then skip their own slice flush: the slices are
	// flushed once per log write, shared by every commit in it. Without
	// the promise a NoSync commit flushes its slices before it commits.
	SlicesOrdered bool
}

// Validate checks c and fills in defaults.
func (c *Config) Validate() error {
	if c.KV == nil || c.Slices == nil {
		return errors.New("fs: Config.KV and Config.Slices are required")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.GCWait <= 0 {
		c.GCWait = 200 * time.Millisecond
	}
	if c.InlineMax == 0 {
		c.InlineMax = DefaultInlineMax
	}
	if c.InlineMax > slice.MaxSize {
		return fmt.Errorf("fs: InlineMax %d exceeds slice.MaxSize", c.InlineMax)
	}
	return nil
}

// FS is the transactional file system. It is safe for concurrent use.
type FS struct {
	cfg    Config
	kv     kv.Store
	slices slice.Store
	log    *slog.Logger

	inos inoAllocator
	// compactAfter and spanMax are the constants of the same names
	// (tests lower them to make compaction frequent).
	compactAfter, spanMax int
	appender              appender
	gcState               gcTracker
	pacer                 gcPacer     // see gcpace.go
	space                 *spaceGuard // see space.go; nil: no reserve
	decoded               decodeCache
	hints                 spanHints
	covered               coveredState // see covered.go
	// xattrs is false while the store holds no extended attribute at all
	// (probed at Open, set before any transaction writes one): deleting
	// an inode then skips the scan of its attributes, one of the four kv
	// reads of an unlink (see deleteInode).
	xattrs atomic.Bool

	mu struct {
		sync.Mutex
		pins    map[Ino]int
		secrets map[string][]byte
		// orphans holds the inodes committed as orphans by this process
		// (Open reclaims those of earlier runs), so that Unpin runs a
		// transaction only for them.
		orphans map[Ino]struct{}
		// deleting counts commits in flight that delete an inode they
		// found unpinned; Pin waits for them (deleted is signalled).
		deleting map[Ino]int
		deleted  *sync.Cond
	}
}

// Open opens the file system stored in cfg.KV and cfg.Slices, creating the
// root directory if the store is empty, converts a data directory written
// in an older data layout (see upgradeLayout), and reclaims orphan inodes left by
// a previous run (files unlinked while open).
func Open(ctx context.Context, cfg Config) (*FS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &FS{cfg: cfg, kv: cfg.KV, slices: cfg.Slices, log: cfg.Logger, compactAfter: compactAfter, spanMax: spanMax}
	f.mu.pins = map[Ino]int{}
	f.mu.secrets = map[string][]byte{}
	f.mu.orphans = map[Ino]struct{}{}
	f.mu.deleting = map[Ino]int{}
	f.mu.deleted = sync.NewCond(&f.mu.Mutex)
	f.inos.fs = f
	f.appender.fs = f
	f.gcState.init()
	f.pacer.init()
	f.space = newSpaceGuard(cfg)
	if f.space != nil {
		f.space.short = f.pacer.shortOfSpace
	}
	if err := f.format(ctx); err != nil {
		return nil, err
	}
	if err := f.probeXattrs(ctx); err != nil {
		return nil, err
	}
	if err := f.upgradeLayout(ctx); err != nil {
		return nil, err
	}
	if err := f.reclaimOrphans(ctx); err != nil {
		return nil, err
	}
	if err := f.initCovered(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// probeXattrs sets f.xattrs if the store holds any extended attribute.
func (f *FS) probeXattrs(ctx context.Context) error {
	t, err := f.kv.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		return kvErr(err)
	}
	defer t.Rollback()
	p := meta.AllXattrsPrefix()
	pairs, err := t.Scan(ctx, p, kv.PrefixEnd(p), 1)
	if err != nil {
		return kvErr(err)
	}
	if len(pairs) > 0 {
		f.xattrs.Store(true)
	}
	return nil
}

// Close releases the FS (waiting for a background cleanup of covered-put
// descriptors). It does not close the kv or slice stores.
func (f *FS) Close() error {
	f.covered.wg.Wait()
	return nil
}

func (f *FS) now() time.Time { return f.cfg.Clock() }

// format creates the root directory if it does not exist.
func (f *FS) format(ctx context.Context) error {
	return f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "format", func(ctx context.Context) (any, error) {
			_, err := t.loadInode(ctx, RootIno)
			if err == nil {
				return nil, nil
			}
			if !errors.Is(err, ErrNotExist) {
				return nil, err
			}
			now := f.now().UnixNano()
			root := &meta.Inode{Type: uint8(TypeDirectory), Mode: 0o755, Nlink: 2, Atime: now, Mtime: now,
				Ctime: now, Btime: now, Change: 1, Gen: randUint64(), Parent: uint64(RootIno), NextCookie: firstCookie, Spans: 1}
			t.putInode(RootIno, root)
			return nil, t.setRaw(ctx, meta.MiscKey(keyNextIno), encodeUint64(uint64(RootIno)+1))
		})
	})
}

// Secret returns a persistent random 32-byte key for the named purpose,
// creating it on first use (e.g. the NFS file-handle MAC key).
func (f *FS) Secret(ctx context.Context, purpose string) ([]byte, error) {
	f.mu.Lock()
	s, ok := f.mu.secrets[purpose]
	f.mu.Unlock()
	if ok {
		return s, nil
	}
	var secret []byte
	err := f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "secret", func(ctx context.Context) (any, error) {
			k := meta.MiscKey("secret/" + purpose)
			v, err := t.getRaw(ctx, k)
			if err == nil {
				if len(v) != 32 {
					return nil, fmt.Errorf("%w: secret %q has %d bytes", ErrCorrupt, purpose, len(v))
				}
				secret = v
				return string(v), nil
			}
			if !errors.Is(err, ErrNotExist) {
				return nil, err
			}
			secret = make([]byte, 32)
			rand.Read(secret)
			return string(secret), t.setRaw(ctx, k, secret)
		})
	})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.mu.secrets[purpose] = secret
	f.mu.Unlock()
	return secret, nil
}

// Pin keeps inode ino alive while it is open: if its last link is removed
// while pinned it becomes an orphan, reclaimed by the last Unpin (or by the
// next Open after a crash). After Pin returns, no transaction that deletes
// ino can commit unless it saw the pin: a commit deleting ino checks the
// pins just before its kv commit (and replays, making an orphan, if ino
// was pinned meanwhile), and Pin waits while such a commit is in flight
// (fuse ENGINE-REQUESTS 2). A pinner that waited then finds the inode gone.
func (f *FS) Pin(ino Ino) {
	f.mu.Lock()
	for f.mu.deleting[ino] > 0 {
		f.mu.deleted.Wait()
	}
	f.mu.pins[ino]++
	f.mu.Unlock()
}

// startDeleting registers a commit about to delete inos, which it found
// unpinned; it returns false (registering nothing) if one is pinned now.
func (f *FS) startDeleting(inos []Ino) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ino := range inos {
		if f.mu.pins[ino] > 0 {
			return false
		}
	}
	for _, ino := range inos {
		f.mu.deleting[ino]++
	}
	return true
}

// endDeleting ends what startDeleting registered and wakes waiting Pins.
func (f *FS) endDeleting(inos []Ino) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ino := range inos {
		if f.mu.deleting[ino]--; f.mu.deleting[ino] <= 0 {
			delete(f.mu.deleting, ino)
		}
	}
	f.mu.deleted.Broadcast()
}

// Unpin releases one Pin; the last release of an orphan deletes it. The
// last release of an inode that is not an orphan costs no transaction.
func (f *FS) Unpin(ctx context.Context, ino Ino) error {
	f.mu.Lock()
	n := f.mu.pins[ino] - 1
	_, orphan := f.mu.orphans[ino]
	if n <= 0 {
		delete(f.mu.pins, ino)
	} else {
		f.mu.pins[ino] = n
	}
	f.mu.Unlock()
	if n > 0 || !orphan {
		return nil
	}
	return f.reclaimOrphan(ctx, ino)
}

// noteOrphans records inodes a commit made orphans. Those whose last pin
// went away while the transaction ran (a long-lived transaction, such as
// a FUSE sandbox, unlinked a file that was closed before it committed) are
// reclaimed at once; failures are left to the next Open.
func (f *FS) noteOrphans(ctx context.Context, inos []Ino) {
	if len(inos) == 0 {
		return
	}
	var unpinned []Ino
	f.mu.Lock()
	for _, ino := range inos {
		if f.mu.pins[ino] > 0 {
			f.mu.orphans[ino] = struct{}{}
		} else {
			unpinned = append(unpinned, ino)
		}
	}
	f.mu.Unlock()
	for _, ino := range unpinned {
		if err := f.reclaimOrphan(context.WithoutCancel(ctx), ino); err != nil {
			f.log.Warn("reclaiming an orphan after commit failed; the next Open will", "ino", ino, "err", err)
		}
	}
}

// reclaimOrphan deletes inode ino if it is still an orphan.
func (f *FS) reclaimOrphan(ctx context.Context, ino Ino) error {
	f.mu.Lock()
	delete(f.mu.orphans, ino)
	f.mu.Unlock()
	return f.Do(ctx, RootCred, func(t *Txn) error {
		return t.internal(ctx, "unpin", func(ctx context.Context) (any, error) {
			if _, err := t.getRaw(ctx, meta.OrphanKey(uint64(ino))); errors.Is(err, ErrNotExist) {
				return nil, nil
			} else if err != nil {
				return nil, err
			}
			// Pinned again since the last Unpin: the new pinner's last
			// Unpin reclaims it.
			f.mu.Lock()
			repinned := f.mu.pins[ino] > 0
			if repinned {
				f.mu.orphans[ino] = struct{}{}
			}
			f.mu.Unlock()
			if repinned {
				return nil, nil
			}
			// Registered like dropLink's deletions, so that a Pin taken
			// before the commit makes the commit replay (and skip).
			t.dropped = append(t.dropped, ino)
			return nil, t.deleteInode(ctx, ino, true)
		})
	})
}

func (f *FS) pinned(ino Ino) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.pins[ino] > 0
}

// reclaimOrphans deletes inodes that were unlinked while open before a
// restart: nothing can have them open now.
func (f *FS) reclaimOrphans(ctx context.Context) error {
	for {
		var done bool
		err := f.Do(ctx, RootCred, func(t *Txn) error {
			return t.internal(ctx, "reclaim-orphans", func(ctx context.Context) (any, error) {
				pairs, err := t.scanRaw(ctx, meta.OrphanPrefix(), kv.PrefixEnd(meta.OrphanPrefix()), 64)
				if err != nil {
					return nil, err
				}
				done = len(pairs) == 0
				for _, p := range pairs {
					ino, err := meta.ParseIno(p.Key)
					if err != nil {
						return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
					}
					// An orphan record names an inode without links
					// (unlinked while open, or an unlinked tmpfile).
					// One with links is damage, not garbage: drop the
					// record, keep the file (Check reports it).
					n, err := t.loadInode(ctx, Ino(ino))
					if err != nil && !errors.Is(err, ErrNotExist) {
						return nil, err
					}
					if n != nil && n.Nlink > 0 {
						f.log.Warn("orphan record of an inode with links: record dropped, inode kept", "ino", ino, "nlink", n.Nlink)
						if err := t.deleteRaw(ctx, meta.OrphanKey(ino)); err != nil {
							return nil, err
						}
						continue
					}
					if err := t.deleteInode(ctx, Ino(ino), true); err != nil {
						return nil, err
					}
				}
				return len(pairs), nil
			})
		})
		if err != nil || done {
			return err
		}
	}
}

// StatFS reports capacity.
func (f *FS) StatFS(ctx context.Context) (StatFS, error) {
	const bs = 4096
	st := StatFS{BlockSize: bs, NameLen: MaxNameLen, Files: 1 << 40, FilesFree: 1<<40 - f.inos.peek()}
	total, free := uint64(1<<50), uint64(1<<50)
	if f.cfg.Capacity != nil {
		t, fr, err := f.cfg.Capacity()
		if err != nil {
			return StatFS{}, fmt.Errorf("%w: statfs: %v", ErrIO, err)
		}
		total, free = t, fr
	}
	// As with a file system's reserved blocks, the reserve (space.go) is
	// free but not available: df shows no room once writes would get
	// ENOSPC.
	avail := free - min(free, f.cfg.Reserve)
	st.Blocks, st.BlocksFree, st.BlocksAvail = total/bs, free/bs, avail/bs
	return st, nil
}

func randUint64() uint64 {
	var b [8]byte
	rand.Read(b[:])
	v := uint64(0)
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

// inoAllocator hands out inode numbers from batches reserved in the kv
// store by small transactions of their own, so allocation never makes a
// file-system transaction conflict and a replayed operation can reuse the
// number it got the first time. Numbers lost in a crash are skipped.
type inoAllocator struct {
	fs *FS
	mu struct {
		sync.Mutex
		next, limit uint64
	}
}

const (
	keyNextIno   = "nextino"
	inoBatchSize = 1024
)

func (a *inoAllocator) peek() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.next
}

func (a *inoAllocator) alloc(ctx context.Context) (Ino, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.next == a.mu.limit {
		var start uint64
		err := retryKV(ctx, func() error {
			tx, err := a.fs.kv.Begin(ctx, kv.TxnOptions{})
			if err != nil {
				return err
			}
			defer tx.Rollback()
			v, err := tx.Get(ctx, meta.MiscKey(keyNextIno))
			if err != nil {
				return err
			}
			if start, err = decodeUint64(v); err != nil {
				return err
			}
			if err := tx.Set(meta.MiscKey(keyNextIno), encodeUint64(start+inoBatchSize)); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
		if err != nil {
			return 0, kvErr(err)
		}
		a.mu.next, a.mu.limit = start, start+inoBatchSize
	}
	ino := a.mu.next
	a.mu.next++
	return Ino(ino), nil
}

// retryKV runs fn until it does not fail with kv.ErrConflict.
func retryKV(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if !errors.Is(err, kv.ErrConflict) {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

// backoff sleeps a little, more after repeated conflicts.
func backoff(ctx context.Context, attempt int) error {
	if attempt < 2 {
		return ctx.Err()
	}
	d := time.Duration(min(attempt, 10)) * 100 * time.Microsecond
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
