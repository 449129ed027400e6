// Package byterange is sets of byte ranges of a file: the garbage
// collector's candidate and freed lists (fs, persisted in its state
// record) and the slice store's reuse pool (slice). One implementation of
// the set arithmetic for both.
package byterange

import (
	"cmp"
	"slices"
)

// Range is the byte range [Start, End). It encodes as a CBOR array of two
// (the collector's persistent state).
type Range struct {
	_          struct{} `cbor:",toarray"`
	Start, End uint64
}

// Len returns the number of bytes in r (0 if r is empty or inverted).
func (r Range) Len() uint64 {
	if r.End <= r.Start {
		return 0
	}
	return r.End - r.Start
}

// Set is a set of byte ranges. Normalize makes it canonical: sorted, with
// no empty, overlapping or touching ranges. Subtract and Intersect take
// normalized sets.
type Set []Range

// Of returns the set holding [start, end).
func Of(start, end uint64) Set { return Set{{Start: start, End: end}} }

// Total returns the bytes in s (normalized).
func (s Set) Total() uint64 {
	var n uint64
	for _, r := range s {
		n += r.Len()
	}
	return n
}

// Normalize returns s sorted, with empty ranges dropped and overlapping or
// touching ranges merged. s is not modified.
func (s Set) Normalize() Set {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b Range) int { return cmp.Compare(a.Start, b.Start) })
	var out Set
	for _, r := range s {
		if r.End <= r.Start {
			continue
		}
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// Union returns s ∪ o, normalized.
func (s Set) Union(o Set) Set { return append(slices.Clone(s), o...).Normalize() }

// Subtract returns s minus o (both normalized), normalized.
func (s Set) Subtract(o Set) Set {
	var out Set
	for _, r := range s {
		cur := r.Start
		for _, x := range o {
			if x.End <= cur || x.Start >= r.End {
				continue
			}
			if x.Start > cur {
				out = append(out, Range{Start: cur, End: x.Start})
			}
			cur = max(cur, x.End)
		}
		if cur < r.End {
			out = append(out, Range{Start: cur, End: r.End})
		}
	}
	return out
}

// Intersect returns s ∩ o (both normalized), normalized.
func (s Set) Intersect(o Set) Set {
	var out Set
	for _, r := range s {
		for _, x := range o {
			if lo, hi := max(r.Start, x.Start), min(r.End, x.End); lo < hi {
				out = append(out, Range{Start: lo, End: hi})
			}
		}
	}
	return out.Normalize()
}
