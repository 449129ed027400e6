//go:build linux

package fuse

import (
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/slice"
)

// lentBuffers counts WRITE request buffers taken from go-fuse (tests).
var lentBuffers atomic.Int64

// maxLent bounds the request buffers a mount has taken from go-fuse whose
// slice writes are still running (each ~1 MiB); past it large writes are
// staged (copied) as before.
const maxLent = 16

// bufLender takes a large WRITE's request buffer away from go-fuse, so
// that the slice store can write the payload with O_DIRECT from that very
// buffer in the background (slice.WithLoan) instead of copying it into a
// staging buffer first: the copy was ~80 µs of a ~900 µs 1 MiB write(2)
// through the mount, on the request's critical path (docs/fuse.md,
// "Session 7"). go-fuse reads each request into a buffer of its pool and
// puts the buffer back when the request is done; it has no way to let a
// handler keep it. So, as hugeReadBuffers does for the buffers'
// allocation, this reaches into go-fuse's internals by reflection:
//
//   - go-fuse's request structs (its reqPool) are registered when
//     created, by their cancel channel, which the WRITE handler receives;
//   - the handler (lend) replaces the request's input buffer with another
//     buffer of go-fuse's kind (from its pool's New, or one lent before
//     and since returned), copying the request header into it (go-fuse
//     reads the header after the handler: reply, in-flight list), under
//     go-fuse's interrupt mutex (INTERRUPT reads in-flight requests'
//     headers from other goroutines);
//   - go-fuse then puts the replacement in its pool and never touches the
//     taken buffer again (only its cleared payload slices referred to it);
//   - the taken buffer comes back to the lender when the slice write is
//     done (the loan's done), for a later exchange.
//
// If go-fuse's internals are not as expected, nothing is taken (lend
// returns nil) and TestLendReadBuffers fails; the clean fix is upstream (a
// go-fuse way for a WRITE handler to keep its buffer).
type bufLender struct {
	pool      *sync.Pool  // go-fuse's readPool (New hooked by hugeReadBuffers)
	interrupt *sync.Mutex // go-fuse's protocolServer.interruptMu
	// Offsets in go-fuse's requestAlloc.
	offCancel, offInput, offPool uintptr

	mu     sync.Mutex
	allocs map[<-chan struct{}]weak.Pointer[byte] // request structs by cancel channel
	free   [][]byte                               // buffers back from loans
	out    int                                    // buffers lent and not back
}

// newBufLender hooks srv's request pool, or returns nil (logged at debug
// level) if go-fuse's internals are not as expected. Must run before the
// server serves requests.
func newBufLender(srv *raw.Server, log *slog.Logger) *bufLender {
	sv := reflect.ValueOf(srv).Elem()
	rp, readp := sv.FieldByName("reqPool"), sv.FieldByName("readPool")
	mu := sv.FieldByName("interruptMu") // promoted from protocolServer
	poolT := reflect.TypeFor[sync.Pool]()
	if !rp.IsValid() || rp.Type() != poolT || !readp.IsValid() || readp.Type() != poolT ||
		!mu.IsValid() || mu.Type() != reflect.TypeFor[sync.Mutex]() {
		log.Debug("go-fuse's server is not as expected: WRITE buffers are copied")
		return nil
	}
	reqPool := (*sync.Pool)(unsafe.Pointer(rp.UnsafeAddr()))
	orig := reqPool.New
	if orig == nil {
		return nil
	}
	v := reflect.ValueOf(orig())
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	at := v.Elem().Type()
	bytesT, chanT := reflect.TypeFor[[]byte](), reflect.TypeFor[chan struct{}]()
	cancel, ok1 := at.FieldByName("cancel")
	input, ok2 := at.FieldByName("inputBuf")
	pooled, ok3 := at.FieldByName("bufferPoolInputBuf")
	if !ok1 || !ok2 || !ok3 || cancel.Type != chanT || input.Type != bytesT || pooled.Type != bytesT {
		log.Debug("go-fuse's requests are not as expected: WRITE buffers are copied")
		return nil
	}
	l := &bufLender{
		pool:      (*sync.Pool)(unsafe.Pointer(readp.UnsafeAddr())),
		interrupt: (*sync.Mutex)(unsafe.Pointer(mu.UnsafeAddr())),
		offCancel: fieldOffset(at, cancel.Index),
		offInput:  fieldOffset(at, input.Index),
		offPool:   fieldOffset(at, pooled.Index),
		allocs:    map[<-chan struct{}]weak.Pointer[byte]{},
	}
	reqPool.New = func() any {
		a := orig()
		if p := reflect.ValueOf(a); p.Kind() == reflect.Pointer && p.Type().Elem() == at {
			l.register(p.UnsafePointer())
		}
		return a
	}
	// The request structs go-fuse made before (for the INIT) are pooled
	// and would be reused for most requests without ever being lendable:
	// two collections drop every pooled item (the pool's victim cache
	// survives one). Nothing else uses the pool yet.
	runtime.GC()
	runtime.GC()
	return l
}

