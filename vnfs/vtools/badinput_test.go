package vtools_test

// Bad input as a new user gives it (session 10): each case failed before
// its fix — lost data, a write outside an extraction directory, or a
// wrong exit status.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/vnfs"
	"github.com/txnfs/txnfs/vnfs/vtools"
)

// places are a local directory and one directory per peer, as tool
// arguments (the second result makes a path in it).
func places(t *testing.T) map[string]func(rel string) string {
	m := map[string]func(string) string{}
	local := t.TempDir()
	m["local"] = func(rel string) string { return filepath.Join(local, rel) }
	for _, p := range peers {
		base := fmt.Sprintf("bad%d", seq.Add(1))
		m[p.Name] = func(rel string) string { return url(p, filepath.Join(base, rel)) }
	}
	return m
}

func readArg(t *testing.T, env *vtools.Env, arg string) string {
	t.Helper()
	ctx := context.Background()
	tg, err := env.Mounts.Resolve(ctx, arg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := vnfs.ReadFile(ctx, tg.FS, tg.Path)
	if err != nil {
		t.Fatalf("%s: %v", arg, err)
	}
	return string(b)
}

func writeArg(t *testing.T, env *vtools.Env, arg, data string) {
	t.Helper()
	ctx := context.Background()
	tg, err := env.Mounts.Resolve(ctx, arg)
	if err != nil {
		t.Fatal(err)
	}
	if err := vnfs.WriteFile(ctx, tg.FS, tg.Path, []byte(data), 0o644); err != nil {
		t.Fatalf("%s: %v", arg, err)
	}
}

// TestSameFileRefused: cp, clone and concat truncate DST first, so a
// DST that is one of the sources (by name, another spelling, or a hard
// link) lost its data and the tool exited 0. They now refuse, like cp(1),
// and leave the file alone.
func TestSameFileRefused(t *testing.T) {
	ctx := context.Background()
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			env, _, _ := newEnv(t)
			if err := vtools.Mkdir(ctx, env, []string{at("")}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			f, g, h := at("f"), at("g"), at("hard")
			writeArg(t, env, f, "hello\n")
			writeArg(t, env, g, "world\n")
			tg, _ := env.Mounts.Resolve(ctx, f)
			th, _ := env.Mounts.Resolve(ctx, h)
			if err := vnfs.Link(ctx, tg.FS, tg.Path, th.Path); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what string
				run  func() error
				want string
			}{
				{"cp f f", func() error { return vtools.Cp(ctx, env, []string{f}, f, vtools.CpOptions{}) }, "are the same file"},
				{"cp f dir/./f", func() error {
					return vtools.Cp(ctx, env, []string{f}, strings.TrimSuffix(at(""), "/")+"/./f", vtools.CpOptions{})
				}, "are the same file"},
				{"cp f into its directory", func() error { return vtools.Cp(ctx, env, []string{f}, at(""), vtools.CpOptions{}) }, "are the same file"},
				{"cp f hard", func() error { return vtools.Cp(ctx, env, []string{f}, h, vtools.CpOptions{}) }, "are the same file"},
				// One server under two names: two connections.
				{"cp f f (as localhost)", func() error {
					return vtools.Cp(ctx, env, []string{f}, strings.Replace(f, "127.0.0.1", "localhost", 1), vtools.CpOptions{})
				}, "are the same file"},
				{"clone f f", func() error { return vtools.Clone(ctx, env, f, f) }, "are the same file"},
				{"clone f hard", func() error { return vtools.Clone(ctx, env, f, h) }, "are the same file"},
				{"concat f f g", func() error { return vtools.Concat(ctx, env, f, []string{f, g}) }, "DST is also a source"},
				{"concat f g f", func() error { return vtools.Concat(ctx, env, f, []string{g, f}) }, "DST is also a source"},
			} {
				err := c.run()
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: err %v, want %q", c.what, err, c.want)
				}
				if got := readArg(t, env, f); got != "hello\n" {
					t.Fatalf("%s: f holds %q afterwards", c.what, got)
				}
			}
			// Not the same file: still works.
			if err := vtools.Concat(ctx, env, at("fg"), []string{f, g, f}); err != nil {
				t.Fatal(err)
			}
			if got := readArg(t, env, at("fg")); got != "hello\nworld\nhello\n" {
				t.Fatalf("concat: %q", got)
			}
		})
	}
}

