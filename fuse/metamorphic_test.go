//go:build linux

package fuse

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	metaSeed = flag.Uint64("meta.seed", 0, "seed of TestMetamorphic (0: random, logged)")
	metaOps  = flag.Int("meta.ops", 3000, "operations of TestMetamorphic")
)

// TestMetamorphic applies one random sequence of file system calls to a
// local directory and to a mount, and requires the same result (errno,
// data, attributes) from both after every call; a failure prints the seed
// (rerun with -args -meta.seed N).
func TestMetamorphic(t *testing.T) { metamorphic(t, mountOne(t)) }

func metamorphic(t *testing.T, mnt string) {
	local := t.TempDir()
	seed := *metaSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	paths := []string{"a", "b", "d1", "d1/a", "d1/b", "d2", "d2/c", "d1/d3", "d1/d3/a"}
	pick := func() string { return paths[rng.IntN(len(paths))] }
	data := func() []byte {
		b := make([]byte, rng.IntN(3)*rng.IntN(70000)+rng.IntN(100))
		for i := range b {
			b[i] = byte(rng.IntN(4)) + 'w'
		}
		return b
	}
	for i := range *metaOps {
		op, args := randomOp(rng, pick, data)
		got := op(mnt)
		want := op(local)
		if got != want {
			t.Fatalf("seed %d, op %d %s: mount gave\n  %s\nlocal directory gave\n  %s", seed, i, args, got, want)
		}
	}
	// Final trees match too.
	if got, want := dump(t, mnt), dump(t, local); got != want {
		t.Fatalf("seed %d: final trees differ:\n%s\nvs\n%s", seed, got, want)
	}
}

// randomOp returns one operation (applied to a root directory, returning
// a description of its outcome) and its description.
func randomOp(rng *rand.Rand, pick func() string, data func() []byte) (func(root string) string, string) {
	p, q := pick(), pick()
	switch rng.IntN(14) {
	case 0:
		b := data()
		return func(r string) string {
			return res(os.WriteFile(filepath.Join(r, p), b, 0o644))
		}, fmt.Sprintf("writefile %s %d bytes", p, len(b))
	case 1:
		b, off := data(), int64(rng.IntN(200000))
		return func(r string) string {
			f, err := os.OpenFile(filepath.Join(r, p), os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				return res(err)
			}
			defer f.Close()
			_, err = f.WriteAt(b, off)
			return res(err)
		}, fmt.Sprintf("pwrite %s %d bytes at %d", p, len(b), off)
	case 2:
		b := data()
		return func(r string) string {
			f, err := os.OpenFile(filepath.Join(r, p), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return res(err)
			}
			defer f.Close()
			_, err = f.Write(b)
			return res(err)
		}, fmt.Sprintf("append %s %d bytes", p, len(b))
	case 3:
		size := int64(rng.IntN(150000))
		return func(r string) string { return res(os.Truncate(filepath.Join(r, p), size)) }, fmt.Sprintf("truncate %s %d", p, size)
	case 4:
		return func(r string) string {
			return res(unix.Rename(filepath.Join(r, p), filepath.Join(r, q)))
		}, fmt.Sprintf("rename %s %s", p, q)
	case 5:
		return func(r string) string { return res(os.Link(filepath.Join(r, p), filepath.Join(r, q))) }, fmt.Sprintf("link %s %s", p, q)
	case 6:
		return func(r string) string { return res(unix.Unlink(filepath.Join(r, p))) }, "unlink " + p
	case 7:
		return func(r string) string { return res(unix.Mkdir(filepath.Join(r, p), 0o755)) }, "mkdir " + p
	case 8:
		return func(r string) string { return res(unix.Rmdir(filepath.Join(r, p))) }, "rmdir " + p
	case 9:
		return func(r string) string { return res(os.Symlink(q, filepath.Join(r, p))) }, fmt.Sprintf("symlink %s -> %s", p, q)
	case 10:
		mode := uint32(rng.IntN(0o1000))
		return func(r string) string { return res(unix.Chmod(filepath.Join(r, p), mode|0o700)) }, fmt.Sprintf("chmod %s %o", p, mode|0o700)
	case 11:
		off, n := int64(rng.IntN(200000)), rng.IntN(100000)
		return func(r string) string {
			f, err := os.Open(filepath.Join(r, p))
			if err != nil {
				return res(err)
			}
			defer f.Close()
			buf := make([]byte, n)
			m, err := f.ReadAt(buf, off)
			if errors.Is(err, os.ErrClosed) || (err != nil && err.Error() != "EOF") {
				return res(err)
			}
			return fmt.Sprintf("read %d %x", m, sha(buf[:m]))
		}, fmt.Sprintf("read %s %d at %d", p, n, off)
	case 12:
		return func(r string) string { return stat(filepath.Join(r, p)) }, "lstat " + p
	default:
		return func(r string) string {
			ents, err := os.ReadDir(filepath.Join(r, p))
			if err != nil {
				return res(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return strings.Join(names, ",")
		}, "readdir " + p
	}
}

// res describes an error by its errno only (paths differ).
func res(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

func sha(b []byte) []byte {
	// A cheap digest is enough to compare.
	var h [8]byte
	for i, c := range b {
		h[i%8] = h[i%8]*31 + c
	}
	return append(h[:], byte(len(b)))
}

// stat describes what lstat reports that must agree across file systems.
func stat(p string) string {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return res(err)
	}
	size := st.Size
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		size = 0 // directory sizes are file-system specific
	}
	return fmt.Sprintf("mode %o nlink %d size %d", st.Mode, st.Nlink, size)
}

// dump lists a tree with attributes and content digests.
func dump(t *testing.T, root string) string {
	var lines []string
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		line := rel + " " + stat(p)
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %x", sha(b))
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
