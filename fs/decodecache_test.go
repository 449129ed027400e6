package fs

import (
	"fmt"
	"testing"
)

// TestDecodeCache: a value is returned only for identical bytes, and the
// cache stays within its byte bound.
func TestDecodeCache(t *testing.T) {
	var c decodeCache
	c.put([]byte("k"), []byte("v1"), 1)
	if v, ok := c.get([]byte("k"), []byte("v1")); !ok || v != 1 {
		t.Fatalf("get after put: %v %v", v, ok)
	}
	if _, ok := c.get([]byte("k"), []byte("v2")); ok {
		t.Fatal("hit for different bytes under the same key")
	}
	if _, ok := c.get([]byte("other"), []byte("v1")); ok {
		t.Fatal("hit for another key")
	}
	c.put([]byte("k"), []byte("v2"), 2)
	if v, ok := c.get([]byte("k"), []byte("v2")); !ok || v != 2 {
		t.Fatalf("get after replacing: %v %v", v, ok)
	}
	raw := make([]byte, 64<<10)
	for i := 0; i < 4*decodeCacheMaxBytes/len(raw); i++ {
		c.put([]byte(fmt.Sprint("key", i)), raw, i)
		if c.bytes > decodeCacheMaxBytes {
			t.Fatalf("after %d puts the cache holds %d bytes, bound %d", i+1, c.bytes, decodeCacheMaxBytes)
		}
	}
	total := 0
	for k, e := range c.m {
		total += len(k) + len(e.raw) + decodeCacheEntryOverhead
	}
	if total != c.bytes {
		t.Fatalf("byte count %d, entries add up to %d", c.bytes, total)
	}
}
