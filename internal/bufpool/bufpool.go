// Package bufpool pools byte buffers in power-of-two capacity classes, so
// that a small request neither holds nor, after a garbage collection
// emptied the pool, allocates and zeroes a buffer sized for the largest
// one. The slice store's read scratch buffers, the RPC layer's record
// buffers and the NFS server's READ buffers use it.
package bufpool

import (
	"math/bits"
	"sync"
)

// Pool holds buffers of capacity Min<<k for each class k, the last class
// capped at Max (which need not be a power of two). Buffers larger than
// Max are allocated per Get and never pooled. Safe for concurrent use.
type Pool struct {
	minShift int
	max      int
	classes  []sync.Pool
}

// New returns a pool of classes from min (rounded up to a power of two)
// to max bytes.
func New(min, max int) *Pool {
	s := bits.Len(uint(min - 1))
	n := 1
	for 1<<(s+n-1) < max {
		n++
	}
	return &Pool{minShift: s, max: max, classes: make([]sync.Pool, n)}
}

// Class returns the class of an n-byte buffer and that class's capacity,
// or -1 if n exceeds Max.
func (p *Pool) Class(n int) (int, int) {
	if n > p.max {
		return -1, n
	}
	k := max(bits.Len(uint(max(n, 1)-1)), p.minShift) - p.minShift
	return k, min(1<<(p.minShift+k), p.max)
}

// Get returns a buffer of length n (contents undefined). Give it back with
// Put once nothing references it.
func (p *Pool) Get(n int) *[]byte {
	k, size := p.Class(n)
	if k >= 0 {
		if b, ok := p.classes[k].Get().(*[]byte); ok {
			*b = (*b)[:n]
			return b
		}
	}
	b := make([]byte, n, size)
	return &b
}

// Put returns b to its class if its capacity is exactly a class's (a
// buffer Get allocated); others are left to the garbage collector.
func (p *Pool) Put(b *[]byte) {
	if k, size := p.Class(cap(*b)); k >= 0 && cap(*b) == size {
		p.classes[k].Put(b)
	}
}
