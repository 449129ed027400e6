package byterange

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// TestSetModel checks Normalize, Union, Subtract and Intersect against a
// bitmap of the bytes in [0, 64) on random sets (seed printed).
func TestSetModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	random := func() Set {
		var s Set
		for range rnd.IntN(5) {
			a, b := rnd.Uint64N(64), rnd.Uint64N(64)
			s = append(s, Range{Start: a, End: b}) // inverted or empty ones too
		}
		return s
	}
	bits := func(s Set) (m uint64) {
		for _, r := range s {
			for i := r.Start; i < r.End; i++ {
				m |= 1 << i
			}
		}
		return m
	}
	canonical := func(s Set) bool {
		for i, r := range s {
			if r.Start >= r.End || (i > 0 && r.Start <= s[i-1].End) {
				return false
			}
		}
		return true
	}
	for i := range 2000 {
		a, b := random().Normalize(), random().Normalize()
		for _, c := range []struct {
			name string
			got  Set
			want uint64
		}{
			{"union", a.Union(b), bits(a) | bits(b)},
			{"subtract", a.Subtract(b), bits(a) &^ bits(b)},
			{"intersect", a.Intersect(b), bits(a) & bits(b)},
		} {
			if bits(c.got) != c.want || !canonical(c.got) {
				t.Fatalf("round %d: %v %s %v = %v", i, a, c.name, b, c.got)
			}
			var n uint64
			for m := c.want; m != 0; m &= m - 1 {
				n++
			}
			if c.got.Total() != n {
				t.Fatalf("round %d: Total(%v) = %d, want %d", i, c.got, c.got.Total(), n)
			}
		}
	}
}

// TestEncoding: a Range is a CBOR array of two, as the collector's state
// record has always stored it (before this package, fs's own range type
// with the same tag), so state written by older engines still decodes.
func TestEncoding(t *testing.T) {
	b, err := cbor.Marshal(Set{{Start: 1, End: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x81, 0x82, 0x01, 0x02}; !bytes.Equal(b, want) {
		t.Fatalf("encoding %x, want %x", b, want)
	}
	var s Set
	if err := cbor.Unmarshal(b, &s); err != nil || len(s) != 1 || s[0].Start != 1 || s[0].End != 2 {
		t.Fatalf("decoded %v, %v", s, err)
	}
}