// TestCpIntoItself: cp -r d d (into the existing d) and cp -r d d/sub/x
// copied the tree into itself and exited 0; cp(1) refuses.
func TestCpIntoItself(t *testing.T) {
	ctx := context.Background()
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			env, _, _ := newEnv(t)
			if err := vtools.Mkdir(ctx, env, []string{at("d/sub")}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			writeArg(t, env, at("d/f"), "x")
			for _, dst := range []string{at("d"), at("d/"), at("d/sub/x")} {
				err := vtools.Cp(ctx, env, []string{at("d")}, dst, vtools.CpOptions{Recursive: true})
				if err == nil || !strings.Contains(err.Error(), "into itself") {
					t.Errorf("cp -r d %s: %v", dst, err)
				}
			}
			var out bytes.Buffer
			env.Stdout = &out
			if err := vtools.Ls(ctx, env, []string{at("d")}, vtools.LsOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
			if strings.Count(out.String(), ":\n") != 2 { // d: and d/sub:
				t.Fatalf("d changed:\n%s", out.String())
			}
			// A sibling whose name starts like the source's is fine.
			if err := vtools.Cp(ctx, env, []string{at("d")}, at("d2"), vtools.CpOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

type member struct {
	name string
	typ  byte
	link string
	data string
}

func archive(t *testing.T, ms []member) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Linkname: m.link, Mode: 0o644, Size: int64(len(m.data))}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(m.data))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestUntarBadArchives: untar wrote through a symbolic link the archive
// itself had created (evil -> OUTSIDE, then evil/pwned: a file outside
// the destination, as soon as the members were extracted in two
// batches), exited 0 after skipping members, and lost the members read
// before a truncation.
func TestUntarBadArchives(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	big := strings.Repeat("z", 33<<20) // more than one batch (tarBudget)
	cases := []struct {
		name     string
		ms       []member
		truncate int
		wantErr  string
		want     []string // present after
		absent   []string
	}{
		{name: "symlink escape", ms: []member{
			{name: "evil", typ: tar.TypeSymlink, link: outside},
			{name: "big", typ: tar.TypeReg, data: big},
			{name: "evil/pwned", typ: tar.TypeReg, data: "pwned"},
			{name: "ok", typ: tar.TypeReg, data: "ok"},
		}, wantErr: "1 archive member not extracted", want: []string{"ok", "big"}},
		{name: "symlink escape, relative, one batch", ms: []member{
			{name: "d/", typ: tar.TypeDir},
			{name: "d/evil", typ: tar.TypeSymlink, link: "../.."},
			{name: "d/evil/x/", typ: tar.TypeDir},
			{name: "d/evil/pwned", typ: tar.TypeReg, data: "pwned"},
			{name: "hl", typ: tar.TypeLink, link: "d/evil/pwned"},
		}, wantErr: "3 archive members not extracted", want: []string{"d"}, absent: []string{"hl"}},
		{name: "dot-dot", ms: []member{
			{name: "../escape", typ: tar.TypeReg, data: "x"},
			{name: "ok", typ: tar.TypeReg, data: "ok"},
		}, wantErr: "1 archive member not extracted", want: []string{"ok"}},
		{name: "device", ms: []member{
			{name: "dev", typ: tar.TypeChar},
			{name: "ok", typ: tar.TypeReg, data: "ok"},
		}, wantErr: "1 archive member not extracted", want: []string{"ok"}},
		{name: "hard link to a missing member", ms: []member{
			{name: "h", typ: tar.TypeLink, link: "nope"},
			{name: "ok", typ: tar.TypeReg, data: "ok"},
		}, wantErr: "h: cannot hard link to ", want: []string{"ok"}},
		{name: "truncated", ms: []member{
			{name: "a", typ: tar.TypeReg, data: "aaaa"},
			{name: "b", typ: tar.TypeReg, data: strings.Repeat("b", 5000)},
		}, truncate: 2048, wantErr: "b: damaged archive", want: []string{"a"}, absent: []string{"b"}},
	}
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			for i, c := range cases {
				if c.ms[1].data == big && name != "local" && testing.Short() {
					continue
				}
				env, _, errb := newEnv(t)
				dir := at(fmt.Sprintf("x%d", i))
				if err := vtools.Mkdir(ctx, env, []string{dir}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
					t.Fatal(err)
				}
				a := archive(t, c.ms)
				if c.truncate > 0 {
					a = a[:c.truncate]
				}
				err := vtools.Untar(ctx, env, vtools.UntarOptions{Archive: "-", Dir: dir, Stdin: bytes.NewReader(a)})
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("%s: err %v, want %q; stderr %s", c.name, err, c.wantErr, errb.String())
				}
				for _, w := range c.want {
					tg, _ := env.Mounts.Resolve(ctx, dir+"/"+w)
					if _, err := vnfs.Stat(ctx, tg.FS, tg.Path); err != nil {
						t.Errorf("%s: %s not extracted: %v", c.name, w, err)
					}
				}
				for _, w := range c.absent {
					tg, _ := env.Mounts.Resolve(ctx, dir+"/"+w)
					if _, err := vnfs.Stat(ctx, tg.FS, tg.Path); err == nil {
						t.Errorf("%s: %s extracted", c.name, w)
					}
				}
				if ents, _ := os.ReadDir(outside); len(ents) != 0 {
					t.Fatalf("%s: wrote outside the destination: %v", c.name, ents)
				}
				for _, w := range []string{"pwned", "x"} { // where d/evil -> ../.. leads
					tg, _ := env.Mounts.Resolve(ctx, at(w))
					if _, err := vnfs.Stat(ctx, tg.FS, tg.Path); !errors.Is(err, os.ErrNotExist) {
						t.Fatalf("%s: wrote outside the destination: %s: %v", c.name, at(w), err)
					}
				}
			}
		})
	}
}

