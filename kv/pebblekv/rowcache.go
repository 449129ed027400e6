package pebblekv

import (
	"sync"

	"github.com/txnfs/txnfs/kv/internal/occ"
)

// rowCache keeps recently read and written values (and misses) by key, so
// that a point read of a key nobody wrote since does not seek Pebble again
// (a seek costs 0.2–4 µs; the inode and entry reads of REMOVE, READ and
// READDIR were 10–30% of the tree workloads' CPU, docs/vnfs.md "Trees,
// session 8").
//
// An entry (value, from) states: the key's value is value in every
// committed state from sequence from to the present. Two rules keep that
// true:
//
//   - every commit replaces (or drops) the entries of all the keys it
//     writes, under the commit mutex, before Pebble applies it (update);
//     so while an entry is present, no commit that wrote its key after
//     from has been applied;
//   - a value read from a snapshot is inserted with from = the snapshot's
//     sequence only if no commit after that sequence has passed update
//     (last <= seq): then the snapshot holds exactly the commits up to
//     seq, and any later writer of the key will replace the entry (fill).
//
// A transaction whose snapshot holds exactly the commits up to seq may
// use an entry with from <= seq: no commit in (from, now] wrote the key,
// and its snapshot lies in that range. A shared read-only snapshot may hold
// more commits than its sequence counts, but only commits applied before
// the lookup, which replaced the entries of their keys before applying.
// Reads served from the cache are recorded in the read set like any other,
// so validation is unchanged; the cache only changes where a snapshot's
// value comes from, never which value it is.
type rowCache struct {
	mu    sync.Mutex
	m     map[string]rowEntry
	bytes int
	max   int
	// last is the sequence of the last commit that passed update.
	last uint64
}

// rowEntry is a cached value; absent records that the key has none.
// value is never modified once cached (callers get copies).
type rowEntry struct {
	value  []byte
	absent bool
	from   uint64
}

// rowEntryOverhead approximates an entry's memory beyond its key and value
// bytes (map slot, string header, slice header).
const rowEntryOverhead = 64

// maxRowValue is the largest value the cache keeps: bigger ones are rare
// for the engine's point reads (inodes, entries, span records) and would
// evict many small ones.
const maxRowValue = 4 << 10

func newRowCache(maxBytes int) *rowCache {
	return &rowCache{m: map[string]rowEntry{}, max: maxBytes}
}

// get returns the cached value of key for a snapshot holding exactly the
// commits up to seq (or, for a shared read-only one, at least those and
// only commits applied before the call). The value is shared: the caller
// must copy it before handing it out.
func (c *rowCache) get(key []byte, seq uint64) (value []byte, absent, ok bool) {
	c.mu.Lock()
	e, found := c.m[string(key)]
	c.mu.Unlock()
	if !found || e.from > seq {
		return nil, false, false
	}
	return e.value, e.absent, true
}

// fill caches what a snapshot at seq read for key (value nil with absent
// for a miss). value must not be modified afterwards.
func (c *rowCache) fill(key, value []byte, absent bool, seq uint64) {
	if len(value) > maxRowValue {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last > seq {
		return // a later commit may have written key already
	}
	if _, ok := c.m[string(key)]; ok {
		return // same value (no commit since seq), older from
	}
	c.insertLocked(key, rowEntry{value: value, absent: absent, from: seq})
}

// update records that commit seq writes ents; the caller holds the commit
// mutex and calls it before the commit becomes visible. The values are
// kept by reference: the transaction's buffer is not modified after
// Commit.
func (c *rowCache) update(ents []occ.Entry, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = seq
	for _, e := range ents {
		if old, ok := c.m[string(e.Key)]; ok {
			c.bytes -= len(e.Key) + len(old.value) + rowEntryOverhead
			delete(c.m, string(e.Key))
		}
		if len(e.Value) > maxRowValue {
			continue
		}
		c.insertLocked(e.Key, rowEntry{value: e.Value, absent: e.Deleted, from: seq})
	}
}

// insertLocked adds an entry for a key not in the map, evicting arbitrary
// entries (Go's map order) while the cache is over its size.
func (c *rowCache) insertLocked(key []byte, e rowEntry) {
	c.m[string(key)] = e
	c.bytes += len(key) + len(e.value) + rowEntryOverhead
	if c.bytes <= c.max {
		return
	}
	for k, old := range c.m {
		if c.bytes <= c.max-c.max/8 {
			break
		}
		c.bytes -= len(k) + len(old.value) + rowEntryOverhead
		delete(c.m, k)
	}
}
