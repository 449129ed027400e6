package hugepage

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestAligned(t *testing.T) {
	for _, n := range []int{1, 4096, 1<<20 + 4096, Size, 3 * Size} {
		b := Aligned(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Aligned(%d): len %d cap %d", n, len(b), cap(b))
		}
		if addr(b)%Size != 0 {
			t.Fatalf("Aligned(%d) starts at %#x", n, addr(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		for i := range b {
			if b[i] != byte(i) {
				t.Fatalf("Aligned(%d): byte %d reads back %d", n, i, b[i])
			}
		}
	}
}

// TestAdviseCollapses checks that advised buffers really end up on huge
// pages where the system supports it: the mappings holding 4 advised
// 4 MiB buffers carry at least one huge page per buffer while they live.
// (Each buffer wholly covers two 2 MiB regions, but the runtime may split
// one again — 12–14 MiB of the 16 were seen — and a process-wide count
// moves with the rest of the heap: that version of this test was flaky.)
// Skipped where THP is off or MADV_COLLAPSE is missing.
func TestAdviseCollapses(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skipf("transparent huge pages are off or unknown here (%q, %v)", b, err)
	}
	var keep [][]byte
	for range 4 {
		b := make([]byte, 2*Size)
		keep = append(keep, b)
		if !Advise(b) {
			t.Skip("MADV_COLLAPSE fails here (kernel before 6.1?)")
		}
	}
	kb := anonHugeOf(t, keep)
	runtime.KeepAlive(keep)
	if kb < 4*Size/1024 {
		t.Fatalf("the mappings of 4 advised 4 MiB buffers hold %d kB of AnonHugePages, want at least %d", kb, 4*Size/1024)
	}
}

// anonHugeOf sums AnonHugePages (kB) over the mappings (/proc/self/smaps)
// that overlap the buffers, each mapping once.
func anonHugeOf(t *testing.T, bufs [][]byte) int {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	total, in := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = false
				for _, buf := range bufs {
					if a := uint64(addr(buf)); start < a+uint64(len(buf)) && a < end {
						in = true
					}
				}
				continue
			}
		}
		if in && f[0] == "AnonHugePages:" && len(f) >= 2 {
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				t.Skipf("AnonHugePages line %q", line)
			}
			total += kb
		}
	}
	return total
}
