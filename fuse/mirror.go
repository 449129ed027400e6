package fuse

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
)

// SuggestedMirrorBytes is a memory budget for a local mount's mirrors
// (Config.MirrorBytes, `txnfs mount --mirror-bytes`). Mirrors are off by
// default: on this project's test machine they cost large sequential
// writes 2–3x (the tmpfs's huge pages are fresh memory), and a shared
// writable mapping of a passthrough writer is not synced to the engine
// by msync (docs/fuse.md, "Session 12: passthrough reads").
const SuggestedMirrorBytes = 1 << 30

// A mirror is a copy of a regular file's engine contents in a private
// tmpfs mounted huge=always (BFS's memory data tier, made visible to the
// kernel): read-only opens of a file with a valid mirror are answered
// FOPEN_PASSTHROUGH with the mirror as backing file, so the kernel reads
// the tmpfs's page cache (2 MiB folios) instead of the FUSE file's (4 KiB
// folios on 6.18, ~3x slower per byte: docs/fuse.md, session 12).
//
// A file gets a mirror when it is created, or truncated to 0, through the
// mount while the budget allows. Every data change the mount makes to it
// is applied to the mirror too, and validity is a chain of the engine's
// change attribute: each change is applied only if the engine's change
// before it equals the one the mirror holds, and the mirror then holds the
// change after it. Anything else (a change the mount did not mirror, a
// failure half way, an unmirrored operation) breaks the chain, and an
// open compares the engine's current change with the mirror's before
// using it: a mirror is only a cache, used when provably equal.
//
// The kernel's rules for one inode (fs/fuse/iomode.c, checked on this
// 6.18 kernel): while any passthrough open exists, every other open must
// be passthrough too (to the same backing file) or open(2) fails with
// EIO -- FOPEN_DIRECT_IO included, the check comes first -- and a
// passthrough open fails while a cached open exists. So passthrough is
// given to a read-only open of an inode with no other open of this mount,
// and then to every open of it until the passthrough opens are closed,
// writable ones included. A passthrough writer's writes go to the mirror,
// not the mount: the mirror is then ahead of the engine (dirty), and
// reconcile writes what differs into the engine before anything the mount
// answers about the file (GETATTR, LOOKUP, SETATTR, FALLOCATE,
// copy_file_range, LSEEK), at every close (FLUSH) and fsync (so fsync is
// durable as ever), and at the last close. A mirror with passthrough
// opens is never dropped: if its chain breaks it is copied again from the
// engine (resync), or, when dirty, reconciled.
type mirrorSet struct {
	eng    *fs.FS
	ctx    context.Context
	budget int64
	dir    *os.File // the tmpfs's root (detached: see mountTmpfs)

	// register and unregister are the kernel's backing file ioctls
	// (go-fuse Server.RegisterBackingFd): set once the mount serves.
	register   func(*raw.BackingMap) (int32, syscall.Errno)
	unregister func(int32) syscall.Errno

	mu    sync.Mutex
	off   bool // a sandbox is active: no mirrors
	m     map[fs.Ino]*mirror
	opens map[fs.Ino]*openCount // every open of this mount, by inode
	lru   list.List             // of *mirror, most recently used first
	used  int64                 // sum of the mirrors' sizes (memory)

	stats mirrorCounters
}

// openCount counts a mount's opens of one inode.
type openCount struct {
	passthrough int // opens answered FOPEN_PASSTHROUGH
	ptWriters   int // those of them open for writing
	other       int // every other open
}

type mirror struct {
	ino    fs.Ino
	f      *os.File
	size   int64  // the memory it takes (tmpfs blocks), counted in used
	change uint64 // the engine's change attribute the contents equal
	// ahead holds the write-behind transactions whose writes were
	// applied to the mirror before they committed (see writeAhead):
	// the mirror is ahead of the engine until they have.
	ahead     map[any]bool
	backingID int32 // registered with the kernel (0: not yet)
	// dirty says passthrough writers may have written the mirror since
	// the last reconcile: it is the file's truth, ahead of the engine.
	dirty     bool
	forgotten bool // the kernel forgot the inode: drop at the last close
	// mtime is the mirror file's modification time when the mount last
	// changed or reconciled it: a later one is a passthrough write, even
	// one of bytes equal to those there (see reconcileLocked).
	mtime time.Time
	elem  *list.Element
}

