package occ

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// naiveIntersects is the obviously correct reference for Intersects.
func naiveIntersects(keys [][]byte, spans []Span, writes [][]byte) bool {
	for _, w := range writes {
		for _, k := range keys {
			if bytes.Equal(k, w) {
				return true
			}
		}
		for _, s := range spans {
			if bytes.Compare(w, s.Start) >= 0 && (s.End == nil || bytes.Compare(w, s.End) < 0) {
				return true
			}
		}
	}
	return false
}

func TestIntersectsMatchesNaive(t *testing.T) {
	key := rapid.SliceOfN(rapid.ByteRange(0, 4), 0, 3)
	rapid.Check(t, func(t *rapid.T) {
		var rs ReadSet
		var keys [][]byte
		var spans []Span
		for _, k := range rapid.SliceOfN(key, 0, 6).Draw(t, "keys") {
			rs.AddKey(k)
			keys = append(keys, k)
		}
		for range rapid.IntRange(0, 3).Draw(t, "nspans") {
			s := Span{Start: key.Draw(t, "start")}
			if rapid.Bool().Draw(t, "bounded") {
				s.End = key.Draw(t, "end")
			}
			rs.AddSpan(s.Start, s.End)
			spans = append(spans, s)
		}
		b := NewBuffer()
		for _, w := range rapid.SliceOfN(key.Filter(func(k []byte) bool { return len(k) > 0 }), 0, 6).Draw(t, "writes") {
			b.Set(w, nil)
		}
		writes := b.Keys()
		if got, want := rs.Intersects(writes), naiveIntersects(keys, spans, writes); got != want {
			t.Fatalf("Intersects = %v, naive = %v", got, want)
		}
	})
}

func TestLogTrim(t *testing.T) {
	l := NewLog(1 << 20)
	var rs ReadSet
	rs.AddKey([]byte("k"))
	l.Register(0)
	l.Append(1, [][]byte{[]byte("a")})
	l.Register(1)
	l.Append(2, [][]byte{[]byte("k")})
	if l.Len() != 2 {
		t.Fatalf("log has %d records, want 2 while start=0 is active", l.Len())
	}
	if !l.Conflicts(0, &rs) || !l.Conflicts(1, &rs) || l.Conflicts(2, &rs) {
		t.Fatal("wrong conflict verdicts")
	}
	l.Unregister(0)
	if l.Len() != 1 {
		t.Fatalf("log has %d records, want 1 (only seq 2 > start 1)", l.Len())
	}
	l.Unregister(1)
	if l.Len() != 0 {
		t.Fatalf("log has %d records with no active txn", l.Len())
	}
	// A txn whose records were dropped under the byte budget conflicts.
	small := NewLog(10)
	small.Register(0)
	small.Append(1, [][]byte{[]byte("a")})
	var none ReadSet
	none.AddKey([]byte("zzz"))
	if !small.Conflicts(0, &none) {
		t.Fatal("txn older than the dropped records did not conflict")
	}
}
