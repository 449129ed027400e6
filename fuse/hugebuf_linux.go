//go:build linux

package fuse

import (
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/internal/hugepage"
)

// hugeBuffers counts request buffers given huge pages, hugeTries the
// buffers the hook advised, whether or not the kernel could collapse them
// (MADV_COLLAPSE is best effort: it fails for a moment when memory is
// fragmented or a region's other pages are busy) (tests).
var hugeBuffers, hugeTries atomic.Int64

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
		if b, ok := v.([]byte); ok && cap(b) >= hugepage.Size/2 {
			hugeTries.Add(1)
			if hugepage.Advise(b[:cap(b)]) {
				hugeBuffers.Add(1)
			}
		}
		return v
	}
	return true
}
