package bufpool

import "testing"

// TestClasses: a buffer comes from the smallest class that holds it, at
// least Min and at most Max (also when Max is not a power of two); Put
// files it under the class Get takes it from; larger buffers are not
// pooled.
func TestClasses(t *testing.T) {
	for _, max := range []int{1 << 20, 3 << 19, 4096, 8 << 20} {
		p := New(4096, max)
		for _, n := range []int{0, 1, 4096, 4097, 12 << 10, 64 << 10, 1<<20 - 1, max} {
			if n > max {
				continue
			}
			b := p.Get(n)
			if len(*b) != n || cap(*b) < n || cap(*b) > max || cap(*b) < 4096 && max >= 4096 {
				t.Fatalf("max %d: Get(%d) has len %d cap %d", max, n, len(*b), cap(*b))
			}
			if n > 4096 && cap(*b) >= 2*n {
				t.Fatalf("max %d: Get(%d) has cap %d, not the smallest class", max, n, cap(*b))
			}
			p.Put(b)
			k, _ := p.Class(n)
			b2 := p.Get(n)
			if k2, _ := p.Class(cap(*b2)); k2 != k {
				t.Fatalf("max %d: buffer for %d bytes came from class %d, want %d", max, n, k2, k)
			}
		}
		if k, size := p.Class(max + 1); k != -1 || size != max+1 {
			t.Fatalf("max %d: Class(max+1) = %d, %d", max, k, size)
		}
		big := p.Get(max + 1)
		p.Put(big) // not pooled: no panic, no effect
		if len(*big) != max+1 {
			t.Fatalf("Get(max+1) has len %d", len(*big))
		}
	}
}
