package vtools_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/internal/treegen"
	"github.com/txnfs/txnfs/vnfs"
	"github.com/txnfs/txnfs/vnfs/vtools"
)

var peers []*nfspeers.Peer

func TestMain(m *testing.M) {
	code := nfspeers.RunWithPeers(m, "vtools-test", &peers)
	if benchTreeDir != "" {
		// The generated tree and its archive (BenchmarkTree).
		os.RemoveAll(filepath.Dir(benchTreeDir))
	}
	os.Exit(code)
}

var seq atomic.Int64

// testTree is a source-like tree: thousands of small files, nested
// directories, symbolic links.
var testTree = treegen.Spec{Files: 1500, Dirs: 100, MeanSize: 3000, Symlinks: 25, Seed: 7}

func newEnv(t *testing.T) (*vtools.Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	env := &vtools.Env{Mounts: &vnfs.Mounts{}, Stdout: &out, Stderr: &errb}
	t.Cleanup(func() { env.Mounts.Close() })
	return env, &out, &errb
}

func url(p *nfspeers.Peer, rel string) string {
	return "nfs://" + p.Addr + filepath.Join(p.Root, rel)
}

func gen(t *testing.T, s treegen.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	if _, err := treegen.Generate(dir, s); err != nil {
		t.Fatal(err)
	}
	return dir
}

