// Package treegen generates deterministic source-like directory trees for
// tests and benchmarks: the shape of a Linux source tree (vNFS §5.3:
// 53,640 files of mean 11.6 KB in 3,604 directories) scaled down.
//
// The shape, all drawn from one seeded generator (same Spec, same tree,
// byte for byte):
//
//   - Directory depths follow DirDepths, the share of a Linux 4.x tree's
//     directories at each depth below the root (arch/, drivers/ … at
//     depth 1; drivers/net/ethernet/intel/e1000e at depth 5; nothing
//     below depth 8). Each directory's parent is drawn among the
//     directories one level up, weighted by a heavy-tailed per-directory
//     weight, so a few directories have many subdirectories (drivers/)
//     and many have none.
//   - File depths follow FileDepths (a file at depth d lives in a
//     directory at depth d-1; most files are at depths 3–6, none deeper
//     than 9), and a file's directory is drawn among that level's
//     directories by a second heavy-tailed weight: most directories hold
//     a handful of files, a few hold hundreds (include/linux/).
//   - Sizes are log-normal around Spec.MeanSize (σ = 1.2: median ≈ 0.49 ×
//     mean, as source files have many small headers and a few large
//     files), capped at 40 × mean; one file in 50 is empty.
//   - One file in 13 is executable, one in 997 has a name with spaces
//     and non-ASCII letters, and Spec.Symlinks relative symbolic links
//     point at random files.
//
// Stats reports the depth histograms of what was generated.
package treegen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Spec describes a tree.
type Spec struct {
	Files    int // regular files
	Dirs     int // directories below the root
	MeanSize int // mean file size in bytes
	Symlinks int
	Seed     uint64
}

// LinuxLike is the Linux-source shape scaled to run in minutes.
var LinuxLike = Spec{Files: 5000, Dirs: 350, MeanSize: 12 << 10, Symlinks: 10, Seed: 1}

// DirDepths[d-1] is the share of directories at depth d (1 = a child of
// the root), estimated from a Linux 4.x source tree (~3,600 directories:
// ~20 top-level, ~500 at depth 2, ~1,150 at 3, ~1,050 at 4, ~500 at 5,
// ~200 at 6, ~80 at 7, ~20 at 8), with the top level raised from 0.6% so
// that a scaled-down tree still has several top-level directories.
var DirDepths = []float64{0.03, 0.14, 0.31, 0.29, 0.14, 0.06, 0.025, 0.005}

// FileDepths[d-1] is the share of files at depth d (1 = in the root; a
// file at depth d has d path components), estimated from the same tree.
var FileDepths = []float64{0.002, 0.03, 0.21, 0.32, 0.26, 0.12, 0.045, 0.011, 0.002}

// Stats summarizes a generated tree.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	// DirsAt[d] and FilesAt[d] count directories and regular files at
	// depth d (DirsAt[0] = 1, the root; FilesAt[1] = files in the root).
	DirsAt, FilesAt []int
	// MaxFilesInDir is the largest number of regular files in one
	// directory.
	MaxFilesInDir int
}

// Levels is the number of directory levels, the root included: the
// number of dependent READDIR rounds a breadth-first listing needs.
func (s Stats) Levels() int { return len(s.DirsAt) }