// mirrorCounters are the mirrors' metrics (MirrorStats).
type mirrorCounters struct {
	created, dropped, resynced, evicted  atomic.Uint64
	passthroughOpens, passthroughWriters atomic.Uint64
	reconciled, reconciledBytes          atomic.Uint64
}

// MirrorStats describes a mount's mirrors.
type MirrorStats struct {
	Enabled          bool
	Budget, Used     int64  // bytes of memory (the mirrors' tmpfs blocks)
	Mirrors          int    // mirrors held
	Created, Dropped uint64 // mirrors made and dropped (incl. evicted)
	Evicted          uint64 // dropped for the budget
	Resynced         uint64 // copied again from the engine (chain broken under passthrough opens)
	PassthroughOpens uint64 // opens answered FOPEN_PASSTHROUGH
	// PassthroughWriters counts writable opens answered
	// FOPEN_PASSTHROUGH (passthrough readers had the file open).
	PassthroughWriters uint64
	// Reconciled counts reconciles that found the mirror dirty, and
	// ReconciledBytes the bytes they wrote into the engine.
	Reconciled, ReconciledBytes uint64
}

var (
	// errMirrorsInUse refuses a sandbox while passthrough opens exist
	// (EBUSY).
	errMirrorsInUse = errors.New("files are open for passthrough reads from the memory mirror (close them first)")
)

// newMirrorSet mounts a private tmpfs (huge=always, capped at twice the
// budget) and returns the mirror set using it.
func newMirrorSet(ctx context.Context, eng *fs.FS, budget int64) (*mirrorSet, error) {
	// The cap only bounds memory: mirrors over the budget are dropped
	// (evictLocked), except those with passthrough opens, which
	// passthrough writers may grow; past the cap their writes fail
	// with ENOSPC.
	size := 2*budget + 64<<20
	dir, err := mountTmpfs(size)
	if err != nil {
		return nil, fmt.Errorf("fuse: mirror tmpfs: %w", err)
	}
	s := &mirrorSet{eng: eng, ctx: ctx, budget: budget, dir: dir,
		m: map[fs.Ino]*mirror{}, opens: map[fs.Ino]*openCount{}}
	return s, nil
}

// close drops every mirror and unmounts the tmpfs.
func (s *mirrorSet) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	for _, mr := range s.m {
		if mr.dirty {
			s.reconcileLocked(mr)
		}
		s.dropLocked(mr)
	}
	s.mu.Unlock()
	s.dir.Close()
}

// Stats returns the current metrics.
func (s *mirrorSet) Stats() MirrorStats {
	if s == nil {
		return MirrorStats{}
	}
	s.mu.Lock()
	st := MirrorStats{Enabled: true, Budget: s.budget, Used: s.used, Mirrors: len(s.m)}
	s.mu.Unlock()
	st.Created = s.stats.created.Load()
	st.Dropped = s.stats.dropped.Load()
	st.Evicted = s.stats.evicted.Load()
	st.Resynced = s.stats.resynced.Load()
	st.PassthroughOpens = s.stats.passthroughOpens.Load()
	st.PassthroughWriters = s.stats.passthroughWriters.Load()
	st.Reconciled = s.stats.reconciled.Load()
	st.ReconciledBytes = s.stats.reconciledBytes.Load()
	return st
}

func (s *mirrorSet) count(ino fs.Ino) *openCount {
	c := s.opens[ino]
	if c == nil {
		c = &openCount{}
		s.opens[ino] = c
	}
	return c
}

