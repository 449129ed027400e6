package fuse

import (
	"log/slog"
	"sync"
	"time"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
)

// entryKey names a directory entry.
type entryKey struct {
	parent fs.Ino
	name   string
}

// invalidation lists what a committed change made stale in kernel caches:
// directory entries (added, removed or replaced names) and inodes (changed
// attributes or data).
type invalidation struct {
	entries []entryKey
	inos    []fs.Ino
}

func (v *invalidation) entry(parent fs.Ino, name string) {
	v.entries = append(v.entries, entryKey{parent, name})
}

func (v *invalidation) ino(inos ...fs.Ino) { v.inos = append(v.inos, inos...) }

func (v *invalidation) merge(o *invalidation) {
	v.entries = append(v.entries, o.entries...)
	v.inos = append(v.inos, o.inos...)
}

// Group connects the mounts of one FS in one process so that each sees
// the others' committed changes promptly: after every change, the kernel
// caches of the other mounts are told to drop the changed entries and
// inodes (FUSE notify_inval_entry / notify_inval_inode). Without a group,
// a mount sees other writers' name changes when its cache timeouts expire.
//
// A request never waits for these notifications: the kernel holds the
// directory lock of a request in progress, and a notification needs the
// other mount's directory lock, so two mounts creating in the same
// directory, each waiting for the other's invalidation, would deadlock.
// Only sandbox Commit, which holds no kernel lock, waits for them.
type Group struct {
	pins   pinGate
	wbOnce sync.Once
	wb     *writeBehind // shared write-behind queue (see writeBehind)
	mu     struct {
		sync.Mutex
		mounts []*Server
	}
}

// NewGroup returns an empty group.
func NewGroup() *Group { return &Group{} }

// writeBehind returns the group's write-behind queue, made with max bytes
// (or the default if max is not positive) by the first mount that asks:
// every mount of the group waits for it, whether it queues writes or not.
func (g *Group) writeBehind(max int, delay time.Duration) *writeBehind {
	g.wbOnce.Do(func() {
		if max <= 0 {
			max = DefaultWriteBehindBytes
		}
		g.wb = newWriteBehind(max, delay)
	})
	return g.wb
}

func (g *Group) add(m *Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.mounts = append(g.mu.mounts, m)
}

func (g *Group) remove(m *Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, o := range g.mu.mounts {
		if o == m {
			g.mu.mounts = append(g.mu.mounts[:i], g.mu.mounts[i+1:]...)
			return
		}
	}
}

// broadcast queues inv for every mount but from.
func (g *Group) broadcast(from *Server, inv *invalidation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.mu.mounts {
		if m != from {
			m.notify.push(inv)
		}
	}
}

// broadcastDone is broadcast, returning channels closed once each kernel
// has processed the invalidations.
func (g *Group) broadcastDone(from *Server, inv *invalidation) []<-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	var dones []<-chan struct{}
	for _, m := range g.mu.mounts {
		if m != from {
			dones = append(dones, m.notify.pushDone(inv))
		}
	}
	return dones
}

// broadcastWait is broadcast, returning once the kernels have processed
// the invalidations.
func (g *Group) broadcastWait(from *Server, inv *invalidation) {
	for _, d := range g.broadcastDone(from, inv) {
		<-d
	}
}

// notifier sends cache invalidations to one mount's kernel from its own
// goroutine: a notification may wait for an inode lock held by a request
// in progress, so it must never be sent from a request handler.
type notifier struct {
	mu struct {
		sync.Mutex
		queue   []*invalidation
		waiters []chan struct{} // closed once the queue before them is sent
		stopped bool
	}
	wake chan struct{}
	done chan struct{}
}

func (n *notifier) start(srv *raw.Server, log *slog.Logger) {
	n.wake = make(chan struct{}, 1)
	n.done = make(chan struct{})
	go n.run(srv, log)
}

func (n *notifier) push(inv *invalidation) {
	if len(inv.entries) == 0 && len(inv.inos) == 0 {
		return
	}
	n.enqueue(inv, nil)
}

// pushDone queues inv and returns a channel closed once it was sent.
func (n *notifier) pushDone(inv *invalidation) <-chan struct{} {
	done := make(chan struct{})
	n.enqueue(inv, done)
	return done
}

func (n *notifier) enqueue(inv *invalidation, done chan struct{}) {
	n.mu.Lock()
	if n.mu.stopped {
		n.mu.Unlock()
		if done != nil {
			close(done)
		}
		return
	}
	n.mu.queue = append(n.mu.queue, inv)
	if done != nil {
		n.mu.waiters = append(n.mu.waiters, done)
	}
	select { // under the lock: stop closes wake
	case n.wake <- struct{}{}:
	default:
	}
	n.mu.Unlock()
}

func (n *notifier) stop() {
	n.mu.Lock()
	if n.mu.stopped || n.done == nil {
		n.mu.Unlock()
		return
	}
	n.mu.stopped = true
	for _, w := range n.mu.waiters {
		close(w)
	}
	n.mu.waiters = nil
	n.mu.Unlock()
	close(n.wake)
	<-n.done
}

func (n *notifier) run(srv *raw.Server, log *slog.Logger) {
	defer close(n.done)
	for range n.wake {
		n.mu.Lock()
		q, waiters := n.mu.queue, n.mu.waiters
		n.mu.queue, n.mu.waiters = nil, nil
		stopped := n.mu.stopped
		n.mu.Unlock()
		if stopped {
			return
		}
		seenIno := map[fs.Ino]bool{}
		seenEntry := map[entryKey]bool{}
		for _, inv := range q {
			for _, e := range inv.entries {
				if seenEntry[e] {
					continue
				}
				seenEntry[e] = true
				// ENOENT: the kernel does not cache that entry.
				if st := srv.EntryNotify(uint64(e.parent), e.name); st != raw.OK && st != raw.ENOENT {
					log.Debug("entry invalidation failed", "parent", e.parent, "name", e.name, "status", st)
				}
			}
			for _, ino := range inv.inos {
				if seenIno[ino] {
					continue
				}
				seenIno[ino] = true
				if st := srv.InodeNotify(uint64(ino), 0, 0); st != raw.OK && st != raw.ENOENT {
					log.Debug("inode invalidation failed", "ino", ino, "status", st)
				}
			}
		}
		for _, w := range waiters {
			close(w)
		}
	}
}
