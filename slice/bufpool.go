package slice

import (
	"math/bits"
	"sync"
	"unsafe"
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

// alignedPool holds MaxSize-rounded-up buffers aligned to directAlign, the
// staging buffers of O_DIRECT writes whose data is not aligned. Reused, so
// the pages stay warm (a fresh 1 MiB buffer costs page faults every time).
var alignedPool sync.Pool

// getAligned returns a buffer of capacity alignUp(MaxSize) whose first byte
// is directAlign-aligned. Return it with putAligned.
func getAligned() *[]byte {
	if v := alignedPool.Get(); v != nil {
		return v.(*[]byte)
	}
	n := int(alignUp(MaxSize))
	raw := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(&raw[0]))%directAlign)) % directAlign
	b := raw[skip : skip+n : skip+n]
	return &b
}

func putAligned(b *[]byte) {
	*b = (*b)[:cap(*b)]
	alignedPool.Put(b)
}