// fieldOffset is the offset of the (possibly promoted) field at index in
// struct type t.
func fieldOffset(t reflect.Type, index []int) uintptr {
	var off uintptr
	for _, i := range index {
		f := t.Field(i)
		off += f.Offset
		t = f.Type
	}
	return off
}

// register records a new go-fuse request struct under its cancel
// channel, until the struct is collected. go-fuse gives a request struct
// a new channel after an INTERRUPT closed its old one; such a struct is
// not found again and its WRITEs are staged (interrupted WRITEs are rare:
// a signal to a writer waiting for its reply).
func (l *bufLender) register(p unsafe.Pointer) {
	ch := (<-chan struct{})(*(*chan struct{})(unsafe.Add(p, l.offCancel)))
	base := (*byte)(p)
	l.mu.Lock()
	l.allocs[ch] = weak.Make(base)
	l.mu.Unlock()
	runtime.AddCleanup(base, func(ch <-chan struct{}) {
		l.mu.Lock()
		delete(l.allocs, ch)
		l.mu.Unlock()
	}, ch)
}

// lend takes the request buffer holding in and data (the WRITE handler's
// arguments; cancel is the request's) away from go-fuse and returns a loan
// for the slice store that gives it back to the lender when released
// (slice.WithLoan; the handler releases its own hold after its puts), or
// nil if it cannot (data not 4 KiB-aligned, too many buffers out, the
// request unknown).
func (l *bufLender) lend(cancel <-chan struct{}, in *raw.WriteIn, data []byte) *slice.Loan {
	if l == nil || len(data) == 0 || len(data)%4096 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4096 != 0 {
		return nil
	}
	l.mu.Lock()
	wp, ok := l.allocs[cancel]
	var repl []byte
	if ok && l.out < maxLent {
		if n := len(l.free); n > 0 {
			repl, l.free = l.free[n-1], l.free[:n-1]
		}
		l.out++
	} else {
		ok = false
	}
	l.mu.Unlock()
	if !ok {
		return nil
	}
	p := unsafe.Pointer(wp.Value())
	var taken []byte
	if p != nil {
		taken = l.exchange(p, in, data, &repl)
	}
	if taken == nil {
		l.giveBack(repl)
		return nil
	}
	lentBuffers.Add(1)
	return slice.NewLoan(func() { l.giveBack(taken) })
}

// exchange puts *repl (or, if nil, a new buffer from go-fuse's pool) in
// place of the input buffer of request p and returns the buffer it took,
// or nil (then *repl is left for the caller to give back) if p's input
// buffer is not the one holding in and data. p is the request being
// handled by the caller's goroutine.
func (l *bufLender) exchange(p unsafe.Pointer, in *raw.WriteIn, data []byte, repl *[]byte) []byte {
	input := (*[]byte)(unsafe.Add(p, l.offInput))
	pooled := (*[]byte)(unsafe.Add(p, l.offPool))
	start := unsafe.Pointer(unsafe.SliceData(*pooled))
	hdr := len(*input)
	d := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	if start == nil || start != unsafe.Pointer(in) || unsafe.Pointer(unsafe.SliceData(*input)) != start ||
		d < uintptr(start)+uintptr(hdr) || d+uintptr(len(data)) > uintptr(start)+uintptr(cap(*pooled)) {
		return nil
	}
	if *repl == nil {
		b, _ := l.pool.New().([]byte)
		if cap(b) < cap(*pooled) {
			return nil
		}
		*repl = b[:cap(b)]
	}
	r := *repl
	if cap(r) < cap(*pooled) {
		return nil
	}
	taken := *pooled
	copy(r[:hdr], (*input)[:hdr])
	l.interrupt.Lock()
	*input = r[:hdr]
	l.interrupt.Unlock()
	*pooled = r
	*repl = nil
	return taken
}

// giveBack returns a buffer (or nil: a place) to the lender.
func (l *bufLender) giveBack(b []byte) {
	l.mu.Lock()
	l.out--
	if b != nil {
		l.free = append(l.free, b)
	}
	l.mu.Unlock()
}
