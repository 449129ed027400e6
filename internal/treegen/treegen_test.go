package treegen

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// digest hashes every name, type, mode, link target and content of the
// tree, in path order.
func digest(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%v\x00", rel, info.Mode())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00", tgt)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// scan measures a tree on disk.
func scan(t *testing.T, root string) (st Stats, sizes []int) {
	t.Helper()
	perDir := map[string]int{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		depth := 0
		if rel != "." {
			depth = strings.Count(rel, string(filepath.Separator)) + 1
		}
		switch {
		case d.IsDir():
			for len(st.DirsAt) <= depth {
				st.DirsAt = append(st.DirsAt, 0)
			}
			st.DirsAt[depth]++
			if depth > 0 {
				st.Dirs++
			}
		case d.Type()&fs.ModeSymlink != 0:
			st.Symlinks++
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			for len(st.FilesAt) <= depth {
				st.FilesAt = append(st.FilesAt, 0)
			}
			st.FilesAt[depth]++
			st.Files++
			st.Bytes += info.Size()
			sizes = append(sizes, int(info.Size()))
			perDir[filepath.Dir(p)]++
			st.MaxFilesInDir = max(st.MaxFilesInDir, perDir[filepath.Dir(p)])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, sizes
}

// TestLinuxLikeShape generates treegen.LinuxLike and checks its shape
// against the Linux source tree it stands for: at most 10 levels, most
// files at depths 3–6, the mean size, a few large directories; and that
// Stats describes what is on disk. It prints the histograms (go test -v)
// that docs/vnfs.md quotes.
func TestLinuxLikeShape(t *testing.T) {
	s := LinuxLike
	if testing.Short() {
		s.MeanSize = 1 << 10 // the shape does not depend on the sizes
	}
	root := filepath.Join(t.TempDir(), "linux")
	st, err := Generate(root, s)
	if err != nil {
		t.Fatal(err)
	}
	disk, sizes := scan(t, root)
	if fmt.Sprint(disk.DirsAt, disk.FilesAt, disk.Files, disk.Dirs, disk.Symlinks, disk.Bytes, disk.MaxFilesInDir) !=
		fmt.Sprint(st.DirsAt, st.FilesAt, st.Files, st.Dirs, st.Symlinks, st.Bytes, st.MaxFilesInDir) {
		t.Fatalf("Stats %+v, on disk %+v", st, disk)
	}
	if st.Files != s.Files || st.Dirs != s.Dirs || st.Symlinks != s.Symlinks {
		t.Fatalf("generated %+v for %+v", st, s)
	}
	sort.Ints(sizes)
	mean := float64(st.Bytes) / float64(st.Files)
	t.Logf("%d files, %d dirs, %d symlinks, %d bytes (mean %.0f, median %d, p90 %d, max %d); %d levels; dirs per depth %v; files per depth %v; most files in one dir %d",
		st.Files, st.Dirs, st.Symlinks, st.Bytes, mean, sizes[len(sizes)/2], sizes[len(sizes)*9/10], sizes[len(sizes)-1],
		st.Levels(), st.DirsAt, st.FilesAt, st.MaxFilesInDir)
	if st.Levels() > 10 || st.Levels() < 7 {
		t.Errorf("%d directory levels, want 7-10 (Linux: 9)", st.Levels())
	}
	mid := 0
	for d := 3; d <= 6 && d < len(st.FilesAt); d++ {
		mid += st.FilesAt[d]
	}
	if float64(mid) < 0.8*float64(st.Files) {
		t.Errorf("%d of %d files at depths 3-6, want most (Linux: ~90%%)", mid, st.Files)
	}
	if len(st.FilesAt) > 10 {
		t.Errorf("files down to depth %d, want at most 9", len(st.FilesAt)-1)
	}
	if mean < 0.85*float64(s.MeanSize) || mean > 1.15*float64(s.MeanSize) {
		t.Errorf("mean size %.0f, want %d ± 15%%", mean, s.MeanSize)
	}
	if med := sizes[len(sizes)/2]; float64(med) > 0.7*mean {
		t.Errorf("median size %d, want well under the mean %.0f (skewed)", med, mean)
	}
	// Skewed directories: a few hold many times the mean.
	if avg := float64(st.Files) / float64(st.Dirs+1); float64(st.MaxFilesInDir) < 5*avg {
		t.Errorf("largest directory holds %d files, mean %.1f: not skewed", st.MaxFilesInDir, avg)
	}
}

// TestDeterministic: the same Spec gives the same tree byte for byte, and
// another seed another tree.
func TestDeterministic(t *testing.T) {
	s := Spec{Files: 400, Dirs: 40, MeanSize: 2000, Symlinks: 5, Seed: 9}
	dir := t.TempDir()
	var sums []string
	for i, seed := range []uint64{9, 9, 10} {
		s.Seed = seed
		root := filepath.Join(dir, fmt.Sprint(i))
		if _, err := Generate(root, s); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, digest(t, root))
	}
	if sums[0] != sums[1] {
		t.Errorf("same spec, different trees: %s %s", sums[0], sums[1])
	}
	if sums[0] == sums[2] {
		t.Errorf("seeds 9 and 10 gave the same tree")
	}
}

// TestSmallSpecs: tiny and degenerate specs give contiguous levels and
// exact counts; bad input is an error.
func TestSmallSpecs(t *testing.T) {
	dir := t.TempDir()
	for i, s := range []Spec{
		{Files: 0, Dirs: 0},
		{Files: 5, Dirs: 0, MeanSize: 10},
		{Files: 3, Dirs: 1, MeanSize: 10, Symlinks: 2},
		{Files: 30, Dirs: 5, MeanSize: 100},
		{Files: 300, Dirs: 25, MeanSize: 100, Symlinks: 10, Seed: 3},
	} {
		root := filepath.Join(dir, fmt.Sprint(i))
		st, err := Generate(root, s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		disk, _ := scan(t, root)
		if disk.Files != s.Files || disk.Dirs != s.Dirs || disk.Symlinks != s.Symlinks || fmt.Sprint(disk.DirsAt) != fmt.Sprint(st.DirsAt) {
			t.Errorf("%+v: on disk %+v, Stats %+v", s, disk, st)
		}
		for d, n := range disk.DirsAt {
			if n == 0 {
				t.Errorf("%+v: no directory at depth %d of %v", s, d, disk.DirsAt)
			}
		}
	}
	if _, err := Generate(filepath.Join(dir, "bad"), Spec{Files: -1}); err == nil {
		t.Error("negative file count accepted")
	}
	if _, err := Generate(filepath.Join(dir, "0"), Spec{}); err == nil {
		t.Error("existing root accepted")
	}
}
