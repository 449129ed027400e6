package vnfs

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"path"
	"sync"
	"sync/atomic"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// This file is the client data cache of Config.Cache (docs/vnfs.md,
// "Data cache").
//
// An entry holds one extent of one file's data, keyed by the file handle,
// with the attributes it was read under: change, size and fileid, taken by
// a GETATTR placed after the OPEN and before the READs of the COMPOUND that
// read it. Because the GETATTR precedes the READs, the data is at least as
// new as the attributes; the change attribute only grows, so whenever the
// server later reports the same change (and fileid), no modification
// happened since the GETATTR and the data is exactly the file's content.
//
// A read that the cache covers is sent as PUTFH dir; LOOKUP name (or PUTFH
// of a descriptor's handle); VERIFY(change, size, fileid = cached): no
// OPEN, READ or CLOSE, no data moved. VERIFY lets the COMPOUND go on when
// the file is unchanged; when it changed (another client wrote, truncated
// or renamed another file over the name) it stops the COMPOUND with
// NFS4ERR_NOT_SAME, and VRead sends the item again as a real read together
// with the rest of the vector, whose cached items are then probed with
// GETATTR (which does not stop the COMPOUND) and the changed ones read at
// the end (see cachedRead). Every read therefore revalidates against the
// server (close-to-open and more: no time-based trust), and a vector costs
// the COMPOUNDs of its uncached form plus at most two: one COMPOUND when
// all hit, two with one miss, three with more.
//
// A path is mapped to the handle it last resolved to only as a hint: the
// LOOKUP resolves the name on the server and VERIFY checks the fileid, so a
// stale mapping costs a miss, never wrong data. Writes through this client
// drop the entries of the files they touch (to free memory early; the
// VERIFY would catch them anyway).

// cacheAttrMask is what a cache entry is verified against.
var cacheAttrMask = client.MakeBitmap(nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_FILEID)

// cacheAttrs are the attributes an entry was read under.
type cacheAttrs struct {
	change, size, fileid uint64
}

// fattr encodes a as the VERIFY argument (values in attribute-number
// order: change 3, size 4, fileid 20).
func (a cacheAttrs) fattr() nfsv4.Fattr4 {
	var b bytes.Buffer
	nfsv4.WriteFattr4Change(&b, a.change)
	nfsv4.WriteFattr4Size(&b, a.size)
	nfsv4.WriteFattr4Fileid(&b, a.fileid)
	return nfsv4.Fattr4{Attrmask: cacheAttrMask, AttrVals: b.Bytes()}
}

// entryOverhead is what an entry is charged besides its data and handle
// (so that many empty files cannot grow the cache without bound).
const entryOverhead = 128

// cacheEntry is the cached extent [off, off+len(data)) of one file.
type cacheEntry struct {
	fh    string
	attrs cacheAttrs
	off   uint64
	data  []byte   // never modified once stored (snapshots share it)
	paths []string // path-index entries pointing here
}

func (e *cacheEntry) cost() int64 { return int64(len(e.data) + len(e.fh) + entryOverhead) }

// CacheStats counts data-cache activity (see CacheStatsOf).
type CacheStats struct {
	Hits      uint64 // reads served from the cache after a successful VERIFY
	Misses    uint64 // VERIFYs that failed: the file had changed
	Fills     uint64 // extents stored
	Evictions uint64 // entries evicted to stay within the budget
	Bytes     int64  // bytes charged to the budget: data plus entryOverhead per entry
	Entries   int    // files held
}

// CacheStatsOf returns the data-cache counters of f, if f is an NFS FS
// (or a view of one) with Config.Cache set.
func CacheStatsOf(f FS) (CacheStats, bool) {
	n, ok := f.(*nfsFS)
	if !ok || n.sh.cache == nil {
		return CacheStats{}, false
	}
	return n.sh.cache.stats(), true
}

// dataCache is an LRU cache of file extents within a byte budget. It is
// safe for concurrent use.
type dataCache struct {
	budget int64

	mu     sync.Mutex
	used   int64
	lru    list.List                // of *cacheEntry, most recently used first
	byFH   map[string]*list.Element // file handle -> entry
	byPath map[string]string        // path -> file handle (a hint)

	hits, misses, fills, evictions atomic.Uint64
	// disabled is set when the server fails a VERIFY other than with
	// NOT_SAME (it cannot verify these attributes): no more hits.
	disabled atomic.Bool
}

