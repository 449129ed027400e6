package rpc

import (
	"hash/crc32"
	"unsafe"
)

// castagnoli is the CRC32C table (the slice store's checksum).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcBlock is the unit a record's payload is hashed in while it arrives:
// after each read(2), every complete block received so far is hashed, while
// its bytes are still in the CPU cache and while the client is still
// sending the rest of the record (the hashing overlaps the transfer).
const crcBlock = 64 << 10

// crcReadMax caps one read(2) of a hashed record, so that the blocks
// hashed after it are still in the cache (a loopback socket can hand over
// a whole 1 MiB record in one read).
var crcReadMax = 256 << 10

// recordCRC is the CRC32C of a record's bytes from one offset on (where
// the connection expects a WRITE's payload, see Call.AlignPayload), kept
// at every crcBlock boundary so that the CRC of any payload starting there
// costs at most one partial block (Call.PayloadCRC). A worker owns one and
// reuses it for each record it reads; a Call refers to it while it runs.
type recordCRC struct {
	start  int      // record offset hashing starts at; -1: off
	done   int      // bytes hashed from start: a multiple of crcBlock
	prefix []uint32 // prefix[k]: CRC32C of rec[start : start+k*crcBlock]
}

// reset starts hashing a record at start (-1: not this record).
func (h *recordCRC) reset(start int) {
	h.start, h.done = start, 0
	h.prefix = append(h.prefix[:0], 0)
}

// update hashes the complete blocks of rec (the record's bytes received so
// far) that are not hashed yet.
func (h *recordCRC) update(rec []byte) {
	if h.start < 0 {
		return
	}
	crc := h.prefix[len(h.prefix)-1]
	for h.start+h.done+crcBlock <= len(rec) {
		p := h.start + h.done
		crc = crc32.Update(crc, castagnoli, rec[p:p+crcBlock])
		h.done += crcBlock
		h.prefix = append(h.prefix, crc)
	}
}

// sum returns the CRC32C of p if p lies in rec (the whole record, as
// hashed by update) starting at h's start offset; ok=false otherwise.
func (h *recordCRC) sum(rec, p []byte) (crc uint32, ok bool) {
	if h == nil || h.start < 0 || len(p) == 0 || len(rec) == 0 {
		return 0, false
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(p))) - uintptr(unsafe.Pointer(unsafe.SliceData(rec)))
	if off != uintptr(h.start) || uintptr(len(p)) > uintptr(len(rec))-off {
		return 0, false
	}
	k := min(len(p)/crcBlock, len(h.prefix)-1)
	crc = h.prefix[k]
	return crc32.Update(crc, castagnoli, p[k*crcBlock:]), true
}
