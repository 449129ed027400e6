package vnfs

import (
	"bytes"
	"testing"
)

// Unit tests of the cache's bookkeeping (the protocol side is tested
// against the servers in cache_test.go).

func TestDataCacheExtents(t *testing.T) {
	c := newDataCache(1 << 20)
	a := cacheAttrs{change: 7, size: 100, fileid: 3}
	data := make([]byte, 100)
	for i := range data {
		data[i] = byte(i)
	}
	c.fill([]byte("fh1"), "d/f", a, 10, data[10:30])
	if _, ok := c.lookup(nil, "d/f", 10, 20); !ok {
		t.Fatal("extent not found by path")
	}
	if _, ok := c.lookup([]byte("fh1"), "", 15, 10); !ok {
		t.Fatal("sub-range not found by handle")
	}
	if _, ok := c.lookup(nil, "d/f", 0, 20); ok {
		t.Fatal("range before the extent found")
	}
	if _, ok := c.lookup(nil, "d/f", 25, 10); ok {
		t.Fatal("range beyond the extent found")
	}
	// Adjacent extent under the same attributes: merged.
	c.fill([]byte("fh1"), "d/f", a, 30, data[30:])
	h, ok := c.lookup(nil, "d/f", 10, 200)
	if !ok {
		t.Fatal("merged extent does not cover 10..EOF")
	}
	io := IO{Offset: 10, Data: make([]byte, 200)}
	h.serve(&io)
	if io.N != 90 || !io.EOF || !bytes.Equal(io.Data[:90], data[10:]) {
		t.Fatalf("serve: N=%d EOF=%v", io.N, io.EOF)
	}
	io = IO{Offset: 100, Data: make([]byte, 5)}
	h.serve(&io)
	if io.N != 0 || !io.EOF {
		t.Fatalf("serve at EOF: N=%d EOF=%v", io.N, io.EOF)
	}
	// Other attributes: replaced, not merged.
	b := cacheAttrs{change: 8, size: 100, fileid: 3}
	c.fill([]byte("fh1"), "d/f", b, 0, data[:10])
	if _, ok := c.lookup(nil, "d/f", 10, 5); ok {
		t.Fatal("extent of the old version survived")
	}
	if s := c.stats(); s.Entries != 1 || s.Bytes != int64(10+3+entryOverhead) {
		t.Fatalf("stats %+v", s)
	}
	// A path now resolving to another handle moves the hint.
	c.fill([]byte("fh2"), "d/f", a, 0, data)
	if h, ok := c.lookup(nil, "d/f", 0, 10); !ok || h.fh != "fh2" {
		t.Fatal("path hint not moved")
	}
	c.dropPath("d/f")
	if s := c.stats(); s.Entries != 1 {
		t.Fatalf("dropPath: %+v", s)
	}
	c.dropFH([]byte("fh1"))
	if s := c.stats(); s.Entries != 0 || s.Bytes != 0 {
		t.Fatalf("dropFH: %+v", s)
	}
}

func TestDataCacheLRU(t *testing.T) {
	cost := int64(1000 + 3 + entryOverhead)
	c := newDataCache(3 * cost)
	a := cacheAttrs{change: 1, size: 1000, fileid: 1}
	d := make([]byte, 1000)
	for _, fh := range []string{"fh1", "fh2", "fh3"} {
		c.fill([]byte(fh), "", a, 0, d)
	}
	c.lookup([]byte("fh1"), "", 0, 1) // fh1 is now the most recent
	c.fill([]byte("fh4"), "", a, 0, d)
	if _, ok := c.lookup([]byte("fh2"), "", 0, 1); ok {
		t.Fatal("least recently used entry not evicted")
	}
	for _, fh := range []string{"fh1", "fh3", "fh4"} {
		if _, ok := c.lookup([]byte(fh), "", 0, 1); !ok {
			t.Fatalf("%s evicted", fh)
		}
	}
	if s := c.stats(); s.Bytes != 3*cost || s.Evictions != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Larger than the budget: not stored, nothing evicted.
	c.fill([]byte("big"), "", cacheAttrs{size: 1 << 20}, 0, make([]byte, 1<<20))
	if s := c.stats(); s.Entries != 3 || s.Evictions != 1 {
		t.Fatalf("after a fill over the budget: %+v", s)
	}
	// Data beyond the attributes' size is inconsistent: not stored.
	c.fill([]byte("bad"), "", cacheAttrs{size: 10}, 0, make([]byte, 20))
	if _, ok := c.lookup([]byte("bad"), "", 0, 1); ok {
		t.Fatal("inconsistent extent stored")
	}
}