// TestTarMemberNames: the archive of a server's root had absolute member
// names ("//", "/d/"), which GNU tar strips and our untar refuses; an
// absolute PATH with -C was joined to the -C directory.
func TestTarMemberNames(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o644)
	names := func(a []byte) []string {
		var out []string
		tr := tar.NewReader(bytes.NewReader(a))
		for {
			h, err := tr.Next()
			if err != nil {
				return out
			}
			out = append(out, h.Name)
		}
	}
	for _, c := range []struct {
		paths []string
		dir   string
		want  string
	}{
		{[]string{filepath.Join(src, "d")}, "", "d/ d/f"},
		{[]string{"d"}, src, "d/ d/f"},
		{[]string{filepath.Join(src, "d")}, "/nonexistent", "d/ d/f"},
	} {
		env, out, _ := newEnv(t)
		if err := vtools.Tar(ctx, env, c.paths, vtools.TarOptions{Archive: "-", Dir: c.dir}); err != nil {
			t.Fatalf("%v -C %q: %v", c.paths, c.dir, err)
		}
		if got := strings.Join(names(out.Bytes()), " "); got != c.want {
			t.Errorf("%v -C %q: members %q, want %q", c.paths, c.dir, got, c.want)
		}
	}
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			if p.Root != "/" {
				t.Skip("the server's root is not the export")
			}
			env, out, _ := newEnv(t)
			if err := vtools.Tar(ctx, env, []string{"nfs://" + p.Addr + "/"}, vtools.TarOptions{Archive: "-"}); err != nil {
				t.Fatal(err)
			}
			got := names(out.Bytes())
			if len(got) == 0 || got[0] != "./" {
				t.Fatalf("first member %q", got)
			}
			for _, n := range got {
				if strings.HasPrefix(n, "/") {
					t.Fatalf("absolute member name %q", n)
				}
			}
		})
	}
}

