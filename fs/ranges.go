package fs

import (
	"slices"
)

// rng is the byte range [start, end).
type rng struct {
	_          struct{} `cbor:",toarray"`
	Start, End uint64
}

// ranges is a set of byte ranges, sorted and non-overlapping once
// normalized.
type ranges []rng

func (r ranges) total() uint64 {
	var n uint64
	for _, x := range r {
		n += x.End - x.Start
	}
	return n
}

// normalize sorts and merges overlapping or touching ranges.
func (r ranges) normalize() ranges {
	r = slices.Clone(r)
	slices.SortFunc(r, func(a, b rng) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	var out ranges
	for _, x := range r {
		if x.End <= x.Start {
			continue
		}
		if n := len(out); n > 0 && x.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, x.End)
			continue
		}
		out = append(out, x)
	}
	return out
}

func (r ranges) union(o ranges) ranges { return append(slices.Clone(r), o...).normalize() }

// subtract returns r minus o (both normalized).
func (r ranges) subtract(o ranges) ranges {
	var out ranges
	for _, x := range r {
		cur := x.Start
		for _, y := range o {
			if y.End <= cur || y.Start >= x.End {
				continue
			}
			if y.Start > cur {
				out = append(out, rng{Start: cur, End: y.Start})
			}
			cur = max(cur, y.End)
		}
		if cur < x.End {
			out = append(out, rng{Start: cur, End: x.End})
		}
	}
	return out
}

// intersect returns the ranges in both r and o (both normalized).
func (r ranges) intersect(o ranges) ranges {
	var out ranges
	for _, x := range r {
		for _, y := range o {
			s, e := max(x.Start, y.Start), min(x.End, y.End)
			if s < e {
				out = append(out, rng{Start: s, End: e})
			}
		}
	}
	return out.normalize()
}