// openWriter records a writable open of ino, whose engine change is
// change after the open's checks, and returns the backing id to answer
// it with: passthrough while passthrough opens exist (the kernel accepts
// nothing else then), or 0 for an ordinary open.
func (s *mirrorSet) openWriter(ino fs.Ino, change uint64) (int32, error) {
	if s == nil {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.count(ino)
	if c.passthrough == 0 {
		c.other++
		return 0, nil
	}
	mr, err := s.currentLocked(ino, change)
	if err != nil {
		return 0, err
	}
	c.passthrough++
	c.ptWriters++
	mr.dirty = true
	s.stats.passthroughOpens.Add(1)
	s.stats.passthroughWriters.Add(1)
	return mr.backingID, nil
}

// currentLocked returns ino's mirror, which passthrough opens use, made
// equal to the engine at change unless passthrough writers made it the
// truth.
func (s *mirrorSet) currentLocked(ino fs.Ino, change uint64) (*mirror, error) {
	mr := s.m[ino]
	if mr == nil {
		return nil, fmt.Errorf("%w: passthrough opens of inode %d without a mirror", fs.ErrIO, ino)
	}
	if !mr.dirty && (mr.change != change || len(mr.ahead) > 0) {
		if err := s.resyncLocked(mr); err != nil {
			return nil, err
		}
	}
	return mr, nil
}

// openReader records a read-only open of ino, whose engine change is
// change, and returns the backing id to answer it with (passthrough), or
// 0 for an ordinary open. eligible says the open may be passthrough at
// all (read-only, not exec, no sandbox).
func (s *mirrorSet) openReader(ino fs.Ino, change uint64, eligible bool) (int32, error) {
	if s == nil {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.count(ino)
	mr := s.m[ino]
	if c.passthrough > 0 {
		// The kernel accepts only another passthrough open now.
		mr, err := s.currentLocked(ino, change)
		if err != nil {
			return 0, err
		}
		c.passthrough++
		s.stats.passthroughOpens.Add(1)
		return mr.backingID, nil
	}
	if !eligible || s.off || mr == nil || c.other > 0 || mr.change != change || len(mr.ahead) > 0 || s.register == nil {
		c.other++
		return 0, nil
	}
	if mr.backingID == 0 {
		id, errno := s.register(&raw.BackingMap{Fd: int32(mr.f.Fd())})
		if errno != 0 {
			c.other++
			return 0, nil
		}
		mr.backingID = id
	}
	c.passthrough++
	s.touchLocked(mr)
	s.stats.passthroughOpens.Add(1)
	return mr.backingID, nil
}

// openedWriter counts an ordinary open of a file nobody else can have
// open yet (O_CREAT of a new file, O_TMPFILE).
func (s *mirrorSet) openedWriter(ino fs.Ino) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.count(ino).other++
	s.mu.Unlock()
}

// closed records the close (RELEASE) of an open of ino: passthrough or
// not, for writing or not. The last passthrough writer's close
// reconciles the mirror.
func (s *mirrorSet) closed(ino fs.Ino, passthrough, write bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.opens[ino]
	if c == nil {
		return
	}
	if passthrough {
		c.passthrough--
		if write {
			c.ptWriters--
		}
	} else {
		c.other--
	}
	if c.passthrough == 0 && c.other == 0 {
		delete(s.opens, ino)
	}
	if mr := s.m[ino]; mr != nil && mr.dirty {
		if err := s.reconcileLocked(mr); err != nil && c.ptWriters == 0 {
			// The engine refused what the writers wrote, and their
			// close (FLUSH) said so: its contents stand, else the
			// file answers every later request with the error.
			mr.dirty = false
			s.invalidateLocked(mr)
		}
	}
	if mr := s.m[ino]; mr != nil && mr.forgotten && c.passthrough == 0 {
		s.dropLocked(mr)
	}
}

// passthroughLocked reports whether ino has passthrough opens.
func (s *mirrorSet) passthroughLocked(ino fs.Ino) bool {
	c := s.opens[ino]
	return c != nil && c.passthrough > 0
}

// create gives ino (just created or truncated to 0 by this mount, now at
// change) an empty mirror, or empties its existing one.
func (s *mirrorSet) create(ino fs.Ino, change uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return
	}
	if mr := s.m[ino]; mr != nil {
		if err := mr.f.Truncate(0); err != nil {
			s.invalidateLocked(mr)
			return
		}
		s.resizedLocked(mr)
		mr.change = change
		s.touchLocked(mr)
		return
	}
	if s.used >= s.budget {
		s.evictLocked(nil)
		if s.used >= s.budget {
			return
		}
	}
	f, err := newTmpfile(s.dir)
	if err != nil {
		return
	}
	mr := &mirror{ino: ino, f: f, change: change, ahead: map[any]bool{}}
	mr.elem = s.lru.PushFront(mr)
	s.resizedLocked(mr)
	s.m[ino] = mr
	s.stats.created.Add(1)
}