// TestCpOntoSymlink: a DST that is a symbolic link failed with "too many
// levels of symbolic links" (files are opened without following a final
// link). Locally cp now writes through it like cp(1) (into the directory
// it names); on a server it refuses, saying why.
func TestCpOntoSymlink(t *testing.T) {
	ctx := context.Background()
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			env, _, _ := newEnv(t)
			if err := vtools.Mkdir(ctx, env, []string{at("d")}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			writeArg(t, env, at("f"), "f")
			writeArg(t, env, at("g"), "g")
			for link, target := range map[string]string{"dl": "d", "gl": "g", "dangling": "nowhere"} {
				tg, _ := env.Mounts.Resolve(ctx, at(link))
				if err := vnfs.Symlink(ctx, tg.FS, target, tg.Path); err != nil {
					t.Fatal(err)
				}
			}
			errDl := vtools.Cp(ctx, env, []string{at("f")}, at("dl"), vtools.CpOptions{})
			errGl := vtools.Cp(ctx, env, []string{at("f")}, at("gl"), vtools.CpOptions{})
			errDangling := vtools.Cp(ctx, env, []string{at("f")}, at("dangling"), vtools.CpOptions{})
			if name != "local" {
				for _, err := range []error{errDl, errGl, errDangling} {
					if err == nil || !strings.Contains(err.Error(), "is a symbolic link; give the path it points to") {
						t.Errorf("err %v", err)
					}
				}
				return
			}
			if errDl != nil || errGl != nil {
				t.Fatalf("%v, %v", errDl, errGl)
			}
			if got := readArg(t, env, at("d/f")) + readArg(t, env, at("g")); got != "ff" {
				t.Fatalf("d/f and g hold %q", got)
			}
			if errDangling == nil || !strings.Contains(errDangling.Error(), "dangling") {
				t.Fatalf("dangling: %v", errDangling)
			}
		})
	}
}

// TestCopyNeedsReadAccess: a user who may not read a file must not get
// its data by server-side COPY or CLONE. The txnfs server checked
// neither the source's read access nor the destination's write access
// under anonymous stateids: `txnfs cp` and `txnfs clone` by uid 65534 of
// a mode-000 root file succeeded (found in session 10; fixed in
// nfs4/server by f9951dd, TestAnonCopyCloneSeekAccess). Through the tools
// here; Ganesha has no COPY, its READ fallback is refused.
func TestCopyNeedsReadAccess(t *testing.T) {
	ctx := context.Background()
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			root, _, _ := newEnv(t)
			dir := url(p, fmt.Sprintf("acc%d", seq.Add(1)))
			if err := vtools.Mkdir(ctx, root, []string{dir}, vtools.MkdirOptions{Mode: 0o777}); err != nil {
				t.Fatal(err)
			}
			tg, _ := root.Mounts.Resolve(ctx, dir)
			// Mkdir's mode is less the umask on some servers.
			if _, err := tg.FS.VSetAttrs(ctx, []vnfs.AttrItem{{File: vnfs.P(tg.Path), Mask: vnfs.AttrMode, Attr: vnfs.Attr{Mode: 0o777}}}); err != nil {
				t.Fatal(err)
			}
			writeArg(t, root, dir+"/secret", "secret")
			if _, err := tg.FS.VSetAttrs(ctx, []vnfs.AttrItem{{File: vnfs.P(tg.Path + "/secret"), Mask: vnfs.AttrMode, Attr: vnfs.Attr{Mode: 0}}}); err != nil {
				t.Fatal(err)
			}
			nobody := uint32(65534)
			var out, errb bytes.Buffer
			env := &vtools.Env{Mounts: &vnfs.Mounts{Config: vnfs.Config{Client: client.Config{UID: &nobody, GID: &nobody}}}, Stdout: &out, Stderr: &errb}
			defer env.Mounts.Close()
			if err := vtools.Cp(ctx, env, []string{dir + "/secret"}, dir+"/copy", vtools.CpOptions{}); err == nil {
				t.Errorf("cp of an unreadable file succeeded: %q", readArg(t, root, dir+"/copy"))
			}
			if err := vtools.Clone(ctx, env, dir+"/secret", dir+"/clone"); err == nil {
				t.Errorf("clone of an unreadable file succeeded: %q", readArg(t, root, dir+"/clone"))
			}
		})
	}
}

