package meta_test

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/txnfs/txnfs/meta"
)

// TestCookieValue: layout-4 cookie values round-trip; a bare name (the
// value before layout 4) decodes with Full false; truncated or otherwise
// bad values are ErrCorrupt, never a panic.
func TestCookieValue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := meta.CookieEntry{
			Name: rapid.StringMatching(`[^/\x00]{1,40}`).Draw(t, "name"),
			Full: true,
			Ino:  rapid.Uint64Min(1).Draw(t, "ino"),
			Type: rapid.Uint8Range(1, 7).Draw(t, "type"),
			Gen:  rapid.Uint64().Draw(t, "gen"),
		}
		b := meta.CookieValue(e)
		got, err := meta.ParseCookieValue(b)
		if err != nil || got != e {
			t.Fatalf("%+v encodes as %x, decodes as %+v, %v", e, b, got, err)
		}
		old, err := meta.ParseCookieValue([]byte(e.Name))
		if err != nil || old != (meta.CookieEntry{Name: e.Name}) {
			t.Fatalf("bare name %q decodes as %+v, %v", e.Name, old, err)
		}
		for n := 0; n < len(b)-len(e.Name); n++ { // cut before the name
			if _, err := meta.ParseCookieValue(b[:n]); !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("%x cut to %d bytes: %v, want ErrCorrupt", b, n, err)
			}
		}
	})
	for _, bad := range [][]byte{{0, 0, 1, 1, 'a'}, {0, 1, 1, 0, 'a'}, {0, 1, 1, 8, 'a'}} {
		if _, err := meta.ParseCookieValue(bad); !errors.Is(err, meta.ErrCorrupt) {
			t.Fatalf("%x: %v, want ErrCorrupt", bad, err)
		}
	}
}
