package fs

import (
	"cmp"
	"slices"
	"sync"
)

// spanHintsMax bounds the span bounds remembered by spanHints; past it
// the whole map is dropped (hints are only hints).
const spanHintsMax = 1 << 17

// spanHints remembers the bounds of span records recently read or
// written, by file, so that finding the record holding an offset is
// usually one kv Get of the remembered key instead of a range scan (a
// pebble scan cannot use bloom filters and costs several times a Get).
//
// A hint is verified by the Get: the key names its record's bounds, and a
// file's records never overlap, so if the key exists in the transaction's
// view it is the record holding the offset there. The point read is
// enough for serializability: any transaction that changes which record
// holds an offset in [start, last] (write, punch, truncate, split, merge,
// a copy into the file) rewrites or deletes that key, so it conflicts with
// the reader. A missing key falls back to the scan.
type spanHints struct {
	mu sync.Mutex
	m  map[Ino][]spanHint // each sorted by start, disjoint
	n  int
}

type spanHint struct{ start, last uint64 }

// find returns the remembered record of ino holding offset off.
func (h *spanHints) find(ino Ino, off uint64) (start, last uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.m[ino]
	i, _ := slices.BinarySearchFunc(l, off, func(x spanHint, off uint64) int { return cmp.Compare(x.last, off) })
	if i < len(l) && l[i].start <= off {
		return l[i].start, l[i].last, true
	}
	return 0, 0, false
}

// add remembers record [start, last] of ino, forgetting those it overlaps.
func (h *spanHints) add(ino Ino, start, last uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || h.n >= spanHintsMax {
		h.m, h.n = map[Ino][]spanHint{}, 0
	}
	l := h.m[ino]
	i, _ := slices.BinarySearchFunc(l, start, func(x spanHint, start uint64) int { return cmp.Compare(x.last, start) })
	j := i
	for j < len(l) && l[j].start <= last {
		j++
	}
	if j == i+1 && l[i] == (spanHint{start, last}) {
		return
	}
	h.m[ino] = slices.Replace(l, i, j, spanHint{start, last})
	h.n += 1 - (j - i)
}

// remove forgets record [start, last] of ino.
func (h *spanHints) remove(ino Ino, start, last uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.m[ino]
	i, found := slices.BinarySearchFunc(l, start, func(x spanHint, start uint64) int { return cmp.Compare(x.start, start) })
	if found && l[i].last == last {
		h.m[ino] = slices.Delete(l, i, i+1)
		h.n--
		if len(h.m[ino]) == 0 {
			delete(h.m, ino)
		}
	}
}
