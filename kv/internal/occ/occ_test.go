package occ

import (
	"bytes"
	"slices"
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

// TestBufferMatchesModel interleaves writes with point reads and ordered
// reads (Entries, Keys, range scans), which sort and merge the entries
// added since the previous ordered read, and checks each against a map.
func TestBufferMatchesModel(t *testing.T) {
	key := rapid.SliceOfN(rapid.ByteRange(0, 5), 1, 3)
	rapid.Check(t, func(t *rapid.T) {
		b := NewBuffer()
		model := map[string]Entry{}
		sortedModel := func(start, end []byte) []Entry {
			var out []Entry
			for _, e := range model {
				if bytes.Compare(e.Key, start) >= 0 && (end == nil || bytes.Compare(e.Key, end) < 0) {
					out = append(out, e)
				}
			}
			slices.SortFunc(out, func(x, y Entry) int { return bytes.Compare(x.Key, y.Key) })
			return out
		}
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				k, v := key.Draw(t, "k"), rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "v")
				b.Set(k, v)
				model[string(k)] = Entry{Key: bytes.Clone(k), Value: bytes.Clone(v)}
				k[0]++ // the buffer copied it
			case 2:
				k := key.Draw(t, "k")
				b.Delete(k)
				model[string(k)] = Entry{Key: bytes.Clone(k), Deleted: true}
			case 3:
				k := key.Draw(t, "k")
				got, ok := b.Get(k)
				want, wok := model[string(k)]
				if ok != wok || ok && (got.Deleted != want.Deleted || !bytes.Equal(got.Value, want.Value)) {
					t.Fatalf("Get(%q) = %+v, %v; want %+v, %v", k, got, ok, want, wok)
				}
			case 4:
				start := key.Draw(t, "start")
				var end []byte
				if rapid.Bool().Draw(t, "bounded") {
					end = key.Draw(t, "end")
				}
				got, want := b.rangeEntries(start, end), sortedModel(start, end)
				if !entriesEqual(got, want) {
					t.Fatalf("range [%q, %q) = %+v; want %+v", start, end, got, want)
				}
			case 5:
				got, want := b.Entries(), sortedModel(nil, nil)
				if !entriesEqual(got, want) {
					t.Fatalf("Entries = %+v; want %+v", got, want)
				}
				keys := b.Keys()
				if len(keys) != len(want) {
					t.Fatalf("Keys: %d keys, want %d", len(keys), len(want))
				}
				for i := range keys {
					if !bytes.Equal(keys[i], want[i].Key) {
						t.Fatalf("Keys[%d] = %q, want %q", i, keys[i], want[i].Key)
					}
				}
			}
			if b.Len() != len(model) {
				t.Fatalf("Len = %d, want %d", b.Len(), len(model))
			}
			n := 0
			for _, e := range model {
				n += len(e.Key) + len(e.Value)
			}
			if b.Bytes() != n {
				t.Fatalf("Bytes = %d, want %d", b.Bytes(), n)
			}
		}
	})
}

func entriesEqual(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || a[i].Deleted != b[i].Deleted || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
