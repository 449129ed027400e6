package slice

import (
	"math/bits"
	"sync"

	"github.com/txnfs/txnfs/internal/hugepage"
)

// Scratch buffers for partial reads, pooled in power-of-two size classes
// from 4 KiB to MaxSize so a 4 KiB read does not pin a 1 MiB buffer.
const (
	minClassShift = 12
	maxClassShift = 20 // log2(MaxSize)
)

var bufPools [maxClassShift - minClassShift + 1]sync.Pool

func sizeClass(n int) int {
	s := bits.Len(uint(n - 1))
	return max(s, minClassShift) - minClassShift
}

// getBuf returns a buffer of length n (1..MaxSize). Return it with putBuf.
func getBuf(n int) *[]byte {
	c := sizeClass(n)
	if v := bufPools[c].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(c+minClassShift))
	return &b
}

func putBuf(b *[]byte) {
	bufPools[sizeClass(cap(*b))].Put(b)
}

// newAligned returns a buffer of length and capacity alignUp(MaxSize)
// whose first byte is directAlign-aligned: an O_DIRECT staging buffer. It
// lies on a transparent huge page where the system allows, so an O_DIRECT
// write of it pins one page and sends one DMA segment instead of 256 (on
// this project's VM: CPU per 1 MiB pwrite -47%, wall -35%; see
// internal/hugepage).
func newAligned() *[]byte {
	b := hugepage.Aligned(int(alignUp(MaxSize)))
	return &b
}