// apply applies a change of ino's data that moved the engine's change
// attribute from before to after: fn changes the mirror the same way. A
// change the chain does not connect invalidates the mirror instead.
func (s *mirrorSet) apply(ino fs.Ino, before, after uint64, fn func(f *os.File) error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.m[ino]
	if mr == nil {
		return
	}
	if mr.dirty {
		// The caller reconciled before the operation, which ran on
		// the engine; the mirror, the truth for passthrough writers
		// and readers, gets it too. If something else moved the
		// engine meanwhile, the engine follows the mirror again.
		if fn != nil {
			if err := fn(mr.f); err != nil {
				if err := s.resyncLocked(mr); err != nil {
					mr.change = 0
				}
				return
			}
			s.resizedLocked(mr)
		}
		if mr.change == before {
			mr.change = after
		} else {
			s.reconcileLocked(mr)
		}
		return
	}
	if mr.change != before || len(mr.ahead) > 0 {
		s.invalidateLocked(mr)
		return
	}
	if fn != nil {
		if err := fn(mr.f); err != nil {
			s.invalidateLocked(mr)
			return
		}
		s.resizedLocked(mr)
	}
	mr.change = after
	s.touchLocked(mr)
	s.evictLocked(mr)
}

// invalidate breaks ino's chain: a change the mirror cannot follow.
func (s *mirrorSet) invalidate(ino fs.Ino) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mr := s.m[ino]; mr != nil {
		s.invalidateLocked(mr)
	}
}

// writeAhead applies a write-behind write in transaction key, not yet
// committed, to ino's mirror (its buffer is gone by the commit); the
// mirror is not valid until committed(key) connects the chain.
func (s *mirrorSet) writeAhead(ino fs.Ino, key any, off uint64, data []byte) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.m[ino]
	if mr == nil {
		return
	}
	if _, err := mr.f.WriteAt(data, int64(off)); err != nil {
		s.invalidateLocked(mr)
		return
	}
	mr.ahead[key] = true
	s.resizedLocked(mr)
	s.touchLocked(mr)
	s.evictLocked(mr)
}

// committed ends write-behind transaction key's writes to ino: ok with
// the engine's change before its first write and after its last, or
// failed.
func (s *mirrorSet) committed(ino fs.Ino, key any, ok bool, before, after uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.m[ino]
	if mr == nil || !mr.ahead[key] {
		return
	}
	delete(mr.ahead, key)
	if !ok || mr.change != before {
		s.invalidateLocked(mr)
		return
	}
	mr.change = after
}

// forget drops ino's mirror: the kernel forgot the inode.
func (s *mirrorSet) forget(ino fs.Ino) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mr := s.m[ino]; mr != nil {
		if s.passthroughLocked(ino) {
			mr.forgotten = true
			return
		}
		if mr.dirty {
			s.reconcileLocked(mr)
		}
		s.dropLocked(mr)
	}
}

// suspend drops every mirror and makes none until resume (a sandbox
// begins: its reads must go through its transaction, and the mirrors
// hold committed state). It fails with EBUSY while passthrough opens
// exist: their reads cannot be moved into the sandbox.
func (s *mirrorSet) suspend() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.opens {
		if c.passthrough > 0 {
			return errMirrorsInUse
		}
	}
	for _, mr := range s.m {
		s.dropLocked(mr)
	}
	s.off = true
	return nil
}

// resume allows mirrors again (the sandbox ended).
func (s *mirrorSet) resume() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.off = false
	s.mu.Unlock()
}

// invalidateLocked drops mr, or copies it again from the engine while
// passthrough opens use it.
//
// Operations that change the engine without the mirror reconcile first
// (see reconcile), so a dirty mirror is copied again too.
func (s *mirrorSet) invalidateLocked(mr *mirror) {
	if !s.passthroughLocked(mr.ino) {
		s.dropLocked(mr)
		return
	}
	if err := s.resyncLocked(mr); err != nil {
		// Readers would see wrong data: nothing else can be done
		// than to say so; new opens fail (openReader resyncs again).
		mr.change = 0
	}
}

