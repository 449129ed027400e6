package vnfs

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestDirHandlesDropModel drops random paths from a cache of random
// directory paths and compares with a plain map dropped by prefix scan;
// the ancestor counts must come back to empty when the cache does.
func TestDirHandlesDropModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	d := newDirHandles(time.Hour)
	model := map[string]bool{}
	randPath := func() string {
		parts := make([]string, 1+r.IntN(4))
		for i := range parts {
			parts[i] = fmt.Sprintf("d%d", r.IntN(3))
		}
		return strings.Join(parts, "/")
	}
	for i := 0; i < 5000; i++ {
		p := randPath()
		if r.IntN(3) > 0 {
			d.put(p, []byte{1})
			model[p] = true
		} else {
			d.drop(p)
			for k := range model {
				if k == p || strings.HasPrefix(k, p+"/") {
					delete(model, k)
				}
			}
		}
		if d.len() != len(model) {
			t.Fatalf("seed %d step %d: %d entries, model %d", seed, i, d.len(), len(model))
		}
	}
	for k := range model {
		if _, _, ok := d.nearest(k); !ok {
			t.Fatalf("seed %d: %q missing", seed, k)
		}
	}
	d.drop("d0", "d1", "d2")
	if d.len() != 0 || len(d.below) != 0 {
		t.Fatalf("seed %d: after dropping every root: %d entries, %d ancestor counts", seed, d.len(), len(d.below))
	}
}

// BenchmarkDirHandlesDropFile: dropping a removed file's path (nothing
// cached below it) must not scan the cache.
func BenchmarkDirHandlesDropFile(b *testing.B) {
	d := newDirHandles(time.Hour)
	for i := 0; i < 350; i++ {
		d.put(fmt.Sprintf("t/d%d/e%d", i%20, i), []byte{1})
	}
	for i := 0; b.Loop(); i++ {
		d.drop(fmt.Sprintf("t/d%d/e%d/file%d", i%20, i%350, i))
	}
}