// TestLsRUnreadableSubdir: ls -R of a tree with a subdirectory the user
// may not read printed nothing but the error; GNU ls prints the rest, the
// failed directory's header, its error on stderr, and exits 1.
func TestLsRUnreadableSubdir(t *testing.T) {
	ctx := context.Background()
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			root, _, _ := newEnv(t)
			dir := url(p, fmt.Sprintf("lsr%d", seq.Add(1)))
			for _, d := range []string{dir + "/a/sub", dir + "/b", dir + "/z"} {
				if err := vtools.Mkdir(ctx, root, []string{d}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
					t.Fatal(err)
				}
			}
			writeArg(t, root, dir+"/a/sub/f", "x")
			writeArg(t, root, dir+"/b/hidden", "x")
			tg, _ := root.Mounts.Resolve(ctx, dir+"/b")
			if _, err := tg.FS.VSetAttrs(ctx, []vnfs.AttrItem{{File: vnfs.P(tg.Path), Mask: vnfs.AttrMode, Attr: vnfs.Attr{Mode: 0}}}); err != nil {
				t.Fatal(err)
			}
			nobody := uint32(65534)
			var out, errb bytes.Buffer
			env := &vtools.Env{Mounts: &vnfs.Mounts{Config: vnfs.Config{Client: client.Config{UID: &nobody, GID: &nobody}}}, Stdout: &out, Stderr: &errb}
			defer env.Mounts.Close()
			err := vtools.Ls(ctx, env, []string{dir}, vtools.LsOptions{Recursive: true})
			want := dir + ":\na\nb\nz\n\n" + dir + "/a:\nsub\n\n" + dir + "/a/sub:\nf\n\n" + dir + "/b:\n\n" + dir + "/z:\n"
			var re *vtools.ReportedError
			if out.String() != want || !errors.As(err, &re) || re.Status != 1 ||
				errb.String() != "ls: cannot open directory '"+dir+"/b': permission denied (NFS4ERR_ACCESS)\n" {
				t.Fatalf("err %v\nstdout:\n%s\nwant:\n%s\nstderr: %s", err, out.String(), want, errb.String())
			}
		})
	}
}

// TestEmptyDotsSlash: an empty argument was the working directory (`rm
// -r ""` removed it), `rm -r .` and `..` removed the directory, and a
// trailing slash was ignored (`rm f/` removed the file f, `cp f new/`
// created the file new, `ls f/` listed f). GNU's answers now.
//
// The empty argument is always local: those cases run once, with the
// working directory a throwaway one (with the bug, `rm -r ""` removes
// the working directory: never run them from the package directory).
func TestEmptyDotsSlash(t *testing.T) {
	ctx := context.Background()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(t.TempDir(), "cwd")
	os.MkdirAll(scratch, 0o755)
	os.WriteFile(filepath.Join(scratch, "canary"), []byte("x"), 0o644)
	if err := os.Chdir(scratch); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	{
		env, _, _ := newEnv(t)
		for _, c := range []struct {
			what string
			err  error
		}{
			{`rm ""`, vtools.Rm(ctx, env, []string{""}, vtools.RmOptions{})},
			{`rm -r ""`, vtools.Rm(ctx, env, []string{""}, vtools.RmOptions{Recursive: true})},
			{`ls ""`, vtools.Ls(ctx, env, []string{""}, vtools.LsOptions{})},
			{`cp -r "" x`, vtools.Cp(ctx, env, []string{""}, "x", vtools.CpOptions{Recursive: true})},
			{`tar ""`, vtools.Tar(ctx, env, []string{""}, vtools.TarOptions{Archive: "-"})},
		} {
			if c.err == nil || !strings.Contains(c.err.Error(), "'': no such file or directory") {
				t.Errorf("%s: %v", c.what, c.err)
			}
		}
		if err := vtools.Rm(ctx, env, []string{""}, vtools.RmOptions{Force: true}); err != nil {
			t.Errorf(`rm -f "": %v`, err)
		}
		if _, err := os.Stat(filepath.Join(scratch, "canary")); err != nil {
			t.Fatalf("the working directory: %v", err)
		}
	}
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			env, out, errb := newEnv(t)
			if err := vtools.Mkdir(ctx, env, []string{at("d/sub")}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			writeArg(t, env, at("f"), "f")
			writeArg(t, env, at("d/in"), "in")
			rm := func(o vtools.RmOptions, args ...string) error { return vtools.Rm(ctx, env, args, o) }
			// at cleans its argument: the dots are appended.
			for _, c := range []struct {
				what string
				err  error
				want string
			}{
				{`rm -r d/.`, rm(vtools.RmOptions{Recursive: true}, at("d")+"/."), "refusing to remove '.' or '..'"},
				{`rm -r d/sub/..`, rm(vtools.RmOptions{Recursive: true}, at("d/sub")+"/.."), "refusing to remove '.' or '..'"},
				{`rm -r d/./`, rm(vtools.RmOptions{Recursive: true}, at("d")+"/./"), "refusing to remove '.' or '..'"},
				{`rm f/`, rm(vtools.RmOptions{}, at("f")+"/"), "f/: not a directory"},
				{`cp f new/`, vtools.Cp(ctx, env, []string{at("f")}, at("new")+"/", vtools.CpOptions{}), "new/: not a directory"},
				{`cp d/in f/ (f a file)`, vtools.Cp(ctx, env, []string{at("d/in")}, at("f")+"/", vtools.CpOptions{}), "f/: not a directory"},
				{`tar f/`, vtools.Tar(ctx, env, []string{at("f") + "/"}, vtools.TarOptions{Archive: "-"}), "f/: not a directory"},
				{`ls f/`, vtools.Ls(ctx, env, []string{at("f") + "/"}, vtools.LsOptions{}), "f/: not a directory"},
			} {
				if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
					t.Errorf("%s: %v, want %q", c.what, c.err, c.want)
				}
			}
			out.Reset()
			if err := vtools.Ls(ctx, env, []string{at("d")}, vtools.LsOptions{}); err != nil || out.String() != "in\nsub\n" {
				t.Fatalf("d afterwards: %q %v (stderr %s)", out.String(), err, errb.String())
			}
			if got := readArg(t, env, at("f")); got != "f" {
				t.Fatalf("f: %q", got)
			}
			tg, _ := env.Mounts.Resolve(ctx, at("new"))
			if _, err := vnfs.Stat(ctx, tg.FS, tg.Path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("new: %v", err)
			}
			// A trailing slash on a directory is fine.
			if err := vtools.Cp(ctx, env, []string{at("d") + "/"}, at("d2")+"/", vtools.CpOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
			if got := readArg(t, env, at("d2/in")); got != "in" {
				t.Fatalf("d2/in: %q", got)
			}
		})
	}
}

