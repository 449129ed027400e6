package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/txnfs/txnfs/slice"
)

// Running out of space (docs/engine.md "Running out of space"). The
// metadata store must never meet ENOSPC itself: pebble retries a failed
// flush forever (measured: a spinning flush loop at run time, and an Open
// that never returns on a full file system). So operations that make the
// file system grow — data writes, creates, links, xattrs — are admitted
// only while the backing file system keeps Config.Reserve bytes free, and
// fail with ErrNoSpace otherwise; operations that shrink it (remove,
// truncate, rename, the collector) always run, so a full file system can
// be emptied. Before it refuses, the guard gives the slice store's reuse
// pool back to the OS (slice.DrainPool): freed space kept for reuse must
// not make the file system look full.

// recordGrowth is what a create, link or xattr is admitted for: about one
// metadata record and its index entries.
const recordGrowth = 4096

// spaceRecheck bounds how long a free-space reading is trusted.
const spaceRecheck = time.Second

// spaceGuard admits growth against the free space Config.Capacity
// reports. A reading is reused for spaceRecheck, less the bytes admitted
// since; it is taken again sooner when those bytes would cross into the
// reserve.
type spaceGuard struct {
	reserve  uint64
	capacity func() (total, free uint64, err error)
	slices   slice.Store
	short    func() // called when growth is refused (wakes the collector)

	mu    sync.Mutex
	free  uint64 // at the last reading
	spent uint64 // admitted since the last reading
	at    time.Time
}

func newSpaceGuard(cfg Config) *spaceGuard {
	if cfg.Reserve == 0 || cfg.Capacity == nil {
		return nil
	}
	return &spaceGuard{reserve: cfg.Reserve, capacity: cfg.Capacity, slices: cfg.Slices}
}

// admit admits n bytes of growth or returns ErrNoSpace. A nil guard (no
// reserve configured) admits everything, as does a failing Capacity: the
// guard protects the metadata store, it does not fail writes on its own
// errors.
func (g *spaceGuard) admit(ctx context.Context, n uint64) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) > spaceRecheck || !g.fits(n) {
		g.read()
		if !g.fits(n) {
			if _, err := slice.DrainPool(ctx, g.slices); err == nil {
				g.read()
			}
		}
	}
	if !g.fits(n) {
		if g.short != nil {
			g.short()
		}
		return fmt.Errorf("%w: %d bytes free on the data directory's file system, %d of them reserved for metadata (Reserve)",
			ErrNoSpace, g.free-min(g.free, g.spent), g.reserve)
	}
	g.spent += n
	return nil
}

func (g *spaceGuard) fits(n uint64) bool {
	return g.spent+n+g.reserve <= g.free
}

func (g *spaceGuard) read() {
	_, free, err := g.capacity()
	g.at, g.spent = time.Now(), 0
	if err != nil {
		g.free = ^uint64(0) // admit: see admit
		return
	}
	g.free = free
}

// isNoSpace reports errors that mean the file system (or a quota) is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// storeErr classifies an error of the slice or kv store that is not
// otherwise classified: ErrNoSpace for a full file system, else ErrIO.
func storeErr(what string, err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("%w: %s: %v", ErrNoSpace, what, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrIO, what, err)
}
