// Package treegen generates deterministic source-like directory trees for
// tests and benchmarks: many small files whose sizes follow a skewed
// distribution around a mean, spread over nested directories, plus
// symbolic links and a few empty files — the shape of a Linux source tree
// scaled down (vNFS §5.3: 53,640 files of mean 11.6 KB in 3,604 dirs).
package treegen

import (
	"fmt"
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

// Stats summarizes a generated tree.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
}

// Generate creates the tree under root (which must not exist).
func Generate(root string, s Spec) (Stats, error) {
	r := rand.New(rand.NewPCG(s.Seed, 42))
	var st Stats
	if err := os.Mkdir(root, 0o755); err != nil {
		return st, err
	}
	dirs := []string{root}
	for i := 0; i < s.Dirs; i++ {
		// Parents are picked among recent directories so that the tree
		// is several levels deep and bushy, like a source tree.
		parent := dirs[len(dirs)-1-r.IntN(min(len(dirs), 8))]
		if r.IntN(4) == 0 {
			parent = dirs[r.IntN(len(dirs))]
		}
		name := fmt.Sprintf("%s%d", []string{"drivers", "fs", "net", "arch", "lib", "include", "kernel", "mm"}[r.IntN(8)], i)
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return st, err
		}
		dirs = append(dirs, d)
		st.Dirs++
	}
	exts := []string{".c", ".h", ".S", "", ".txt", ".rst"}
	var files []string
	for i := 0; i < s.Files; i++ {
		d := dirs[r.IntN(len(dirs))]
		name := fmt.Sprintf("file%05d%s", i, exts[r.IntN(len(exts))])
		if i%997 == 5 {
			name = fmt.Sprintf("odd name %d ünïcode", i)
		}
		size := 0
		if i%50 != 0 { // a few empty files
			// Exponential around the mean, capped at 40x.
			size = min(int(r.ExpFloat64()*float64(s.MeanSize)), 40*s.MeanSize)
		}
		data := make([]byte, size)
		for j := range data {
			data[j] = "abcdefghijklmnopqrstuvwxyz \n{}();=+-*/0123456789"[r.IntN(48)]
		}
		p := filepath.Join(d, name)
		mode := os.FileMode(0o644)
		if i%13 == 0 {
			mode = 0o755
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return st, err
		}
		os.Chmod(p, mode)
		files = append(files, p)
		st.Files++
		st.Bytes += int64(size)
	}
	for i := 0; i < s.Symlinks && len(files) > 0; i++ {
		target := files[r.IntN(len(files))]
		d := dirs[r.IntN(len(dirs))]
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
