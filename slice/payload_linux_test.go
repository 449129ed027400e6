package slice

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPutPayloadDirect: PutPayload on O_DIRECT stores, unstaged (an
// aligned payload written from the caller's buffer) and staged (copied
// without hashing), also through the cache (checkPayloadPuts: right CRCs
// read back, stale ones read ErrCorrupt); the store hashes nothing.
func TestPutPayloadDirect(t *testing.T) {
	for _, unstaged := range []bool{true, false} {
		var l *Local
		if unstaged {
			l = openUnstagedOrSkip(t, t.TempDir())
		} else {
			l = openDirectOrSkip(t, t.TempDir())
		}
		mk := func(i int) []byte {
			if i%3 == 2 {
				return directData(uint64(i), MaxSize-100) // unaligned: staged
			}
			return alignedData(uint64(i), MaxSize)
		}
		checkPayloadPuts(t, l, mk)
		checkPayloadPuts(t, NewCache(l, 64<<20), mk)
		st := l.Stats()
		if st.DirectPuts != 8 || (unstaged && st.UnstagedPuts == 0) || (!unstaged && st.UnstagedPuts != 0) {
			t.Fatalf("unstaged store %v: %d direct puts (want 8), %d unstaged", unstaged, st.DirectPuts, st.UnstagedPuts)
		}
		l.Close()
	}
}

// TestPutPayloadRetained: an unstaged put of a retained payload returns
// while its direct write (from the caller's buffer) is still blocked;
// WaitWritten and Sync of its pointer wait for the write; the slice then
// reads back. A retained put whose write fails is reported by WaitWritten
// and Sync. Not retained, the same put writes before returning.
func TestPutPayloadRetained(t *testing.T) {
	ctx := context.Background()
	l := openUnstagedOrSkip(t, t.TempDir())
	defer l.Close()
	// The probe (the file's first direct write) is synchronous anyway.
	if _, err := l.Put(ctx, 0, alignedData(1, MaxSize)); err != nil {
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	release := make(chan error)
	started := make(chan []byte, 1)
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		started <- buf
		if err := <-release; err != nil {
			return -1, err
		}
		return old(fd, buf, off)
	}
	for _, fail := range []bool{false, true} {
		data := alignedData(2, MaxSize)
		type result struct {
			p   Pointer
			err error
		}
		put := make(chan result, 1)
		go func() {
			loan := NewLoan(func() {})
			p, err := l.PutPayload(WithLoan(ctx, loan), 0, NewPayload(data, Checksum(data)))
			loan.Release()
			put <- result{p, err}
		}()
		if buf := <-started; unsafe.SliceData(buf) != unsafe.SliceData(data) {
			t.Fatal("retained aligned payload was staged")
		}
		var r result
		select {
		case r = <-put:
		case <-time.After(5 * time.Second):
			release <- nil
			t.Fatal("PutPayload of a retained payload waited for its write")
		}
		p, err := r.p, r.err
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 2)
		go func() { waited <- l.WaitWritten(ctx, []Pointer{p}) }()
		go func() { waited <- l.Sync(ctx, []Pointer{p}) }()
		select {
		case err := <-waited:
			t.Fatalf("WaitWritten or Sync returned (%v) while the write was blocked", err)
		case <-time.After(50 * time.Millisecond):
		}
		if fail {
			release <- unix.EIO
		} else {
			release <- nil
		}
		for range 2 {
			if err := <-waited; (err != nil) != fail {
				t.Fatalf("write failed %v: WaitWritten/Sync: %v", fail, err)
			}
		}
		if !fail {
			mustGet(t, l, p, data)
		}
	}
	// Not retained: written before PutPayload returns.
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		started <- buf
		return old(fd, buf, off)
	}
	data := alignedData(3, MaxSize)
	if _, err := l.PutPayload(ctx, 0, NewPayload(data, Checksum(data))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	default:
		t.Fatal("a payload that is not retained was not written before PutPayload returned")
	}
}
