// Package hugepage puts I/O buffers of the Go heap on transparent huge
// pages (2 MiB on x86-64).
//
// A 1 MiB buffer on 4 KiB pages costs 256 page pins per O_DIRECT write or
// FUSE request copy (and as many DMA segments), plus TLB misses when it is
// copied or checksummed. The Go runtime does not advise its heap for huge
// pages, and this project's machines run THP in "madvise" mode, so buffers
// that carry file data are advised explicitly: fuse/ does it for go-fuse's
// request buffers, slice/ for its O_DIRECT staging buffers. Measured on
// this project's VM: CPU per 1 MiB O_DIRECT pwrite -47%, wall -35%
// (fuse/ENGINE-REQUESTS.md 9); mount CPU per 1 MiB FUSE write -13%
// (docs/fuse.md).
//
// Advice is best effort: where the kernel lacks MADV_COLLAPSE (before
// 6.1) or THP is off, buffers simply stay on small pages. Memory contents
// and ownership never change (the heap objects sharing a 2 MiB region are
// copied by the kernel, as khugepaged does).
package hugepage

// Size is the size of a transparent huge page on x86-64.
const Size = 2 << 20

// Aligned returns an n-byte buffer in the Go heap that starts at a Size
// boundary (so also at every smaller power of two, e.g. the 4 KiB that
// O_DIRECT needs), advised and collapsed for huge pages where the system
// allows. It costs n+Size bytes of address space; only the touched pages
// (the buffer's) become resident.
func Aligned(n int) []byte {
	raw := make([]byte, n+Size)
	skip := (Size - int(addr(raw)%Size)) % Size
	b := raw[skip : skip+n : skip+n]
	Advise(b)
	return b
}
