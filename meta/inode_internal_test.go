package meta

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestInodeDecodeFast checks Inode.decodeFast against the generic
// decoder: every encoding Marshal makes takes the fast path and decodes
// to the same record, and on random mutations of those encodings (and on
// older layouts' encodings, which it must leave alone) the fast path,
// when it accepts, agrees with the generic decoder (FuzzInodeFast
// explores further).
func TestInodeDecodeFast(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	vals := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	pick := func() uint64 {
		if rng.IntN(2) == 0 {
			return vals[rng.IntN(len(vals))]
		}
		return rng.Uint64() >> rng.IntN(64)
	}
	pickTime := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return []int64{0, -1, -24, -25, -256, -257, math.MinInt64, math.MaxInt64}[rng.IntN(8)]
		case 1:
			return -int64(pick() >> 1)
		}
		return int64(pick() >> 1)
	}
	targets := []string{"", "a", "../some/where", string(make([]byte, 23)), string(make([]byte, 24)), string(make([]byte, 300)), "ünïcødé"}
	for range 3000 {
		n := Inode{Type: uint8(pick()), Mode: uint32(pick()), Nlink: uint32(pick()), Uid: uint32(pick()), Gid: uint32(pick()),
			Size: pick(), Rdev: pick(), Atime: pickTime(), Mtime: pickTime(), Ctime: pickTime(), Btime: pickTime(),
			Change: pick(), Gen: pick(), Parent: pick(), NextCookie: pick(), Target: targets[rng.IntN(len(targets))],
			Used: pick(), Spans: pick(), OpenStart: pick()}
		b, err := Marshal(&n)
		if err != nil {
			t.Fatal(err)
		}
		var got Inode
		if !got.decodeFast(b[1:]) || got != n {
			t.Fatalf("%+v: fast path %+v (encoding %x)", n, got, b)
		}
		for _, old := range []func(*Inode) ([]byte, error){MarshalInodeV3, MarshalInodeV1} {
			ob, err := old(&n)
			if err != nil {
				t.Fatal(err)
			}
			if got.decodeFast(ob[1:]) {
				t.Fatalf("fast path accepted an older layout's encoding %x", ob)
			}
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
			fastAgrees[Inode](t, m)
		}
	}
	// Invalid UTF-8 in the target: the generic decoder rejects it, so the
	// fast path must not accept it.
	n := Inode{Type: 3, Target: "ab"}
	b, _ := Marshal(&n)
	for i := range b {
		if b[i] == 'a' && b[i+1] == 'b' {
			b[i] = 0xff
		}
	}
	var got Inode
	if got.decodeFast(b[1:]) {
		t.Fatalf("fast path accepted invalid UTF-8: %x", b)
	}
	if Unmarshal(b, &got) == nil {
		t.Fatalf("Unmarshal accepted invalid UTF-8: %x", b)
	}
}

func FuzzInodeFast(f *testing.F) {
	for _, n := range []Inode{{Type: 1, Mode: 0o644, Nlink: 1, Size: 12 << 10, Atime: -5, Mtime: 1 << 60, Gen: 7, Spans: 2, OpenStart: 4096},
		{Type: 3, Mode: 0o777, Target: "x/y"}, {Type: 2, Nlink: 2, Parent: 1, NextCookie: 300}} {
		b, _ := Marshal(&n)
		f.Add(b[1:])
	}
	f.Fuzz(fastAgrees[Inode])
}