// resyncLocked copies ino's engine contents into mr (passthrough
// readers may see the copy in progress, as a concurrent writer's on a
// local file system).
func (s *mirrorSet) resyncLocked(mr *mirror) error {
	buf := make([]byte, 1<<20)
	var change uint64
	err := s.eng.View(s.ctx, fs.RootCred, func(t *fs.Txn) error {
		a, err := t.GetAttr(s.ctx, mr.ino)
		if err != nil {
			return err
		}
		// The engine's holes become holes (not zeros written into
		// tmpfs): a sparse file costs what it holds.
		var start, end uint64
		for off := uint64(0); off < a.Size; {
			if off >= end {
				if start, end, err = engineExtent(s.ctx, t, mr.ino, off, a.Size); err != nil {
					return err
				}
				if start > off {
					if err := punchHole(mr.f, off, start-off); err != nil {
						return err
					}
					off = start
					continue
				}
			}
			n, _, err := t.Read(s.ctx, mr.ino, off, buf[:min(uint64(len(buf)), end-off)])
			if err != nil {
				return err
			}
			if n == 0 {
				return errors.New("short read")
			}
			if _, err := mr.f.WriteAt(buf[:n], int64(off)); err != nil {
				return err
			}
			off += uint64(n)
		}
		if err := mr.f.Truncate(int64(a.Size)); err != nil {
			return err
		}
		change = a.Change
		return nil
	})
	s.resizedLocked(mr)
	if err != nil {
		return fmt.Errorf("%w: copying the mirror of inode %d again: %v", fs.ErrIO, mr.ino, err)
	}
	clear(mr.ahead)
	mr.change = change
	s.stats.resynced.Add(1)
	return nil
}

// readEngine copies ino's engine contents in [off, off+n) into mirror
// file f (s.mu held: apply).
func (s *mirrorSet) readEngine(f *os.File, ino fs.Ino, off, n uint64) error {
	buf := make([]byte, min(n, 1<<20))
	return s.eng.View(s.ctx, fs.RootCred, func(t *fs.Txn) error {
		for end := off + n; off < end; {
			r, _, err := t.Read(s.ctx, ino, off, buf[:min(uint64(len(buf)), end-off)])
			if err != nil {
				return err
			}
			if r == 0 {
				return errors.New("short read")
			}
			if _, err := f.WriteAt(buf[:r], int64(off)); err != nil {
				return err
			}
			off += uint64(r)
		}
		return nil
	})
}

func (s *mirrorSet) dropLocked(mr *mirror) {
	if s.m[mr.ino] != mr {
		return
	}
	delete(s.m, mr.ino)
	s.lru.Remove(mr.elem)
	s.used -= mr.size
	if mr.backingID != 0 && s.unregister != nil {
		s.unregister(mr.backingID)
	}
	mr.f.Close()
	s.stats.dropped.Add(1)
}

func (s *mirrorSet) touchLocked(mr *mirror) { s.lru.MoveToFront(mr.elem) }

// resizedLocked updates mr's size (the memory it takes) and the bytes
// used, and its recorded mtime (the mount changed or reconciled it).
func (s *mirrorSet) resizedLocked(mr *mirror) {
	size := int64(0)
	if st, err := mr.f.Stat(); err == nil {
		size = fileMemory(st)
		mr.mtime = st.ModTime()
	}
	s.used += size - mr.size
	mr.size = size
}

// evictLocked drops least recently used mirrors without passthrough
// opens while the budget is exceeded (keep, just used, goes last).
func (s *mirrorSet) evictLocked(keep *mirror) {
	for e := s.lru.Back(); e != nil && s.used > s.budget; {
		mr := e.Value.(*mirror)
		e = e.Prev()
		if mr == keep || s.passthroughLocked(mr.ino) {
			continue
		}
		s.dropLocked(mr)
		s.stats.evicted.Add(1)
	}
	if keep != nil && s.used > s.budget && !s.passthroughLocked(keep.ino) {
		s.dropLocked(keep)
		s.stats.evicted.Add(1)
	}
}

// mirrorFallocate applies a FALLOCATE the engine applied (see Fallocate)
// to a mirror file.
func mirrorFallocate(f *os.File, punch, allocate bool, off, length uint64) error {
	if punch {
		if err := punchHole(f, off, length); err != nil {
			return err
		}
	}
	if allocate {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if end := int64(off + length); end > st.Size() {
			return f.Truncate(end)
		}
	}
	return nil
}

// reconcile writes what passthrough writers wrote into ino's mirror to
// the engine (nothing if the mirror is not dirty). Called before any
// operation whose answer or effect depends on the file's engine
// contents or attributes.
func (s *mirrorSet) reconcile(ino fs.Ino) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mr := s.m[ino]; mr != nil && mr.dirty {
		return s.reconcileLocked(mr)
	}
	return nil
}

// dirty reports whether passthrough writers may have changed ino's mirror
// since the engine last got its contents.
func (s *mirrorSet) dirty(ino fs.Ino) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.m[ino]
	return mr != nil && mr.dirty
}

// reconcileBlock is the unit reconcile compares and writes.
const reconcileBlock = 64 << 10