// apportion splits n over the shares by largest remainder (deterministic).
func apportion(n int, shares []float64) []int {
	var sum float64
	for _, s := range shares {
		sum += s
	}
	out := make([]int, len(shares))
	rem := make([]float64, len(shares))
	left := n
	for i, s := range shares {
		x := float64(n) * s / sum
		out[i] = int(x)
		rem[i] = x - float64(out[i])
		left -= out[i]
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	return out
}

// weighted draws an index with probability proportional to w (cum is the
// running sum of w).
func weighted(r *rand.Rand, cum []float64) int {
	x := r.Float64() * cum[len(cum)-1]
	lo, hi := 0, len(cum)-1
	for lo < hi {
		m := (lo + hi) / 2
		if cum[m] > x {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// heavy is a Pareto weight of tail index alpha: most draws near 1, a few
// many times larger.
func heavy(r *rand.Rand, alpha float64) float64 {
	return math.Pow(1-r.Float64(), -1/alpha)
}

// fileAlpha shapes the files per directory: the largest of the 351
// directories of LinuxLike holds 214 files (4%; arch/arm/boot/dts/ and
// include/linux/ hold 2-3% of Linux's), the mean is 14.
const fileAlpha = 2.0

type dirInfo struct {
	path       string
	subW, file float64 // weights as a parent and as a file's directory
	files      int
}

// Generate creates the tree under root (which must not exist).
func Generate(root string, s Spec) (Stats, error) {
	if s.Files < 0 || s.Dirs < 0 || s.MeanSize < 0 || s.Symlinks < 0 {
		return Stats{}, fmt.Errorf("treegen: negative count in %+v", s)
	}
	r := rand.New(rand.NewPCG(s.Seed, 42))
	st := Stats{DirsAt: []int{1}}
	if err := os.Mkdir(root, 0o755); err != nil {
		return st, err
	}
	levels := [][]*dirInfo{{{path: root, subW: 1, file: 1}}}
	names := []string{"drivers", "fs", "net", "arch", "lib", "include", "kernel", "mm", "sound", "tools"}
	i := 0
	// Levels left empty by rounding (small trees) are dropped, so the
	// levels stay contiguous.
	var perDepth []int
	for _, n := range apportion(s.Dirs, DirDepths) {
		if n > 0 {
			perDepth = append(perDepth, n)
		}
	}
	for d, n := range perDepth {
		up := levels[d]
		cum := make([]float64, len(up))
		var c float64
		for j, p := range up {
			c += p.subW
			cum[j] = c
		}
		var lv []*dirInfo
		for ; n > 0; n-- {
			parent := up[weighted(r, cum)]
			p := filepath.Join(parent.path, fmt.Sprintf("%s%d", names[r.IntN(len(names))], i))
			i++
			if err := os.Mkdir(p, 0o755); err != nil {
				return st, err
			}
			lv = append(lv, &dirInfo{path: p, subW: heavy(r, 1.1), file: heavy(r, fileAlpha)})
			st.Dirs++
		}
		levels = append(levels, lv)
		st.DirsAt = append(st.DirsAt, len(lv))
	}
	// A file at depth d goes to a directory of level d-1; depths past the
	// deepest level are folded onto it.
	fileShares := make([]float64, len(levels))
	for d, f := range FileDepths {
		fileShares[min(d, len(levels)-1)] += f
	}
	cums := make([][]float64, len(levels))
	for d, lv := range levels {
		var c float64
		for _, di := range lv {
			c += di.file
			cums[d] = append(cums[d], c)
		}
	}
	st.FilesAt = make([]int, len(levels)+1)
	perLevel := apportion(s.Files, fileShares)
	// Interleave the levels so that file numbers do not follow depth.
	var order []int
	for d, n := range perLevel {
		for ; n > 0; n-- {
			order = append(order, d)
		}
	}
	r.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })

	exts := []string{".c", ".h", ".S", "", ".txt", ".rst"}
	const sigma = 1.2
	mu := math.Log(float64(max(s.MeanSize, 1))) - sigma*sigma/2
	var files []string
	for i, d := range order {
		di := levels[d][weighted(r, cums[d])]
		name := fmt.Sprintf("file%05d%s", i, exts[r.IntN(len(exts))])
		if i%997 == 5 {
			name = fmt.Sprintf("odd name %d ünïcode", i)
		}
		size := 0
		if i%50 != 0 && s.MeanSize > 0 { // a few empty files
			size = min(int(math.Exp(mu+sigma*r.NormFloat64())), 40*s.MeanSize)
		}
		data := make([]byte, size)
		for j := range data {
			data[j] = "abcdefghijklmnopqrstuvwxyz \n{}();=+-*/0123456789"[r.IntN(48)]
		}
		p := filepath.Join(di.path, name)
		mode := os.FileMode(0o644)
		if i%13 == 0 {
			mode = 0o755
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return st, err
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			return st, err
		}
		files = append(files, p)
		di.files++
		st.MaxFilesInDir = max(st.MaxFilesInDir, di.files)
		st.FilesAt[d+1]++
		st.Files++
		st.Bytes += int64(size)
	}
	for len(st.FilesAt) > 1 && st.FilesAt[len(st.FilesAt)-1] == 0 {
		st.FilesAt = st.FilesAt[:len(st.FilesAt)-1]
	}
	var all []*dirInfo
	for _, lv := range levels {
		all = append(all, lv...)
	}
	for i := 0; i < s.Symlinks && len(files) > 0; i++ {
		target := files[r.IntN(len(files))]
		d := all[r.IntN(len(all))].path
		rel, err := filepath.Rel(d, target)
		if err != nil {
			return st, err
		}
		if err := os.Symlink(rel, filepath.Join(d, fmt.Sprintf("link%d", i))); err != nil {
			return st, err
		}
		st.Symlinks++
	}
	return st, nil
}
