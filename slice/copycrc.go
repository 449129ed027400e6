package slice

import (
	"hash/crc32"
	"unsafe"
)

// copyChunk is the piece copyChecksum copies before it checksums it: small
// enough that the copied bytes are still in the CPU cache when the CRC
// reads them back, large enough to keep the per-call overhead negligible.
const copyChunk = 32 << 10

// copyChecksum copies src into dst (len(dst) >= len(src)) and returns the
// CRC32C of src, reading src from memory once: each chunk is checksummed
// right after it was copied, from the cache (nfs4 ENGINE-REQUESTS 15: the
// staging copy and the CRC of a 1 MiB direct put were two passes over the
// caller's buffer).
func copyChecksum(dst, src []byte) uint32 {
	var crc uint32
	for off := 0; off < len(src); off += copyChunk {
		end := min(off+copyChunk, len(src))
		n := copy(dst[off:end], src[off:end])
		crc = crc32.Update(crc, castagnoli, dst[off:off+n])
	}
	return crc
}

// isAligned reports whether data can be written with O_DIRECT as it is:
// its first byte is directAlign-aligned in memory and its length is a
// multiple of directAlign (so no zero padding is needed). Put then skips
// the staging copy (nfs4 ENGINE-REQUESTS 15; the NFS server places 1 MiB
// WRITE payloads so, see nfs4/internal/rpc Call.AlignPayload).
func isAligned(data []byte) bool {
	return len(data) > 0 && len(data)%directAlign == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(data)))%directAlign == 0
}
