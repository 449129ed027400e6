package server

import (
	"context"
	"sync"

	"github.com/txnfs/txnfs/fs"
)

// usedCache remembers the space_used of regular files by inode,
// generation and change attribute, so that a GETATTR asking for it
// (every Linux client's does) reads the inode record alone instead of
// also scanning the file's chunk records: for the 4 KiB file of the
// nfsbench GETATTR workload that scan, which copies the chunk record with
// its inline data, was a third of the server's CPU per compound
// (docs/nfs-server.md, "Session 4").
//
// It relies on an engine invariant: every committed change of a regular
// file's chunk records (write, truncate, hole punching, clone, copy)
// increments the inode's change attribute in the same commit, and inode
// numbers are never reused, so one (inode, generation, change) of a
// committed state always has the same space_used. Entries are therefore
// stored and used only where the inode read is of a committed state: a
// read-only snapshot, or a transaction (OP_TXN compound, grouped run of a
// plain one) that has changed nothing yet (compound.txnUnchanged). There
// the change attribute is read along (and logged for replay: if the file
// changes before the commit, the transaction re-executes). In a
// transaction that changed something, the file's own uncommitted change
// value may name a different state than the one that later commits with
// it, so the cache is not asked. TestUsedCacheTracksChanges compares the
// cached path with the uncached one after each kind of change.
type usedCache struct {
	mu sync.Mutex
	m  map[fs.Ino]usedEntry
}

type usedEntry struct{ gen, change, used uint64 }

// usedCacheMax bounds the entries (about 40 bytes each); beyond it an
// arbitrary entry is dropped per insertion.
const usedCacheMax = 1 << 14

func (u *usedCache) get(ino fs.Ino, gen, change uint64) (uint64, bool) {
	u.mu.Lock()
	e, ok := u.m[ino]
	u.mu.Unlock()
	if !ok || e.gen != gen || e.change != change {
		return 0, false
	}
	return e.used, true
}

func (u *usedCache) put(ino fs.Ino, gen, change, used uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[fs.Ino]usedEntry)
	}
	if _, ok := u.m[ino]; !ok && len(u.m) >= usedCacheMax {
		for k := range u.m {
			delete(u.m, k)
			break
		}
	}
	u.m[ino] = usedEntry{gen: gen, change: change, used: used}
}

// attrUsedCached is t.GetAttrMask(ctx, ino, m) for a mask with AttrUsed,
// taking space_used from the cache when the file's (generation, change)
// match. t must read a committed state (see usedCache).
func (s *Server) attrUsedCached(ctx context.Context, t *fs.Txn, ino fs.Ino, m fs.AttrMask) (fs.Attr, error) {
	a, err := t.GetAttrMask(ctx, ino, m&^fs.AttrUsed|fs.AttrChange)
	if err != nil {
		return a, err
	}
	if a.Type != fs.TypeRegular {
		return t.GetAttrMask(ctx, ino, m) // no scan: the inode is read already
	}
	if used, ok := s.used.get(ino, a.Gen, a.Change); ok {
		a.Used = used
	} else {
		if a, err = t.GetAttrMask(ctx, ino, m|fs.AttrChange); err != nil {
			return a, err
		}
		s.used.put(ino, a.Gen, a.Change, a.Used)
	}
	if m&fs.AttrChange == 0 {
		a.Change = 0
	}
	return a, nil
}
