package slice

import (
	"math/rand"
	"testing"
)

func TestCopyChecksum(t *testing.T) {
	seed := rand.Int63()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewSource(seed))
	for _, n := range []int{0, 1, copyChunk - 1, copyChunk, copyChunk + 1, 3*copyChunk + 17, MaxSize} {
		src := make([]byte, n)
		r.Read(src)
		dst := make([]byte, n+5)
		if got, want := copyChecksum(dst, src), Checksum(src); got != want {
			t.Fatalf("n=%d: crc %08x, want %08x", n, got, want)
		}
		if string(dst[:n]) != string(src) {
			t.Fatalf("n=%d: copy differs", n)
		}
	}
}

// BenchmarkStage compares the staging copy of a 1 MiB direct put followed
// by its CRC (two passes over the caller's buffer) with copyChecksum. The
// sources are 16 buffers of 1 MiB, cycled (mostly not in the CPU cache,
// like an RPC payload).
func BenchmarkStage(b *testing.B) {
	const n = MaxSize
	srcs := make([][]byte, 16)
	for i := range srcs {
		srcs[i] = make([]byte, n)
		rand.Read(srcs[i])
	}
	dst := *newAligned()
	b.Run("copy-then-crc", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; b.Loop(); i++ {
			src := srcs[i%len(srcs)]
			_ = Checksum(src)
			copy(dst, src)
		}
	})
	b.Run("fused", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; b.Loop(); i++ {
			_ = copyChecksum(dst, srcs[i%len(srcs)])
		}
	})
}
