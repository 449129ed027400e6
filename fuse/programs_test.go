//go:build linux

package fuse

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrograms runs real programs on a mount and on a local directory and
// compares their results: git, tar, make (with cc), and Python's sqlite3.
func TestPrograms(t *testing.T) { programs(t, mountOne(t), nil) }

// programs runs the real programs on mnt and on a local directory, except
// those named in skip (with the reason).
func programs(t *testing.T, mnt string, skip map[string]string) {
	for _, tc := range []struct {
		name  string
		needs []string
		fn    func(t *testing.T, dir string) string
	}{
		{"Git", []string{"git"}, runGit},
		{"Tar", []string{"tar"}, runTar},
		{"Make", []string{"make", "cc"}, runMake},
		{"SQLite", []string{"python3"}, runSQLite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := skip[tc.name]; ok {
				t.Skip(why)
			}
			for _, n := range tc.needs {
				if _, err := exec.LookPath(n); err != nil {
					t.Skipf("%s is not installed", n)
				}
			}
			local := filepath.Join(t.TempDir(), "local")
			onMount := filepath.Join(mnt, tc.name)
			for _, d := range []string{local, onMount} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			want := tc.fn(t, local)
			got := tc.fn(t, onMount)
			if got != want {
				t.Errorf("results differ\n--- on the mount:\n%s\n--- on a local directory:\n%s", got, want)
			}
		})
	}
}

// sourceTree writes a small C project into dir.
func sourceTree(t *testing.T, dir string) {
	files := map[string]string{
		"Makefile":   "CFLAGS=-O1 -Wall\nOBJS=main.o util.o\nhello: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%.o: %.c util.h\n\t$(CC) $(CFLAGS) -c -o $@ $<\nclean:\n\trm -f hello $(OBJS)\n",
		"util.h":     "int add(int a, int b);\n",
		"util.c":     "#include \"util.h\"\nint add(int a, int b) { return a + b; }\n",
		"main.c":     "#include <stdio.h>\n#include \"util.h\"\nint main(void) { printf(\"%d\\n\", add(40, 2)); return 0; }\n",
		"doc/README": strings.Repeat("documentation line\n", 500),
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		writeFile(t, p, content)
	}
	// Some binary content and a symlink, for tar.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7 % 251)
	}
	os.WriteFile(filepath.Join(dir, "doc", "blob.bin"), big, 0o644)
	os.Symlink("README", filepath.Join(dir, "doc", "link"))
}

func runGit(t *testing.T, dir string) string {
	sourceTree(t, dir)
	env := []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_AUTHOR_DATE=2020-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2020-01-01T00:00:00Z"}
	git := func(args ...string) string {
		cmd := command(dir, "git", args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	writeFile(t, filepath.Join(dir, "util.c"), "#include \"util.h\"\nint add(int a, int b) { return b + a; }\n")
	git("commit", "-q", "-am", "second")
	git("gc", "-q")
	return git("log", "--format=%H %s") + git("fsck", "--full", "--strict") + git("status", "--porcelain")
}

func runTar(t *testing.T, dir string) string {
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	sourceTree(t, src)
	run(t, dir, "tar", "--sort=name", "--mtime=2020-01-01", "--owner=0", "--group=0", "-cf", "a.tar", "src")
	os.Mkdir(filepath.Join(dir, "x"), 0o755)
	run(t, filepath.Join(dir, "x"), "tar", "-xf", "../a.tar")
	run(t, dir, "diff", "-r", "src", "x/src")
	return run(t, dir, "sha256sum", "a.tar") + run(t, dir, "sh", "-c", "find x | sort")
}

func runMake(t *testing.T, dir string) string {
	sourceTree(t, dir)
	run(t, dir, "make", "-s", "-j2")
	out := run(t, dir, "./hello")
	run(t, dir, "make", "-s", "clean")
	run(t, dir, "make", "-s")
	return out + run(t, dir, "./hello")
}

// runSQLite runs a few thousand transactions and dumps the database.
func runSQLite(t *testing.T, dir string) string {
	script := `
import sqlite3, hashlib
db = sqlite3.connect("test.db")
db.execute("pragma journal_mode=delete")
db.execute("create table kv (k integer primary key, v text, n integer)")
for i in range(3000):
    with db:
        db.execute("insert into kv values (?, ?, ?)", (i, "value %d" % i, i * i % 977))
        if i % 3 == 0:
            db.execute("update kv set n = n + 1 where k = ?", (i // 2,))
        if i % 7 == 0:
            db.execute("delete from kv where k = ?", (i // 3,))
db.execute("vacuum")
db.close()
db = sqlite3.connect("test.db")
h = hashlib.sha256()
for line in db.iterdump():
    h.update(line.encode())
print(h.hexdigest(), db.execute("select count(*), sum(n) from kv").fetchone(), db.execute("pragma integrity_check").fetchone())
`
	writeFile(t, filepath.Join(dir, "t.py"), script)
	return run(t, dir, "python3", "t.py")
}
