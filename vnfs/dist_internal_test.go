package vnfs

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDistMatchesComponents checks dist and depth (which walk paths in
// place) against the definitions on components, on random cleaned paths
// sharing prefixes.
func TestDistMatchesComponents(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	names := []string{"a", "b", "ab", "a.b", "bb"}
	path := func() string {
		c := make([]string, rng.IntN(5))
		for i := range c {
			c[i] = names[rng.IntN(len(names))]
		}
		return strings.Join(c, "/")
	}
	for range 20000 {
		a, b := path(), path()
		ca, cb := components(a), components(b)
		i := 0
		for i < len(ca) && i < len(cb) && ca[i] == cb[i] {
			i++
		}
		if ups, downs := dist(a, b); ups != len(ca)-i || downs != len(cb)-i {
			t.Fatalf("dist(%q, %q) = %d, %d; want %d, %d", a, b, ups, downs, len(ca)-i, len(cb)-i)
		}
		if depth(a) != len(ca) {
			t.Fatalf("depth(%q) = %d, want %d", a, depth(a), len(ca))
		}
	}
}