// reconcileLocked makes the engine's contents equal to dirty mirror mr's:
// the size, then every block that differs, in one transaction (the
// engine's change then moves and the mirror holds the new one). The
// mirror stays dirty while passthrough writers are open.
func (s *mirrorSet) reconcileLocked(mr *mirror) error {
	st, err := mr.f.Stat()
	if err != nil {
		return err
	}
	size := uint64(st.Size())
	mbuf := make([]byte, 1<<20)
	ebuf := make([]byte, 1<<20)
	var after uint64
	var written uint64
	err = s.eng.DoOpts(s.ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(t *fs.Txn) error {
		written = 0
		a, err := t.GetAttr(s.ctx, mr.ino)
		if err != nil {
			return err
		}
		if a.Size != size {
			if _, err := t.SetAttr(s.ctx, mr.ino, fs.SetAttr{Size: &size, OpenForWrite: true}); err != nil {
				return err
			}
		}
		// Only ranges where the mirror or the engine holds data are
		// compared: a sparse file costs what it holds, not its size.
		var mStart, mEnd, eStart, eEnd uint64
		for off := uint64(0); off < size; {
			if off >= mEnd {
				mStart, mEnd = mirrorExtent(mr.f, off, size)
			}
			if off >= eEnd {
				if eStart, eEnd, err = engineExtent(s.ctx, t, mr.ino, off, size); err != nil {
					return err
				}
			}
			if next := min(mStart, eStart); next > off {
				off = max(off, next&^(reconcileBlock-1))
				if off >= size {
					break
				}
			}
			n := int(min(uint64(len(mbuf)), size-off))
			if _, err := mr.f.ReadAt(mbuf[:n], int64(off)); err != nil {
				return err
			}
			clear(ebuf[:n])
			if _, _, err := t.Read(s.ctx, mr.ino, off, ebuf[:n]); err != nil {
				return err
			}
			for b := 0; b < n; b += reconcileBlock {
				e := min(b+reconcileBlock, n)
				if !bytes.Equal(mbuf[b:e], ebuf[b:e]) {
					if err := t.Write(s.ctx, mr.ino, off+uint64(b), mbuf[b:e]); err != nil {
						return err
					}
					written += uint64(e - b)
				}
			}
			off += uint64(n)
		}
		if written == 0 && a.Size == size && !st.ModTime().Equal(mr.mtime) {
			// Passthrough writes of the bytes already there: POSIX
			// still moves mtime and ctime.
			if _, err := t.SetAttr(s.ctx, mr.ino, fs.SetAttr{Mtime: &fs.SetTime{Now: true}}); err != nil {
				return err
			}
		}
		ca, err := t.GetAttrMask(s.ctx, mr.ino, fs.AttrChange)
		after = ca.Change
		return err
	})
	s.resizedLocked(mr)
	if err != nil {
		return fmt.Errorf("%w: writing the mirror of inode %d to the engine: %v", fs.ErrIO, mr.ino, err)
	}
	mr.change = after
	clear(mr.ahead)
	if c := s.opens[mr.ino]; c == nil || c.ptWriters == 0 {
		mr.dirty = false
	}
	if written > 0 || size != 0 {
		s.stats.reconciled.Add(1)
		s.stats.reconciledBytes.Add(written)
	}
	return nil
}

// mirrorExtent returns the first data extent [start, end) of mirror file
// f at or after off, within size (start = size: none). An lseek that
// fails otherwise than with ENXIO reports data to the end.
func mirrorExtent(f *os.File, off, size uint64) (start, end uint64) {
	st, err := f.Seek(int64(off), seekData)
	if errors.Is(err, syscall.ENXIO) {
		return size, size
	}
	if err != nil {
		return off, size
	}
	start = min(uint64(st), size)
	e, err := f.Seek(st, seekHole)
	if err != nil {
		return start, size
	}
	return start, max(min(uint64(e), size), start+1)
}

// engineExtent is mirrorExtent of ino's engine contents.
func engineExtent(ctx context.Context, t *fs.Txn, ino fs.Ino, off, size uint64) (start, end uint64, err error) {
	st, eof, err := t.Seek(ctx, ino, off, fs.SeekData)
	if err != nil {
		return 0, 0, err
	}
	if eof || st >= size {
		return size, size, nil
	}
	e, _, err := t.Seek(ctx, ino, st, fs.SeekHole)
	if err != nil {
		return 0, 0, err
	}
	return st, max(min(e, size), st+1), nil
}
