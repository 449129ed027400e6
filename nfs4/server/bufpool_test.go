package server

import (
	"testing"

	"github.com/txnfs/txnfs/internal/bufpool"
)

// TestBufClasses: a READ buffer comes from the smallest power-of-two
// class that holds it (at least 4 KiB, at most MaxIO, also when MaxIO is
// not a power of two), and putBuf files it under the class getBuf takes
// it from.
func TestBufClasses(t *testing.T) {
	for _, maxIO := range []uint32{1 << 20, 3 << 19, 4096} {
		s := &Server{cfg: Config{MaxIO: maxIO}, readBufs: bufpool.New(4<<10, int(maxIO))}
		for _, n := range []uint32{0, 1, 4096, 4097, 12 << 10, 64 << 10, 1<<20 - 1, maxIO} {
			if n > maxIO {
				continue
			}
			b := s.getBuf(n)
			if uint32(len(*b)) != n || uint32(cap(*b)) < n || uint32(cap(*b)) > maxIO {
				t.Fatalf("MaxIO %d: getBuf(%d) has len %d cap %d", maxIO, n, len(*b), cap(*b))
			}
			if n > 4096 && uint32(cap(*b)) >= 2*n {
				t.Fatalf("MaxIO %d: getBuf(%d) has cap %d, not the smallest class", maxIO, n, cap(*b))
			}
			s.putBuf(b)
			k, _ := s.readBufs.Class(int(n))
			b2 := s.getBuf(n)
			if k2, _ := s.readBufs.Class(cap(*b2)); k2 != k {
				t.Fatalf("MaxIO %d: buffer for %d bytes came from class %d, want %d", maxIO, n, k2, k)
			}
		}
	}
}
