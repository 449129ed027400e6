//go:build linux

package fuse

import (
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	raw "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// hugePage is the size of an x86-64 transparent huge page.
const hugePage = 2 << 20

// hugeBuffers counts request buffers given huge pages (tests).
var hugeBuffers atomic.Int64

// hugeReadBuffers makes go-fuse's request buffers (the ones the kernel
// copies each WRITE's payload into) live on transparent huge pages, and
// reports whether it could. Per 1 MiB WRITE the kernel pins the
// destination buffer page by page (get_user_pages) and copies into it;
// with 4 KiB pages that is 256 page-table walks and pins per request, and
// TLB misses in the copy and in the engine's checksum and staging copy
// that follow. On this project's VM it cut the mount's CPU per 1 MiB
// write by 18% (docs/fuse.md, "Where a 1 MiB write's time goes").
//
// go-fuse allocates the buffers in the Go heap, which the runtime does
// not advise for huge pages (and the system's THP mode is "madvise"), and
// offers no hook for their allocation. So this wraps the New function of
// its (unexported) buffer pool: each new buffer's 2 MiB-aligned regions
// are advised (MADV_HUGEPAGE) and collapsed into huge pages at once
// (MADV_COLLAPSE, Linux 6.1). That changes neither the memory's contents
// nor its ownership; other heap objects sharing a region just live on a
// huge page too, and the runtime's scavenger may split it again later.
// Costs: a collapse (a 2 MiB copy) when go-fuse allocates a buffer, which
// happens for the first requests and after garbage collections empty its
// pool; up to 2 MiB of resident memory per region that was partly
// unbacked. If go-fuse's internals change (the field is gone or of
// another type), nothing is done and TestHugeReadBuffers fails.
func hugeReadBuffers(srv *raw.Server, log *slog.Logger) bool {
	f := reflect.ValueOf(srv).Elem().FieldByName("readPool")
	if !f.IsValid() || f.Type() != reflect.TypeFor[sync.Pool]() {
		log.Debug("go-fuse has no readPool: request buffers stay on small pages")
		return false
	}
	pool := (*sync.Pool)(unsafe.Pointer(f.UnsafeAddr()))
	orig := pool.New
	if orig == nil {
		return false
	}
	pool.New = func() any {
		v := orig()
		if b, ok := v.([]byte); ok && cap(b) >= hugePage/2 {
			if adviseHuge(b[:cap(b)]) {
				hugeBuffers.Add(1)
			}
		}
		return v
	}
	return true
}

// adviseHuge advises the 2 MiB-aligned regions that b overlaps for huge
// pages, touches b's pages (a region nothing touched yet then faults in
// as one huge page; MADV_COLLAPSE refuses a region without page tables)
// and collapses the regions, best effort; it reports whether every
// collapse succeeded. b is a new buffer whose contents do not matter.
// The regions lie in the Go heap's arenas, which are mapped in 64 MiB
// aligned units, so they are ordinary anonymous memory; what other heap
// objects they hold is copied by the kernel, as khugepaged does.
func adviseHuge(b []byte) bool {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	for r := start &^ (hugePage - 1); r < end; r += hugePage {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r, hugePage, unix.MADV_HUGEPAGE); e != 0 {
			return false
		}
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	ok := true
	for r := start &^ (hugePage - 1); r < end; r += hugePage {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r, hugePage, unix.MADV_COLLAPSE); e != 0 {
			ok = false
		}
	}
	return ok
}
