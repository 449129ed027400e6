package slice

// Combine returns one pointer covering a followed by b when b starts in the
// same backing file exactly where a ends and the result is at most MaxSize
// long. Its CRC is computed from a's and b's without reading data, so
// compaction can merge the pointers of consecutive writes (WTF §2.7–2.8).
func Combine(a, b Pointer) (Pointer, bool) {
	if a.Backing != b.Backing || a.End() != b.Offset || uint64(a.Length)+uint64(b.Length) > MaxSize {
		return Pointer{}, false
	}
	return Pointer{Backing: a.Backing, Offset: a.Offset, Length: a.Length + b.Length,
		CRC: crc32Combine(a.CRC, b.CRC, int64(b.Length))}, true
}

// crc32Combine computes the CRC32C of A||B from crc(A), crc(B) and len(B)
// by applying len(B) zero bytes to crc(A) in GF(2) (zlib's crc32_combine),
// with the operators for 2^k zero bytes computed once (crcZeroOps): one
// matrix-vector product per set bit of len(B) instead of zlib's 32 per bit.
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	for k := 0; len2 != 0; k++ {
		if len2&1 != 0 {
			crc1 = gf2Times(&crcZeroOps[k], crc1)
		}
		len2 >>= 1
	}
	return crc1 ^ crc2
}

// crcZeroOps[k] is the GF(2) operator that appends 2^k zero bytes to a
// CRC32C.
var crcZeroOps = func() (ops [63][32]uint32) {
	var even, odd [32]uint32
	odd[0] = 0x82f63b78 // reflected Castagnoli polynomial: one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd)   // two zero bits
	gf2Square(&odd, &even)   // four zero bits
	gf2Square(&ops[0], &odd) // one zero byte
	for k := 1; k < len(ops); k++ {
		gf2Square(&ops[k], &ops[k-1])
	}
	return ops
}()

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i++ {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
		vec >>= 1
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := 0; n < 32; n++ {
		square[n] = gf2Times(mat, mat[n])
	}
}
