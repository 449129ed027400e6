package meta

import (
	"math/rand/v2"
	"testing"
)

// TestDirentDecodeFast checks Dirent.decodeFast against the generic
// decoder: every encoding Marshal makes takes the fast path and decodes
// to the same record, and on random mutations of those encodings the fast
// path, when it accepts, agrees with the generic decoder (FuzzDirentFast
// explores further).
func TestDirentDecodeFast(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 4))
	vals := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	pick := func() uint64 {
		if rng.IntN(2) == 0 {
			return vals[rng.IntN(len(vals))]
		}
		return rng.Uint64() >> rng.IntN(64)
	}
	for range 3000 {
		d := Dirent{Ino: pick(), Type: uint8(pick()), Cookie: pick()}
		b, err := Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		var got Dirent
		if !got.decodeFast(b[1:]) || got != d {
			t.Fatalf("%+v: fast path %+v (encoding %x)", d, got, b)
		}
		for range 4 {
			m := append([]byte{}, b[1:]...)
			switch rng.IntN(3) {
			case 0:
				m[rng.IntN(len(m))] = byte(rng.Uint32())
			case 1:
				m = m[:rng.IntN(len(m))]
			case 2:
				m = append(m, byte(rng.Uint32()))
			}
			fastAgrees[Dirent](t, m)
		}
	}
}

// fastAgrees fails t if the hand decoder of T (decodeFast) accepts b and
// the generic decoder rejects it or decodes something else.
func fastAgrees[T comparable, P interface {
	*T
	decodeFast([]byte) bool
}](t *testing.T, b []byte) {
	t.Helper()
	var fast, slow T
	if !P(&fast).decodeFast(b) {
		return
	}
	if err := decMode.Unmarshal(b, &slow); err != nil {
		t.Fatalf("%x: fast path decoded %+v, generic decoder: %v", b, fast, err)
	}
	if fast != slow {
		t.Fatalf("%x: fast path %+v, generic %+v", b, fast, slow)
	}
}

func FuzzDirentFast(f *testing.F) {
	for _, d := range []Dirent{{Ino: 2, Type: 2, Cookie: 3}, {Ino: 1 << 40, Type: 1, Cookie: 1 << 33}, {Ino: 300, Type: 7, Cookie: 70000}} {
		b, _ := Marshal(&d)
		f.Add(b[1:])
	}
	f.Fuzz(fastAgrees[Dirent])
}
