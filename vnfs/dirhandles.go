package vnfs

import (
	"path"
	"strings"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// This file is the directory-handle cache (docs/vnfs.md, "Directory
// handles"): the file handles of directories this client listed (READDIR
// with FATTR4_FILEHANDLE) or created (CREATE; GETFH), by path, so that the
// planner reaches a known directory with one PUTFH instead of a PUTFH of
// the root and a LOOKUP per component. It is the vectorized client's
// dentry cache: the kernel client (and the scalar baseline) keep
// directory handles too, the kernel for acdirmin..acdirmax (30–60 s).
//
// An entry is trusted for Config.DirCacheTTL after it was learnt. This
// client's own REMOVE and RENAME drop the path and everything below it
// when they are planned (so later items of the same vector already
// resolve by LOOKUP) and again when the call returns. A directory that
// another client renames within the TTL is still reached under its old
// path, as with the kernel's dentry cache; one it removes fails with
// NFS4ERR_STALE (ESTALE), which also empties the cache. Transactional
// views neither use nor fill it: a transaction's path resolution must be
// LOOKUPs in its read set.

// dirCacheMax bounds the entries; the cache is emptied when it is full.
const dirCacheMax = 1 << 16

// defaultDirCacheTTL is the kernel's acdirmin.
const defaultDirCacheTTL = 30 * time.Second

type dirHandle struct {
	fh []byte
	at time.Time
}

// dirHandles maps cleaned paths (relative to the FS root, never "") to
// directory file handles.
type dirHandles struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[string]dirHandle
	// below counts, for each proper ancestor of a key of m, the keys under
	// it, so that dropping a path with nothing cached at or below it (a
	// removed file: the common case) costs its depth, not the cache size.
	below map[string]int
}

func newDirHandles(ttl time.Duration) *dirHandles {
	return &dirHandles{ttl: ttl, now: time.Now, m: map[string]dirHandle{}, below: map[string]int{}}
}

// ancestors calls fn for each proper ancestor of the cleaned path p.
func ancestors(p string, fn func(a string)) {
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p, '/') {
		p = p[:i]
		fn(p)
	}
}

// set adds or replaces m[p]; d.mu is held.
func (d *dirHandles) set(p string, e dirHandle) {
	if _, ok := d.m[p]; !ok {
		ancestors(p, func(a string) { d.below[a]++ })
	}
	d.m[p] = e
}

// remove deletes m[p] if present; d.mu is held.
func (d *dirHandles) remove(p string) {
	if _, ok := d.m[p]; !ok {
		return
	}
	delete(d.m, p)
	ancestors(p, func(a string) {
		if d.below[a]--; d.below[a] <= 0 {
			delete(d.below, a)
		}
	})
}

// reset empties the cache; d.mu is held.
func (d *dirHandles) reset() {
	clear(d.m)
	clear(d.below)
}

// put records fh as the handle of the directory at p.
func (d *dirHandles) put(p string, fh []byte) {
	if d == nil || p == "" || len(fh) == 0 {
		return
	}
	fh = append([]byte(nil), fh...)
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.m) >= dirCacheMax {
		d.reset()
	}
	d.set(p, dirHandle{fh: fh, at: d.now()})
}

// nearest returns the handle of dir or of its deepest cached ancestor
// (anc), if any is fresh.
func (d *dirHandles) nearest(dir string) (fh []byte, anc string, ok bool) {
	if d == nil {
		return nil, "", false
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for p := dir; p != ""; {
		if e, found := d.m[p]; found {
			if now.Sub(e.at) < d.ttl {
				return e.fh, p, true
			}
			d.remove(p)
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return nil, "", false
}

// drop forgets the cleaned paths ps and everything below them.
func (d *dirHandles) drop(ps ...string) {
	if d == nil || len(ps) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range ps {
		if p == "" {
			d.reset()
			return
		}
		d.remove(p)
		if d.below[p] == 0 {
			continue
		}
		prefix := p + "/"
		for k := range d.m {
			if strings.HasPrefix(k, prefix) {
				d.remove(k)
			}
		}
	}
}

func (d *dirHandles) clear() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.reset()
	d.mu.Unlock()
}

func (d *dirHandles) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// dirs returns the directory-handle cache this view may use and fill, or
// nil (disabled, or a transactional view).
func (n *nfsFS) dirs() *dirHandles {
	if n.txn || !n.join.IsZero() {
		return nil
	}
	return n.sh.dirs
}

// dropDirs forgets the handles of the given (uncleaned) paths and below.
func (n *nfsFS) dropDirs(paths ...string) {
	d := n.sh.dirs
	if d == nil {
		return
	}
	cs := make([]string, 0, len(paths))
	for _, p := range paths {
		if c, err := cleanPath(p); err == nil {
			cs = append(cs, c)
		}
	}
	d.drop(cs...)
}

// staleHandle reports whether st says a file handle is no longer valid.
func staleHandle(st nfsv4.Nfsstat4) bool {
	return st == nfsv4.NFS4ERR_STALE || st == nfsv4.NFS4ERR_FHEXPIRED || st == nfsv4.NFS4ERR_BADHANDLE
}

// joinPath joins a cleaned directory path and a name.
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return path.Join(dir, name)
}