// compareTrees checks that b has the same names, types, contents, link
// targets and permission bits as a.
func compareTrees(t *testing.T, a, b string, modes bool) {
	t.Helper()
	type info struct {
		mode fs.FileMode
		data string
	}
	scan := func(root string) map[string]info {
		m := map[string]info{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			in := info{mode: fi.Mode()}
			switch {
			case fi.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				in.data = string(b)
			case fi.Mode()&fs.ModeSymlink != 0:
				in.data, _ = os.Readlink(p)
			}
			if !modes {
				in.mode = in.mode.Type()
			}
			m[rel] = in
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := scan(a), scan(b)
	if len(ma) != len(mb) {
		t.Fatalf("%s has %d entries, %s has %d", a, len(ma), b, len(mb))
	}
	for k, va := range ma {
		vb, ok := mb[k]
		if !ok {
			t.Fatalf("%s missing in copy", k)
		}
		if va.mode != vb.mode || va.data != vb.data {
			t.Fatalf("%s differs: mode %v vs %v, %d vs %d bytes", k, va.mode, vb.mode, len(va.data), len(vb.data))
		}
	}
}

// TestCpTree copies a generated tree to the server and back and compares
// byte for byte; then copies it on the server (server-side copy where
// available) and back again.
func TestCpTree(t *testing.T) {
	src := gen(t, testTree)
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			env, _, _ := newEnv(t)
			name := fmt.Sprintf("cp%d", seq.Add(1))
			if err := vtools.Cp(ctx, env, []string{src}, url(p, name), vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
				t.Fatal(err)
			}
			if p.Dir != "" {
				compareTrees(t, src, filepath.Join(p.Dir, name), true)
			}
			back := filepath.Join(t.TempDir(), "back")
			if err := vtools.Cp(ctx, env, []string{url(p, name)}, back, vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
				t.Fatal(err)
			}
			compareTrees(t, src, back, true)
			// On the server, into an existing directory.
			if err := vtools.Mkdir(ctx, env, []string{url(p, name+"-dst")}, vtools.MkdirOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := vtools.Cp(ctx, env, []string{url(p, name)}, url(p, name+"-dst"), vtools.CpOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
			back2 := filepath.Join(t.TempDir(), "back2")
			if err := vtools.Cp(ctx, env, []string{url(p, name+"-dst/"+name)}, back2, vtools.CpOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
			compareTrees(t, src, back2, false)
			// rm -r leaves nothing.
			if err := vtools.Rm(ctx, env, []string{url(p, name), url(p, name+"-dst")}, vtools.RmOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{name, name + "-dst"} {
				_, err := env.Mounts.Resolve(ctx, url(p, n))
				if err != nil {
					t.Fatal(err)
				}
				tg, _ := env.Mounts.Resolve(ctx, url(p, n))
				if _, err := vnfs.Stat(ctx, tg.FS, tg.Path); !os.IsNotExist(err) && !isNotExist(err) {
					t.Fatalf("%s still exists: %v", n, err)
				}
			}
			if p.Dir != "" {
				if ents, _ := os.ReadDir(p.Dir); len(ents) != 0 {
					for _, e := range ents {
						if strings.HasPrefix(e.Name(), name) {
							t.Fatalf("rm -r left %s", e.Name())
						}
					}
				}
			}
		})
	}
}

func isNotExist(err error) bool { return err != nil && errorsIs(err, fs.ErrNotExist) }

func errorsIs(err, target error) bool {
	for err != nil {
		if err == target {
			return true
		}
		if x, ok := err.(interface{ Is(error) bool }); ok && x.Is(target) {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func have(t *testing.T, tool string) {
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not installed", tool)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestTarInterop checks that archives written by txnfs tar are extracted
// by GNU tar and bsdtar, and archives written by them are extracted by
// txnfs untar, to the same tree.
func TestTarInterop(t *testing.T) {
	src := gen(t, treegen.Spec{Files: 300, Dirs: 25, MeanSize: 3000, Symlinks: 10, Seed: 3})
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			env, _, _ := newEnv(t)
			name := fmt.Sprintf("tar%d", seq.Add(1))
			if err := vtools.Cp(ctx, env, []string{src}, url(p, name), vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
				t.Fatal(err)
			}
			for _, sys := range []string{"tar", "bsdtar"} {
				t.Run(sys, func(t *testing.T) {
					have(t, sys)
					tmp := t.TempDir()
					// txnfs tar (server) -> system tar -x
					arch := filepath.Join(tmp, "a.tar")
					if err := vtools.Tar(ctx, env, []string{url(p, name)}, vtools.TarOptions{Archive: arch}); err != nil {
						t.Fatal(err)
					}
					out := filepath.Join(tmp, "x")
					os.Mkdir(out, 0o755)
					run(t, sys, "-xpf", arch, "-C", out)
					compareTrees(t, src, filepath.Join(out, name), true)
					// system tar -c -> txnfs untar (server), archive on NFS too
					arch2 := filepath.Join(tmp, "b.tar")
					run(t, sys, "-cf", arch2, "-C", filepath.Dir(src), filepath.Base(src))
					dest := name + "-" + sys
					if err := vtools.Mkdir(ctx, env, []string{url(p, dest)}, vtools.MkdirOptions{}); err != nil {
						t.Fatal(err)
					}
					if err := vtools.Cp(ctx, env, []string{arch2}, url(p, dest+".tar"), vtools.CpOptions{}); err != nil {
						t.Fatal(err)
					}
					if err := vtools.Untar(ctx, env, vtools.UntarOptions{Archive: url(p, dest+".tar"), Dir: url(p, dest)}); err != nil {
						t.Fatal(err)
					}
					back := filepath.Join(tmp, "back")
					if err := vtools.Cp(ctx, env, []string{url(p, dest+"/src")}, back, vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
						t.Fatal(err)
					}
					compareTrees(t, src, back, true)
				})
			}
		})
	}
}

// TestLsMatchesGNU compares txnfs ls -lR of a tree on the server with GNU
// ls -lR of the same tree on a local file system (LC_ALL=C).
func TestLsMatchesGNU(t *testing.T) {
	have(t, "ls")
	src := gen(t, treegen.Spec{Files: 300, Dirs: 25, MeanSize: 2000, Symlinks: 10, Seed: 5})
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			env, out, _ := newEnv(t)
			name := fmt.Sprintf("ls%d", seq.Add(1))
			if err := vtools.Cp(ctx, env, []string{src}, url(p, name), vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
				t.Fatal(err)
			}
			local := filepath.Join(p.Dir, name) // Ganesha: the export itself
			exact := true
			if p.Dir == "" {
				// txnfs: the same tree copied back to a local directory.
				// Directory sizes and block counts are the local file
				// system's, so those fields are not compared.
				local = filepath.Join(t.TempDir(), name)
				if err := vtools.Cp(ctx, env, []string{url(p, name)}, local, vtools.CpOptions{Recursive: true, Preserve: true}); err != nil {
					t.Fatal(err)
				}
				exact = false
			}
			for _, flags := range []vtools.LsOptions{{Long: true, Recursive: true}, {Recursive: true}, {Long: true}, {Long: true, Recursive: true, All: true}, {All: true}} {
				out.Reset()
				if err := vtools.Ls(ctx, env, []string{url(p, name)}, flags); err != nil {
					t.Fatal(err)
				}
				args := "-"
				if flags.Long {
					args += "l"
				}
				if flags.Recursive {
					args += "R"
				}
				if flags.All {
					args += "a"
				}
				cmd := exec.Command("ls", args, local)
				cmd.Env = append(os.Environ(), "LC_ALL=C")
				want, err := cmd.Output()
				if err != nil {
					t.Fatal(err)
				}
				got := strings.ReplaceAll(out.String(), url(p, name), local)
				g, w := normalize(got, exact), normalize(string(want), exact)
				if g != w {
					t.Fatalf("ls %s differs:\n%s", args, diff(g, w))
				}
			}
		})
	}
}

var dirLine = regexp.MustCompile(`^(d\S+\s+)\d+(\s+\S+\s+\S+\s+)\d+(\s.*)$`)

func normalize(s string, exact bool) string {
	if exact {
		return s
	}
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "total ") || strings.HasSuffix(l, " ..") {
			continue // the copy's parent directories are other directories
		}
		l = dirLine.ReplaceAllString(l, "${1}N${2}SIZE${3}")
		b.WriteString(strings.Join(strings.Fields(l), " "))
		b.WriteString("\n")
	}
	return b.String()
}

