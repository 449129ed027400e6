package slice

import (
	"hash/crc32"
	"math/rand"
	"testing"
)

func TestCombineMatchesChecksumOfConcatenation(t *testing.T) {
	seed := rand.Int63()
	rng := rand.New(rand.NewSource(seed))
	tab := crc32.MakeTable(crc32.Castagnoli)
	for i := 0; i < 200; i++ {
		a := make([]byte, rng.Intn(5000)+1)
		b := make([]byte, rng.Intn(5000)+1)
		rng.Read(a)
		rng.Read(b)
		pa := Pointer{Backing: 3, Offset: 100, Length: uint32(len(a)), CRC: crc32.Checksum(a, tab)}
		pb := Pointer{Backing: 3, Offset: pa.End(), Length: uint32(len(b)), CRC: crc32.Checksum(b, tab)}
		got, ok := Combine(pa, pb)
		want := crc32.Checksum(append(append([]byte(nil), a...), b...), tab)
		if !ok || got.CRC != want || got.Length != pa.Length+pb.Length || got.Offset != 100 {
			t.Fatalf("seed %d: Combine = %v %v, want crc %08x", seed, got, ok, want)
		}
	}
	if _, ok := Combine(Pointer{Backing: 1, Offset: 0, Length: 10}, Pointer{Backing: 1, Offset: 11, Length: 5}); ok {
		t.Error("combined non-adjacent pointers")
	}
	if _, ok := Combine(Pointer{Backing: 1, Offset: 0, Length: 10}, Pointer{Backing: 2, Offset: 10, Length: 5}); ok {
		t.Error("combined pointers of different backing files")
	}
	if _, ok := Combine(Pointer{Backing: 1, Offset: 0, Length: MaxSize}, Pointer{Backing: 1, Offset: MaxSize, Length: 1}); ok {
		t.Error("combined past MaxSize")
	}
}

// TestCRC32CombineLong: long second parts exercise the high zero-byte
// operators (crcZeroOps).
func TestCRC32CombineLong(t *testing.T) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	a := []byte("head")
	for _, n := range []int{1, 255, 4096, 1<<20 + 7, 5<<20 + 12345} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		want := crc32.Checksum(append(append([]byte(nil), a...), b...), tab)
		if got := crc32Combine(crc32.Checksum(a, tab), crc32.Checksum(b, tab), int64(n)); got != want {
			t.Fatalf("len %d: crc32Combine = %08x, want %08x", n, got, want)
		}
	}
}
