package hugepage

import (
	"os"
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

// TestAdviseCollapses checks that a 2 MiB-aligned buffer really ends up on
// a huge page where the system supports it: AnonHugePages of the process
// grows. Skipped where THP is off or MADV_COLLAPSE is missing.
func TestAdviseCollapses(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skipf("transparent huge pages are off or unknown here (%q, %v)", b, err)
	}
	before := anonHuge(t)
	var keep [][]byte
	for range 4 {
		b := make([]byte, 2*Size)
		keep = append(keep, b)
		if !Advise(b) {
			t.Skip("MADV_COLLAPSE fails here (kernel before 6.1?)")
		}
	}
	if after := anonHuge(t); after < before+4*Size/1024 {
		t.Fatalf("AnonHugePages %d kB -> %d kB after advising 4 buffers of 4 MiB", before, after)
	}
	_ = keep
}

// anonHuge returns the process's AnonHugePages in kB (smaps_rollup).
func anonHuge(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Skipf("AnonHugePages line %q", line)
			}
			return kb
		}
	}
	t.Skip("no AnonHugePages in smaps_rollup")
	return 0
}