func diff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n got: %q\nwant: %q", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(la), len(lb))
}

func TestMkdirRmErrors(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			env, _, _ := newEnv(t)
			name := fmt.Sprintf("mk%d", seq.Add(1))
			dirs := []string{url(p, name+"/a/b/c"), url(p, name+"/a/d"), url(p, name+"/e")}
			if err := vtools.Mkdir(ctx, env, dirs, vtools.MkdirOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
			if err := vtools.Mkdir(ctx, env, dirs, vtools.MkdirOptions{Parents: true}); err != nil {
				t.Fatalf("mkdir -p of existing dirs: %v", err)
			}
			err := vtools.Mkdir(ctx, env, []string{url(p, name+"/a")}, vtools.MkdirOptions{})
			if err == nil || !strings.Contains(err.Error(), url(p, name+"/a")) || !strings.Contains(err.Error(), "file exists") {
				t.Fatalf("mkdir of an existing dir: %v", err)
			}
			err = vtools.Rm(ctx, env, []string{url(p, name+"/a")}, vtools.RmOptions{})
			if err == nil || !errorsIs(err, syscall.EISDIR) {
				t.Fatalf("rm of a dir without -r: %v", err)
			}
			err = vtools.Rm(ctx, env, []string{url(p, name+"/nope")}, vtools.RmOptions{Recursive: true})
			if err == nil || !strings.Contains(err.Error(), "no such file or directory") || !strings.Contains(err.Error(), name+"/nope") {
				t.Fatalf("rm of a missing path: %v", err)
			}
			if err := vtools.Rm(ctx, env, []string{url(p, name+"/nope"), url(p, name)}, vtools.RmOptions{Recursive: true, Force: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCloneConcat(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			env, _, errb := newEnv(t)
			name := fmt.Sprintf("cl%d", seq.Add(1))
			tg, err := env.Mounts.Resolve(ctx, url(p, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := vnfs.Mkdir(ctx, tg.FS, tg.Path, 0o755); err != nil {
				t.Fatal(err)
			}
			var want []byte
			var srcs []string
			for i := 0; i < 3; i++ {
				d := bytes.Repeat([]byte{byte('a' + i)}, 5000+i)
				want = append(want, d...)
				if err := vnfs.WriteFile(ctx, tg.FS, fmt.Sprintf("%s/p%d", tg.Path, i), d, 0o644); err != nil {
					t.Fatal(err)
				}
				srcs = append(srcs, url(p, fmt.Sprintf("%s/p%d", name, i)))
			}
			if err := vtools.Concat(ctx, env, url(p, name+"/all"), srcs); err != nil {
				t.Fatal(err)
			}
			got, err := vnfs.ReadFile(ctx, tg.FS, tg.Path+"/all")
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("concat: %d bytes, %v", len(got), err)
			}
			if err := vtools.Clone(ctx, env, url(p, name+"/all"), url(p, name+"/copy")); err != nil {
				t.Fatal(err)
			}
			got, err = vnfs.ReadFile(ctx, tg.FS, tg.Path+"/copy")
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("clone: %d bytes, %v", len(got), err)
			}
			if p.Name == "txnfs" && errb.Len() > 0 {
				t.Fatalf("txnfs fell back to copying: %s", errb)
			}
		})
	}
}