// TestMkdirMode: mkdir -m gave local directories the mode less the umask
// (-m 777: 755; the sticky bit of -m 1777 lost), -m 0 gave 755, and -p -m
// gave the mode to every parent (mkdir(1): to the directories named).
func TestMkdirMode(t *testing.T) {
	ctx := context.Background()
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			env, _, _ := newEnv(t)
			mk := func(o vtools.MkdirOptions, args ...string) {
				t.Helper()
				o.ExactMode = true
				if err := vtools.Mkdir(ctx, env, args, o); err != nil {
					t.Fatal(err)
				}
			}
			mk(vtools.MkdirOptions{Parents: true, Mode: 0o755}, at(""))
			mk(vtools.MkdirOptions{Mode: 0o777}, at("a777"))
			mk(vtools.MkdirOptions{Mode: 0o1777}, at("a1777"))
			mk(vtools.MkdirOptions{Mode: 0}, at("a0"))
			mk(vtools.MkdirOptions{Parents: true, Mode: 0o700}, at("p/q"))
			for rel, want := range map[string]uint32{"a777": 0o777, "a1777": 0o1777, "a0": 0, "p": 0o755, "p/q": 0o700} {
				tg, _ := env.Mounts.Resolve(ctx, at(rel))
				a, err := vnfs.Stat(ctx, tg.FS, tg.Path)
				if err != nil || a.Mode != want {
					t.Errorf("%s: mode %o %v, want %o", rel, a.Mode, err, want)
				}
			}
		})
	}
}

// TestCpPreserveAsUser: cp -p by a user who may not chown failed with
// "operation not permitted" (and set no times); cp(1) keeps modes and
// times and gives up the ownership.
func TestCpPreserveAsUser(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "f")
	os.WriteFile(src, []byte("x"), 0o640)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(src, mtime, mtime)
	if os.Geteuid() == 0 {
		os.Chown(src, 0, 0)
	}
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			root, _, _ := newEnv(t)
			dir := url(p, fmt.Sprintf("pres%d", seq.Add(1)))
			if err := vtools.Mkdir(ctx, root, []string{dir}, vtools.MkdirOptions{Mode: 0o777, ExactMode: true}); err != nil {
				t.Fatal(err)
			}
			nobody := uint32(65534)
			env := &vtools.Env{Mounts: &vnfs.Mounts{Config: vnfs.Config{Client: client.Config{UID: &nobody, GID: &nobody}}}, Stdout: io.Discard, Stderr: io.Discard}
			defer env.Mounts.Close()
			if err := vtools.Cp(ctx, env, []string{src}, dir+"/f", vtools.CpOptions{Preserve: true}); err != nil {
				t.Fatal(err)
			}
			tg, _ := root.Mounts.Resolve(ctx, dir+"/f")
			a, err := vnfs.Stat(ctx, tg.FS, tg.Path)
			if err != nil || a.Mode != 0o640 || !a.Mtime.Equal(mtime) || a.Uid != nobody {
				t.Fatalf("%+v %v", a, err)
			}
		})
	}
}

