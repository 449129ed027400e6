package fuse

import (
	"sync"
	"sync/atomic"
)

// presync runs an engine Sync ahead of an fsync that is about to come: a
// writer that fsyncs after every write (seq-1M-fsync, databases) sends its
// FSYNC right after its WRITE is answered, so the mount starts the Sync as
// it answers the WRITE (Write, for handles in the syncEach state) and the
// Sync overlaps the reply, the writer's wake-up and its FSYNC request
// instead of starting after them. The FSYNC then waits for that Sync and
// calls FS.Sync itself as always, which returns at once when nothing
// committed since (kv: durable already covers every applied commit), so
// durability never depends on the early Sync: it only saves time. Its
// error is not lost either: a failed WAL sync fails the store, and the
// FSYNC's own Sync reports it.
//
// With the writeback cache the kernel sends the file's times (SETATTR)
// between that WRITE and the FSYNC; the early Sync then starts at the
// SETATTR instead, so that it covers its commit too (Server.timesFlushed).
//
// At most one early Sync runs at a time (per mount); one asked for while
// another runs is skipped (the FSYNC's own Sync covers what it missed).
type presync struct {
	mu      sync.Mutex
	done    chan struct{} // closed when the Sync in flight returned; nil if none
	started atomic.Int64  // early Syncs begun (tests)
	atTimes atomic.Int64  // asked for at a SETATTR of times (tests; Server.timesFlushed)
}

// start begins an early Sync unless one is running or a sandbox is active
// (nothing in it is durable before it commits).
func (p *presync) start(m *Server) {
	if m.inSandbox() {
		return
	}
	if run := p.claim(m); run != nil {
		go run()
	}
}

// claim marks an early Sync as running and returns the function that
// runs it (FS.Sync) and marks it done, or nil if one is running already.
// The caller runs it without holding locks. No sandbox check: the
// write-behind committer claims one for the fsync-each writes it commits
// (writeBehind.commitTxn), which were queued while no sandbox was active,
// and it may commit while Begin holds the sandbox gate and waits for the
// queue; a Sync while a sandbox is open is harmless (the sandbox's
// changes are not committed), only useless.
func (p *presync) claim(m *Server) func() {
	p.mu.Lock()
	if p.done != nil {
		p.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	p.done = done
	p.mu.Unlock()
	p.started.Add(1)
	return func() {
		if err := m.eng.Sync(m.ctx); err != nil {
			m.log.Debug("early sync failed (the fsync reports it)", "err", err)
		}
		p.mu.Lock()
		p.done = nil
		p.mu.Unlock()
		close(done)
	}
}

// wait waits for the early Sync in flight, if any (every FS.Sync of the
// mount, and its shutdown).
func (p *presync) wait() {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}
