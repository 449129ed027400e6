package server

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
)

// dirLocks serializes the grouped runs (runGroup) of plain compounds that
// change the same directory. Every change to a directory rewrites its
// inode record (times, change attribute, link count, next cookie), so two
// runs that remove or create names in one directory at the same time
// conflict at commit, and the engine re-executes the whole losing run
// (fs.Txn.Commit's replay): the vectorized rm -r of a tree, whose pipelined
// COMPOUNDs share the directory at their boundaries, re-ran a third to a
// half of its REMOVEs that way. Waiting for the directory costs no CPU;
// re-running does.
//
// The locks are a scheduling hint, not a correctness device: the engine's
// optimistic concurrency control still decides (other servers, FUSE
// mounts and transactional compounds do not take them), and a run that
// waited longer than dirLockWait proceeds without the lock.
//
// Deadlock freedom: a run blocks on a lock only while it holds none. A
// run holding locks that needs another directory takes it only if it is
// free and nobody waits for the ones it holds; otherwise the run is split
// (compound.split): the operations before the one that needs the lock
// commit as a run of their own, releasing the locks, and the operation
// starts the next run. Committing a plain compound's operations in more
// runs is invisible to clients (each could have committed alone).
//
// A lock taken in the middle of a run whose snapshot is older than the
// lock's last release would not help: the releasing run committed after
// the snapshot, so this one conflicts anyway. The run is then split too,
// and the operation starts a run with a fresh snapshot. (Runs release
// their locks after their commit returns; runStart is the release clock
// before the run began.)
//
// Locks are never held across a device flush: runs that take them commit
// NoSync, and the compound syncs once before its reply (see runGrouped).
//
// Locks are striped by inode number: two directories of one stripe share
// a lock (a false wait, never an error).
type dirLocks struct {
	// clock counts releases; a stripe's released is the clock value of
	// its last release.
	clock   atomic.Uint64
	stripes [dirLockStripes]dirStripe
}

const (
	dirLockStripes = 256
	// dirLockWait bounds a blocking wait: a holder normally releases
	// within one run (milliseconds).
	dirLockWait = 100 * time.Millisecond
)

type dirStripe struct {
	ch       chan struct{} // capacity 1: full while held
	waiters  atomic.Int32
	released atomic.Uint64
}

func newDirLocks() *dirLocks {
	l := &dirLocks{}
	for i := range l.stripes {
		l.stripes[i].ch = make(chan struct{}, 1)
	}
	return l
}

func dirStripeOf(dir fs.Ino) int {
	// Fibonacci hashing: consecutive inode numbers spread over stripes.
	return int((uint64(dir) * 0x9E3779B97F4A7C15) >> (64 - 8))
}

// lockDir takes the lock of directory dir for the compound's current
// grouped run before an operation changes dir. It returns false when the
// run must be split before this operation (c.split is then set and the
// operation must return without doing anything). Outside grouped runs of
// plain compounds (single operations, transactional compounds, NFSv4.0
// compounds, whose OPEN and CLOSE are sequenced by owner) it does nothing.
func (c *compound) lockDir(dir fs.Ino) bool {
	l := c.s.dirLocks
	if l == nil || c.txn == nil || c.userTxn || !c.plain || c.minor == 0 {
		return true
	}
	i := dirStripeOf(dir)
	if slices.Contains(c.dirsHeld, i) {
		return true
	}
	s := &l.stripes[i]
	if len(c.dirsHeld) > 0 && c.runDone == 0 {
		// The run's first operation (a RENAME's second directory):
		// nothing to split off, so it goes on with the lock if free,
		// else without.
		select {
		case s.ch <- struct{}{}:
			c.dirsHeld = append(c.dirsHeld, i)
		default:
		}
		return true
	}
	if len(c.dirsHeld) > 0 {
		for _, h := range c.dirsHeld {
			if l.stripes[h].waiters.Load() > 0 {
				// Someone waits for a directory this run is done with
				// (or may come back to): let it go now.
				return c.splitRun()
			}
		}
		select {
		case s.ch <- struct{}{}:
			return c.tookDir(i)
		default:
			return c.splitRun()
		}
	}
	select {
	case s.ch <- struct{}{}:
		return c.tookDir(i)
	default:
	}
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	t := time.NewTimer(dirLockWait)
	defer t.Stop()
	select {
	case s.ch <- struct{}{}:
		c.s.met.dirLocks.WithLabelValues("wait").Inc()
		return c.tookDir(i)
	case <-t.C:
		c.s.met.dirLocks.WithLabelValues("timeout").Inc()
	case <-c.ctx.Done():
	}
	return true
}

// tookDir records that the run took stripe i, or, if a run released it
// after this one began and this one has already read something (its
// snapshot may predate that run's commit), gives it back and splits the
// run.
func (c *compound) tookDir(i int) bool {
	s := &c.s.dirLocks.stripes[i]
	if c.runDone > 0 && s.released.Load() > c.runStart {
		<-s.ch
		return c.splitRun()
	}
	c.dirsHeld = append(c.dirsHeld, i)
	return true
}

// startRun notes the release clock before a grouped run begins.
func (c *compound) startRun() {
	c.runDone, c.runChanged = 0, false
	if c.s.dirLocks != nil {
		c.runStart = c.s.dirLocks.clock.Load()
	}
}

// unlockDirs releases the directory locks of the compound's run (after
// its commit or abort).
func (c *compound) unlockDirs() {
	if len(c.dirsHeld) == 0 {
		return
	}
	l := c.s.dirLocks
	v := l.clock.Add(1)
	for _, i := range c.dirsHeld {
		l.stripes[i].released.Store(v)
		<-l.stripes[i].ch
	}
	c.dirsHeld = c.dirsHeld[:0]
}

// takesDirLocks reports whether a grouped run of ops may take directory
// locks.
func (c *compound) takesDirLocks(ops []decodedOp) bool {
	if c.s.dirLocks == nil || c.minor == 0 {
		return false
	}
	return slices.ContainsFunc(ops, dirOp)
}

// dirOp reports operations that take a directory lock in a grouped run.
func dirOp(op decodedOp) bool {
	switch a := op.arg.(type) {
	case *nfsv4.NfsArgop4_OP_REMOVE, *nfsv4.NfsArgop4_OP_CREATE, *nfsv4.NfsArgop4_OP_LINK,
		*nfsv4.NfsArgop4_OP_RENAME:
		return true
	case *nfsv4.NfsArgop4_OP_OPEN:
		_, create := a.Opopen.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE)
		return create
	}
	return false
}

// splitRun ends the current run before the operation asking for a lock
// (see dirLocks) and reports that the lock was not taken.
func (c *compound) splitRun() bool {
	c.split = true
	c.s.met.dirLocks.WithLabelValues("split").Inc()
	return false
}
