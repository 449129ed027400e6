package vnfs

import (
	"math/rand/v2"
	"path"
	"strings"
	"testing"
)

// TestCleanPathFastPath compares cleanPath, whose fast path returns clean
// paths as they are, with path.Clean on random paths built from slashes,
// dots and letters.
func TestCleanPathFastPath(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	parts := []string{"/", "/", ".", "..", "a", "bc", "...", ".x"}
	cases := []string{"", "/", "a", "a/", "/a", "a//b", "a/./b", "a/../b", ".", "..", "a/b/c", "a/.b", "..a/b"}
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := rng.IntN(8); n > 0; n-- {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		cases = append(cases, b.String())
	}
	for _, p := range cases {
		want := strings.TrimPrefix(path.Clean("/"+p), "/")
		got, err := cleanPath(p)
		if err != nil || got != want {
			t.Fatalf("cleanPath(%q) = %q, %v; want %q (seed %d)", p, got, err, want, seed)
		}
	}
	if _, err := cleanPath("a\x00b"); err == nil {
		t.Error("cleanPath with NUL: no error")
	}
}
