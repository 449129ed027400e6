package slice

import (
	"context"
	"sync/atomic"
)

// unstagedKey marks a context whose puts may go unstaged (WithUnstaged).
type unstagedKey struct{}

// WithUnstaged returns ctx marked so that a Local's direct puts made with
// it behave as with LocalOptions.Unstaged (data 4 KiB-aligned in memory
// and a multiple of 4 KiB long is written straight from the caller's
// buffer, synchronously, without the staging copy), whatever the store's
// option. For a caller that waits for the put's write anyway, such as a
// FUSE mount's synchronous WRITE of a writer that fsyncs after every
// write (its NoSync commit waits for the slice write, and the FSYNC
// follows at once): it saves the staging copy there, while the mount's
// other writes keep the background write that lets them be answered
// before the data is on disk.
func WithUnstaged(ctx context.Context) context.Context {
	return context.WithValue(ctx, unstagedKey{}, true)
}

// unstagedFrom reports whether ctx was marked by WithUnstaged.
func unstagedFrom(ctx context.Context) bool {
	v, _ := ctx.Value(unstagedKey{}).(bool)
	return v
}

// A Loan lets a Local's direct puts keep reading the caller's buffer
// after Put returns (WithLoan): the caller holds it while it may still
// hand the buffer to puts, each put that writes from the buffer holds it
// until its background write is done, and done runs once when the last
// hold is released. A caller that owns its buffer only through the loan
// (a FUSE mount that took its request buffer from go-fuse) gets the
// asynchronous direct write of a staged put without the staging copy.
type Loan struct {
	n    atomic.Int64
	done func()
	// eager: a put's background write starts before Put returns
	// (NewEagerLoan).
	eager bool
}

// NewEagerLoan is NewLoan for a caller that wants each background write
// under the loan started before Put returns, to overlap the caller's work
// after the put with the device write: the putting goroutine yields its
// thread to the new write goroutine (runtime.Gosched), which enters its
// write at once, and resumes on the next free thread. Otherwise the write
// goroutine waits for a free thread, and on a busy machine it often ran
// only once the caller blocked — after the caller's work, which then
// overlapped nothing (docs/nfs-server.md "Session 12").
func NewEagerLoan(done func()) *Loan {
	l := NewLoan(done)
	l.eager = true
	return l
}

// NewLoan returns a loan held once by the caller, who releases it
// (Release) after its last Put with it; done runs after every hold is
// released.
func NewLoan(done func()) *Loan {
	l := &Loan{done: done}
	l.n.Store(1)
	return l
}

// Release drops one hold of the loan.
func (l *Loan) Release() {
	if n := l.n.Add(-1); n == 0 {
		l.done()
	} else if n < 0 {
		panic("slice: Loan released more often than held")
	}
}

func (l *Loan) hold() { l.n.Add(1) }

type loanKey struct{}

// WithLoan returns ctx marked so that a Local's direct puts made with it
// of data that is 4 KiB-aligned in memory and a multiple of 4 KiB long
// (isAligned) write the caller's buffer in the background, as staged puts
// write their staging buffer, instead of copying it: the put holds l
// until its write is done, and the caller must not modify the buffer
// before l's done runs. Puts that are not written that way (buffered,
// unaligned, staged) do not hold l. WithUnstaged wins over a loan (the
// write is synchronous); a loan wins over LocalOptions.Unstaged (the
// write is asynchronous: txnfs serve's WRITE payloads, fs.WritePayload).
// Without a loan Put neither modifies nor retains data.
func WithLoan(ctx context.Context, l *Loan) context.Context {
	return context.WithValue(ctx, loanKey{}, l)
}

// Lent reports whether ctx carries a loan (WithLoan).
func Lent(ctx context.Context) bool { return loanFrom(ctx) != nil }

// loanFrom returns the loan of ctx, or nil.
func loanFrom(ctx context.Context) *Loan {
	l, _ := ctx.Value(loanKey{}).(*Loan)
	return l
}