// TestTarSkipsItself: an archive written into the tree being archived
// was archived too (empty, or half-written); GNU tar skips it: "file is
// the archive; not dumped".
func TestTarSkipsItself(t *testing.T) {
	ctx := context.Background()
	for name, at := range places(t) {
		t.Run(name, func(t *testing.T) {
			env, _, errb := newEnv(t)
			if err := vtools.Mkdir(ctx, env, []string{at("d")}, vtools.MkdirOptions{Parents: true, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			writeArg(t, env, at("d/f"), strings.Repeat("f", 5000))
			if err := vtools.Tar(ctx, env, []string{at("d")}, vtools.TarOptions{Archive: at("d/x.tar")}); err != nil {
				t.Fatal(err)
			}
			var names []string
			tr := tar.NewReader(strings.NewReader(readArg(t, env, at("d/x.tar"))))
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				names = append(names, h.Name)
			}
			if got := strings.Join(names, " "); got != "d/ d/f" || !strings.Contains(errb.String(), "x.tar: file is the archive; not dumped") {
				t.Fatalf("members %q; stderr %q", got, errb.String())
			}
		})
	}
}

// TestNotATerminal: IsTerminal took every character device for a
// terminal, so `txnfs tar -cf - x > /dev/null` was refused as "writing
// to a terminal".
func TestNotATerminal(t *testing.T) {
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if vtools.IsTerminal(f) {
		t.Fatal("/dev/null is a terminal")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestLsWriteError: ls whose output could not be written (ls >
// /dev/full, a full disk) exited 0.
func TestLsWriteError(t *testing.T) {
	env, _, _ := newEnv(t)
	env.Stdout = failWriter{}
	err := vtools.Ls(context.Background(), env, []string{t.TempDir()}, vtools.LsOptions{All: true})
	if err == nil || !strings.Contains(err.Error(), "write error") {
		t.Fatalf("%v", err)
	}
}

// TestCpSourceSymlink: cp without -r of a local symbolic link made a
// link (cp -P), so `cp link /backup/` saved a possibly dangling link
// instead of the data; cp(1) copies what the link names (with -r, links
// stay links).
func TestCpSourceSymlink(t *testing.T) {
	ctx := context.Background()
	env, _, _ := newEnv(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "real"), []byte("data"), 0o644)
	os.Symlink("real", filepath.Join(dir, "lnk"))
	os.Symlink("nowhere", filepath.Join(dir, "dang"))
	os.Mkdir(filepath.Join(dir, "out"), 0o755)
	if err := vtools.Cp(ctx, env, []string{filepath.Join(dir, "lnk")}, filepath.Join(dir, "out"), vtools.CpOptions{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "out", "lnk")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("out/lnk: %v %v", fi, err)
	}
	if err := vtools.Cp(ctx, env, []string{filepath.Join(dir, "lnk")}, filepath.Join(dir, "real"), vtools.CpOptions{}); err == nil || !strings.Contains(err.Error(), "are the same file") {
		t.Fatalf("cp lnk real: %v", err)
	}
	if err := vtools.Cp(ctx, env, []string{filepath.Join(dir, "dang")}, filepath.Join(dir, "d2"), vtools.CpOptions{}); err == nil || !strings.Contains(err.Error(), "cannot stat") {
		t.Fatalf("cp dang: %v", err)
	}
	if err := vtools.Cp(ctx, env, []string{filepath.Join(dir, "lnk")}, filepath.Join(dir, "l2"), vtools.CpOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "l2")); err != nil || l != "real" {
		t.Fatalf("cp -r lnk: %q %v", l, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "real")); string(b) != "data" {
		t.Fatalf("real: %q", b)
	}
}