func newDataCache(budget int64) *dataCache {
	return &dataCache{budget: budget, byFH: map[string]*list.Element{}, byPath: map[string]string{}}
}

func (c *dataCache) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Fills: c.fills.Load(),
		Evictions: c.evictions.Load(), Bytes: c.used, Entries: len(c.byFH)}
}

// cacheHit is a snapshot of an entry that covers a read.
type cacheHit struct {
	fh    string
	attrs cacheAttrs
	off   uint64
	data  []byte
}

// serve copies the snapshot's answer to io (offset io.Offset, count
// len(io.Data)) and sets N and EOF as a READ at the verified size would.
func (h *cacheHit) serve(io *IO) {
	o, size := io.Offset, h.attrs.size
	io.N, io.EOF = 0, true
	if o < size {
		end := min(o+uint64(len(io.Data)), size)
		io.N = copy(io.Data, h.data[o-h.off:end-h.off])
		io.EOF = o+uint64(len(io.Data)) >= size
	}
}

// lookup returns a snapshot of the entry for fh (or, if fh is nil, for
// the handle path last resolved to) if it covers a read of count bytes at
// off.
func (c *dataCache) lookup(fh []byte, path string, off uint64, count int) (*cacheHit, bool) {
	if count == 0 || c.disabled.Load() {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := string(fh)
	if fh == nil {
		k, ok := c.byPath[path]
		if !ok {
			return nil, false
		}
		key = k
	}
	el, ok := c.byFH[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if off < e.attrs.size {
		end := min(off+uint64(count), e.attrs.size)
		if off < e.off || end > e.off+uint64(len(e.data)) {
			return nil, false
		}
	}
	c.lru.MoveToFront(el)
	return &cacheHit{fh: e.fh, attrs: e.attrs, off: e.off, data: e.data}, true
}

// fill stores data read at off from the file fh (reached by path, if not
// ""), read under attrs. An extent adjacent to or overlapping the cached
// one of the same file and attributes is merged with it; otherwise it
// replaces it.
func (c *dataCache) fill(fh []byte, path string, attrs cacheAttrs, off uint64, data []byte) {
	if len(fh) == 0 || int64(len(data)+len(fh)+entryOverhead) > c.budget || off+uint64(len(data)) > attrs.size {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := string(fh)
	e := &cacheEntry{fh: key, attrs: attrs, off: off}
	if el, ok := c.byFH[key]; ok {
		old := el.Value.(*cacheEntry)
		oldEnd, end := old.off+uint64(len(old.data)), off+uint64(len(data))
		if old.attrs == attrs && off <= oldEnd && old.off <= end {
			lo, hi := min(off, old.off), max(end, oldEnd)
			merged := make([]byte, hi-lo)
			copy(merged[old.off-lo:], old.data)
			copy(merged[off-lo:], data)
			e.off, e.data = lo, merged
		}
		e.paths = old.paths
		c.removeLocked(el)
	}
	if e.data == nil {
		e.data = append([]byte{}, data...)
	}
	if e.cost() > c.budget {
		return
	}
	if path != "" {
		if old, ok := c.byPath[path]; ok && old != key {
			if el, ok := c.byFH[old]; ok {
				o := el.Value.(*cacheEntry)
				o.paths = removeString(o.paths, path)
			}
		}
		c.byPath[path] = key
		if !containsString(e.paths, path) {
			e.paths = append(e.paths, path)
		}
	}
	for _, p := range e.paths {
		c.byPath[p] = key
	}
	c.byFH[key] = c.lru.PushFront(e)
	c.used += e.cost()
	c.fills.Add(1)
	for c.used > c.budget {
		last := c.lru.Back()
		c.removeLocked(last)
		c.evictions.Add(1)
	}
}

// removeLocked drops an entry and the path-index entries pointing to it.
func (c *dataCache) removeLocked(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.byFH, e.fh)
	c.used -= e.cost()
	for _, p := range e.paths {
		if c.byPath[p] == e.fh {
			delete(c.byPath, p)
		}
	}
}

// dropFH forgets the file fh.
func (c *dataCache) dropFH(fh []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byFH[string(fh)]; ok {
		c.removeLocked(el)
	}
}

// dropPath forgets the file path last resolved to, and the mapping.
func (c *dataCache) dropPath(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, ok := c.byPath[path]
	if !ok {
		return
	}
	delete(c.byPath, path)
	if el, ok := c.byFH[key]; ok {
		c.removeLocked(el)
	}
}

func containsString(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func removeString(s []string, x string) []string {
	for i, y := range s {
		if y == x {
			return append(s[:i:i], s[i+1:]...)
		}
	}
	return s
}

// dropFiles forgets the files of a write-like call (by descriptor or by
// path) in n's cache, if any.
func (n *nfsFS) dropFiles(files ...File) {
	c := n.sh.cache
	if c == nil {
		return
	}
	for _, f := range files {
		if f.FD != 0 {
			if e, ok := n.fd(f.FD); ok {
				c.dropFH(e.fh)
			}
			continue
		}
		if p, err := cleanPath(f.Path); err == nil {
			c.dropPath(p)
		}
	}
}

// dropPaths is dropFiles for paths.
func (n *nfsFS) dropPaths(paths ...string) {
	if n.sh.cache == nil {
		return
	}
	for _, p := range paths {
		n.dropFiles(P(p))
	}
}

// recordAttrs is the handler of the GETATTR a filling read puts before
// its READs.
func (t *ioTask) recordAttrs(res nfsv4.NfsResop4) error {
	ok, isOK := res.(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK)
	if !isOK {
		return errBadReply
	}
	a, err := client.DecodeAttrs(ok.Resok4.ObjAttributes)
	if err != nil || !a.Mask.Has(nfsv4.FATTR4_CHANGE) || !a.Mask.Has(nfsv4.FATTR4_SIZE) || !a.Mask.Has(nfsv4.FATTR4_FILEID) {
		t.fillBad = true // a server without these attributes: nothing to verify against
		return nil
	}
	t.fillAttrs = append(t.fillAttrs, cacheAttrs{change: a.Change, size: a.Size, fileid: a.FileID})
	return nil
}

// fillCache stores what a filling read got, if it is complete and
// consistent: all its COMPOUNDs saw the same attributes, and the data
// ends where the file does if the read reached the end.
func (t *ioTask) fillCache(c *dataCache) {
	io := t.io
	if !t.fill || t.fillBad || len(t.fillAttrs) == 0 || (io.N < len(io.Data) && !io.EOF) {
		return
	}
	a := t.fillAttrs[0]
	for _, b := range t.fillAttrs[1:] {
		if b != a {
			return
		}
	}
	end := t.base + uint64(io.N)
	if (io.EOF && end != a.size) || end > a.size {
		return // the file changed while it was read
	}
	fh, p := t.fillFH, ""
	if t.fd != nil {
		fh = t.fd.fh
	} else {
		p = path.Join(t.dir, t.name)
	}
	c.fill(fh, p, a, t.base, io.Data[:io.N])
}

// cacheTask is a read served from the cache once the server verified
// that the file is unchanged: LOOKUP (or PUTFH); VERIFY.
type cacheTask struct {
	io        *IO
	dir, name string
	fd        *fdEntry
	hit       *cacheHit
	// probe: GETATTR instead of VERIFY; a changed file is marked stale
	// (and read later) instead of stopping the COMPOUND.
	probe  bool
	served bool
	stale  bool
}

func (t *cacheTask) navDir() (string, bool) {
	if t.fd != nil {
		return "", false
	}
	return t.dir, true
}

func (t *cacheTask) emit(b *batch, ti int) emitResult {
	m := b.mark()
	if t.fd != nil {
		b.putFH(ti, t.fd.fh, t.fd.path)
	} else {
		b.cd(ti, t.dir)
		b.keepDir(ti, t.dir)
		b.lookup(ti, t.name)
	}
	if t.probe {
		b.cp.GetAttr(cacheAttrMask)
		b.track(ti, respAttr, func(res nfsv4.NfsResop4) error {
			var r ioTask
			if err := r.recordAttrs(res); err != nil {
				return err
			}
			if r.fillBad || r.fillAttrs[0] != t.hit.attrs {
				t.stale = true
				return nil
			}
			t.hit.serve(t.io)
			t.served = true
			return nil
		})
	} else {
		b.cp.Verify(t.hit.attrs.fattr())
		b.track(ti, respSmall, func(nfsv4.NfsResop4) error {
			t.hit.serve(t.io)
			t.served = true
			return nil
		})
	}
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	return emitDone
}

// cachedRead is VRead with the data cache.
//
// First pass: items the cache covers are cacheTasks with VERIFY, the
// others filling reads; when nothing changed this is the whole call. A
// VERIFY that fails stops its COMPOUND; that is a miss, not a failure of
// the item. The vector is then sent again from that item, which is now a
// real read, and the later cached items are probed with GETATTR instead
// of VERIFY (a probe does not stop the COMPOUND); the ones found changed
// are read, with one more vector, at the end. So a call costs the
// COMPOUNDs of its uncached form plus at most two (one for a single miss).
func (n *nfsFS) cachedRead(ctx context.Context, ios []IO) (int, error) {
	c := n.sh.cache
	base, probe := 0, false
	for {
		sub := ios[base:]
		tasks, err := n.ioTasks(sub, false)
		if err != nil {
			return base, shift(err, base)
		}
		for i, tk := range tasks {
			t := tk.(*ioTask)
			if len(sub[i].Data) == 0 {
				continue
			}
			if t.fd != nil && t.fd.flags&OpenWrite != 0 && t.fd.flags&OpenRead == 0 {
				continue // a write-only descriptor: the READ must fail as without a cache
			}
			if !(i == 0 && probe) {
				if hit, ok := c.lookup(t.cacheKey()); ok {
					tasks[i] = &cacheTask{io: &sub[i], dir: t.dir, name: t.name, fd: t.fd, hit: hit, probe: probe}
					continue
				}
			}
			t.fill = true
		}
		done, err := n.readTasks(ctx, sub, tasks, func(done int) { afterCachedRun(c, tasks[:done]) })
		if !probe {
			if k, ok := n.cacheMiss(err, tasks); ok {
				base += k
				probe = true
				continue
			}
			if err != nil {
				return base + done, shift(err, base)
			}
			return len(ios), nil
		}
		// Read the items the probes found changed.
		var stale []int
		for i, tk := range tasks[:done] {
			if t, ok := tk.(*cacheTask); ok && t.stale {
				stale = append(stale, i)
				c.misses.Add(1)
				c.dropFH([]byte(t.hit.fh))
			}
		}
		if len(stale) > 0 {
			more := make([]IO, len(stale))
			for j, i := range stale {
				more[j] = IO{File: sub[i].File, Offset: sub[i].Offset, Data: sub[i].Data}
			}
			mt, err2 := n.ioTasks(more, false)
			if err2 != nil {
				return 0, err2 // cannot happen: the same items passed above
			}
			for _, t := range mt {
				t.(*ioTask).fill = true
			}
			k, err2 := n.readTasks(ctx, more, mt, func(done int) { afterCachedRun(c, mt[:done]) })
			for j, i := range stale {
				sub[i].N, sub[i].EOF = more[j].N, more[j].EOF
			}
			if err2 != nil {
				i, err2 := reindex(err2, stale, k)
				for x := i + 1; x < len(sub); x++ {
					sub[x].N, sub[x].EOF = 0, false
				}
				return base + i, shift(err2, base)
			}
		}
		if err != nil {
			return base + done, shift(err, base)
		}
		return len(ios), nil
	}
}

// cacheKey returns what the cache looks a read up by: the descriptor's
// file handle, or the path; and the range.
func (t *ioTask) cacheKey() (fh []byte, p string, off uint64, count int) {
	if t.fd != nil {
		fh = t.fd.fh
	} else {
		p = path.Join(t.dir, t.name)
	}
	return fh, p, t.io.Offset, len(t.io.Data)
}

// afterCachedRun fills the cache from the filling reads among done tasks
// and counts the hits.
func afterCachedRun(c *dataCache, done []task) {
	for _, tk := range done {
		switch t := tk.(type) {
		case *ioTask:
			t.fillCache(c)
		case *cacheTask:
			if t.served {
				c.hits.Add(1)
			}
		}
	}
}

// cacheMiss reports whether err is a failed VERIFY of a cacheTask, and
// its index. Any status but NOT_SAME means the server cannot verify these
// attributes: the cache is disabled.
func (n *nfsFS) cacheMiss(err error, tasks []task) (int, bool) {
	var e *Error
	var se *client.StatusError
	if err == nil || !errors.As(err, &e) || e.Index >= len(tasks) || !errors.As(err, &se) || se.Op != nfsv4.OP_VERIFY {
		return 0, false
	}
	t, ok := tasks[e.Index].(*cacheTask)
	if !ok {
		return 0, false
	}
	c := n.sh.cache
	c.misses.Add(1)
	if se.Status != nfsv4.NFS4ERR_NOT_SAME {
		n.cfg.Logger.Debug("vnfs: VERIFY failed; data cache disabled", "status", client.StatusName(se.Status))
		c.disabled.Store(true)
	}
	c.dropFH([]byte(t.hit.fh))
	return e.Index, true
}
