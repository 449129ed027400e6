package fs

import (
	"bytes"
	"sync"
)

// decodeCacheMaxBytes bounds the encoded bytes the decode cache holds.
const decodeCacheMaxBytes = 32 << 20

// decodeCacheEntryOverhead approximates an entry's memory beyond its
// encoded bytes (map entry, key, the decoded struct).
const decodeCacheEntryOverhead = 256

// decodeCache keeps decoded span records by kv key together with the
// encoded bytes they were decoded from: a transaction that reads a record
// whose bytes are identical to the cached ones takes the decoded value
// instead of decoding CBOR again (nfs4 ENGINE-REQUESTS 4). Byte equality
// makes it exact whatever snapshot the bytes came from, so it needs no
// invalidation. Cached values are shared and never modified (decodeSpan
// hands out copies; writeSpan stores new values). Inode records no longer
// go through it (session 8): meta decodes them without reflection in less
// time than a lookup in this map took.
type decodeCache struct {
	mu    sync.Mutex
	m     map[string]decodedEntry
	bytes int
}

type decodedEntry struct {
	raw []byte
	val any
}

// get returns the value decoded from raw under key, if cached.
func (c *decodeCache) get(key, raw []byte) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(key)]
	if !ok || !bytes.Equal(e.raw, raw) {
		return nil, false
	}
	return e.val, true
}

// put caches val as the decoding of raw under key. raw must not be
// modified afterwards (kv values returned by Get belong to the caller).
func (c *decodeCache) put(key, raw []byte, val any) {
	cost := len(raw) + len(key) + decodeCacheEntryOverhead
	if cost > decodeCacheMaxBytes/64 {
		return // huge records are rare; do not let one evict many
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]decodedEntry{}
	}
	if old, ok := c.m[string(key)]; ok {
		c.bytes -= len(old.raw) + len(key) + decodeCacheEntryOverhead
	}
	c.m[string(key)] = decodedEntry{raw: raw, val: val}
	c.bytes += cost
	if c.bytes > decodeCacheMaxBytes {
		// Evict arbitrary entries (map order) down to 3/4: cheap, and
		// good enough for a cache whose misses cost one decode.
		for k, e := range c.m {
			delete(c.m, k)
			c.bytes -= len(e.raw) + len(k) + decodeCacheEntryOverhead
			if c.bytes <= decodeCacheMaxBytes*3/4 {
				break
			}
		}
	}
}
