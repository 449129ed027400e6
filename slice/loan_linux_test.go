package slice

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestPutLoan: with a loan (WithLoan) an aligned direct put is written in
// the background straight from the caller's buffer (no staging copy), and
// holds the loan until that write is done: the loan's done runs only
// after the write and after the caller's own release. Unaligned data is
// staged and does not hold the loan; WithUnstaged wins over a loan.
func TestPutLoan(t *testing.T) {
	ctx := context.Background()
	l := openDirectOrSkip(t, t.TempDir())
	defer l.Close()
	if _, err := l.Put(ctx, 0, alignedData(1, MaxSize)); err != nil { // the probe
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	gate := make(chan struct{})
	fromCaller := make(chan bool, 4)
	var caller []byte
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		fromCaller <- unsafe.SliceData(buf) == unsafe.SliceData(caller)
		<-gate
		return old(fd, buf, off)
	}

	data := alignedData(2, MaxSize)
	caller = data
	want := bytes.Clone(data)
	done := make(chan struct{})
	loan := NewLoan(func() { close(done) })
	st := l.Stats()
	p, err := l.Put(WithLoan(ctx, loan), 0, data)
	if err != nil {
		t.Fatal(err)
	}
	if !<-fromCaller {
		t.Fatal("a lent put wrote from a staging buffer, want the caller's")
	}
	loan.Release() // the caller's hold
	select {
	case <-done:
		t.Fatal("the loan was done while its put's write was still running")
	case <-time.After(20 * time.Millisecond):
	}
	gate <- struct{}{}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loan was not done after its put's write")
	}
	if n := l.Stats().LentPuts - st.LentPuts; n != 1 {
		t.Errorf("LentPuts grew by %d, want 1", n)
	}
	scribble(data) // the caller's buffer is its own again
	if err := l.WaitWritten(ctx, []Pointer{p}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, l, p, want)

	// Unaligned data is staged: the loan is not held by the put.
	done2 := make(chan struct{})
	loan2 := NewLoan(func() { close(done2) })
	caller = nil
	go func() { gate <- struct{}{} }()
	u := directData(3, MaxSize-512)
	p2, err := l.Put(WithLoan(ctx, loan2), 0, u)
	if err != nil {
		t.Fatal(err)
	}
	if <-fromCaller {
		t.Error("an unaligned lent put was not staged")
	}
	loan2.Release()
	select {
	case <-done2:
	case <-time.After(10 * time.Second):
		t.Fatal("a staged put held the loan")
	}
	if err := l.WaitWritten(ctx, []Pointer{p2}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, l, p2, u)

	// WithUnstaged wins: synchronous, no hold.
	data3 := alignedData(4, MaxSize)
	caller = data3
	go func() { gate <- struct{}{} }()
	st = l.Stats()
	done3 := make(chan struct{})
	loan3 := NewLoan(func() { close(done3) })
	if _, err := l.Put(WithUnstaged(WithLoan(ctx, loan3)), 0, data3); err != nil {
		t.Fatal(err)
	}
	<-fromCaller
	loan3.Release()
	<-done3
	if s := l.Stats(); s.UnstagedPuts-st.UnstagedPuts != 1 || s.LentPuts != st.LentPuts {
		t.Errorf("WithUnstaged and WithLoan: %d unstaged, %d lent puts; want 1, 0", s.UnstagedPuts-st.UnstagedPuts, s.LentPuts-st.LentPuts)
	}
}

// TestPutPayloadOf: a Payload whose CRC the store computes (PayloadOf)
// gets its data's CRC32C in the pointer on every put path — lent (eager
// or not: hashed once the background write started), unstaged
// (synchronous), staged (aligned without a loan, and unaligned) — and
// reads back intact. The lent puts are hashed while their write is held
// in flight, so the hashing does not wait for the write.
func TestPutPayloadOf(t *testing.T) {
	ctx := context.Background()
	l := openDirectOrSkip(t, t.TempDir())
	defer l.Close()
	if _, err := l.Put(ctx, 0, alignedData(1, MaxSize)); err != nil { // the probe
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	var hold atomic.Pointer[chan struct{}] // set: writes wait for it to close
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		if h := hold.Load(); h != nil {
			<-*h
		}
		return old(fd, buf, off)
	}
	cases := []struct {
		name    string
		data    []byte
		ctx     func(done func()) (context.Context, *Loan)
		blocked bool // the write is held until Put returned
	}{
		{"eager loan", alignedData(2, MaxSize), func(done func()) (context.Context, *Loan) {
			loan := NewEagerLoan(done)
			return WithLoan(ctx, loan), loan
		}, true},
		{"loan", alignedData(3, 256<<10), func(done func()) (context.Context, *Loan) {
			loan := NewLoan(done)
			return WithLoan(ctx, loan), loan
		}, true},
		{"unstaged", alignedData(4, MaxSize), func(done func()) (context.Context, *Loan) {
			return WithUnstaged(ctx), nil
		}, false},
		{"staged aligned", alignedData(5, 64<<10), func(done func()) (context.Context, *Loan) { return ctx, nil }, true},
		{"staged unaligned", directData(6, MaxSize-512), func(done func()) (context.Context, *Loan) { return ctx, nil }, true},
	}
	for _, c := range cases {
		want := bytes.Clone(c.data)
		done := make(chan struct{})
		pctx, loan := c.ctx(func() { close(done) })
		gate := make(chan struct{})
		if c.blocked {
			hold.Store(&gate)
		}
		p, err := l.PutPayload(pctx, 0, PayloadOf(c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		hold.Store(nil)
		close(gate)
		if p.CRC != Checksum(want) {
			t.Errorf("%s: pointer CRC %08x, want %08x", c.name, p.CRC, Checksum(want))
		}
		if loan != nil {
			loan.Release()
			<-done
		}
		if err := l.WaitWritten(ctx, []Pointer{p}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mustGet(t, l, p, want)
	}
}
