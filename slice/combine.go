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
// by applying len(B) zero bits to crc(A) in GF(2) (zlib's crc32_combine).
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = 0x82f63b78 // reflected Castagnoli polynomial
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // operator for two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd)
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

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
