package fs

import (
	"context"
	"fmt"
	"sync"
)

// appender batches concurrent FS.Append calls on one file into a single
// transaction (group commit): the first caller becomes the leader, drains
// the queue, commits once and hands every caller its offset. Appenders
// therefore never overwrite each other and never abort, and N concurrent
// appends cost about one metadata commit instead of N conflicting ones.
type appender struct {
	fs *FS
	mu struct {
		sync.Mutex
		queues map[Ino]*appendQueue
	}
}

type appendQueue struct {
	pending []*appendReq
}

type appendReq struct {
	data   []byte
	noSync bool
	off    uint64
	err    error
	done   chan struct{}
}

// maxAppendBatch bounds the bytes one batch commits.
const maxAppendBatch = 8 << 20

// Append atomically appends data to the end of file ino and returns the
// offset it was written at. Concurrent appends to the same file are
// committed together; each is durable when Append returns.
func (f *FS) Append(ctx context.Context, cred Cred, ino Ino, data []byte) (uint64, error) {
	return f.AppendOpts(ctx, cred, TxnOptions{}, ino, data)
}

// AppendOpts is Append with transaction options: with opts.NoSync the
// append is visible when AppendOpts returns and durable at the next
// FS.Sync (a batch that also holds a synced append commits synced).
// opts.ReadOnly is invalid.
func (f *FS) AppendOpts(ctx context.Context, cred Cred, opts TxnOptions, ino Ino, data []byte) (uint64, error) {
	if opts.ReadOnly {
		return 0, fmt.Errorf("%w: append in a read-only transaction", ErrReadOnly)
	}
	req := &appendReq{data: data, noSync: opts.NoSync, done: make(chan struct{})}
	a := &f.appender
	a.mu.Lock()
	if a.mu.queues == nil {
		a.mu.queues = map[Ino]*appendQueue{}
	}
	q, running := a.mu.queues[ino]
	if !running {
		q = &appendQueue{}
		a.mu.queues[ino] = q
	}
	q.pending = append(q.pending, req)
	a.mu.Unlock()
	if !running {
		go a.lead(context.WithoutCancel(ctx), cred, ino, q)
	}
	select {
	case <-req.done:
		return req.off, req.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// lead commits batches from q until it is empty.
func (a *appender) lead(ctx context.Context, cred Cred, ino Ino, q *appendQueue) {
	for {
		a.mu.Lock()
		var batch []*appendReq
		size := 0
		for len(q.pending) > 0 && (len(batch) == 0 || size+len(q.pending[0].data) <= maxAppendBatch) {
			size += len(q.pending[0].data)
			batch = append(batch, q.pending[0])
			q.pending = q.pending[1:]
		}
		if len(batch) == 0 {
			delete(a.mu.queues, ino)
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		noSync := true
		for _, r := range batch {
			noSync = noSync && r.noSync
		}
		err := a.fs.DoOpts(ctx, cred, TxnOptions{NoSync: noSync}, func(t *Txn) error {
			for _, r := range batch {
				off, err := t.Append(ctx, ino, r.data)
				if err != nil {
					return err
				}
				r.off = off
			}
			return nil
		})
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
	}
}
