package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestToolFlags(t *testing.T) {
	fl := newFlags("tar", io.Discard)
	c := fl.Bool("c", false, "")
	f := fl.String("f", "-", "")
	l := fl.Bool("l", false, "")
	pos, err := toolFlags(fl, []string{"-cf", "x.tar", "a", "-l", "b"}, 1, "")
	if err != nil || !*c || *f != "x.tar" || !*l || !reflect.DeepEqual(pos, []string{"a", "b"}) {
		t.Fatalf("c=%v f=%q l=%v pos=%q err=%v", *c, *f, *l, pos, err)
	}
	fl = newFlags("ls", io.Discard)
	L := fl.Bool("l", false, "")
	R := fl.Bool("R", false, "")
	if pos, err := toolFlags(fl, []string{"-lR", "d"}, 0, ""); err != nil || !*L || !*R || len(pos) != 1 {
		t.Fatalf("-lR: %v %v %q %v", *L, *R, pos, err)
	}
	fl = newFlags("cp", io.Discard)
	fl.Bool("r", false, "")
	if _, err := toolFlags(fl, []string{"-r", "a"}, 2, "SRC DST"); err == nil {
		t.Fatal("missing argument accepted")
	}
}

// TestToolsLocal runs the subcommands on local paths end to end.
func TestToolsLocal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	runT := func(args ...string) int {
		out.Reset()
		errb.Reset()
		return run(ctx, args, &out, &errb)
	}
	if rc := runT("mkdir", "-p", filepath.Join(dir, "a/b/c")); rc != 0 {
		t.Fatalf("mkdir: %d %s", rc, errb.String())
	}
	os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("data"), 0o644)
	if rc := runT("cp", "-r", filepath.Join(dir, "a"), filepath.Join(dir, "copy")); rc != 0 {
		t.Fatalf("cp: %d %s", rc, errb.String())
	}
	if rc := runT("ls", "-R", filepath.Join(dir, "copy")); rc != 0 || !strings.Contains(out.String(), "f\n") {
		t.Fatalf("ls: %d %q %s", rc, out.String(), errb.String())
	}
	arch := filepath.Join(dir, "x.tar")
	if rc := runT("tar", "-cf", arch, filepath.Join(dir, "copy")); rc != 0 {
		t.Fatalf("tar: %d %s", rc, errb.String())
	}
	if rc := runT("untar", "-xf", arch, "-C", filepath.Join(dir, "a")); rc != 0 {
		t.Fatalf("untar: %d %s", rc, errb.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a/copy/b/f")); err != nil || string(b) != "data" {
		t.Fatalf("%q %v", b, err)
	}
	if rc := runT("rm", "-r", filepath.Join(dir, "copy"), filepath.Join(dir, "a")); rc != 0 {
		t.Fatalf("rm: %d %s", rc, errb.String())
	}
	if rc := runT("rm", filepath.Join(dir, "nope")); rc != 1 || !strings.Contains(errb.String(), "nope: no such file or directory") {
		t.Fatalf("rm of a missing file: %d %q", rc, errb.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left %v", ents)
	}
}

// TestBadInput: exit statuses and messages of command-line mistakes a new
// user makes (session 10). Each case failed before its fix: ls printed
// its error twice and exited 1 (GNU ls: 2), untar ignored extra
// arguments, fsck of a mistyped directory created it and reported a clean
// file system, mount of a missing mount point said only "fusermount
// exited with code 256", a URL's query or fragment was dropped (rm of
// nfs://h/f#1 would remove /f).
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		args []string
		code int
		// want is in stderr, once; stdout must be empty.
		want string
	}{
		{[]string{"ls", missing}, 2, "ls: cannot access '" + missing + "': no such file or directory"},
		{[]string{"ls", "nfs://127.0.0.1:0/"}, 2, `port "0" is not in 1-65535`},
		{[]string{"untar", "-xf", file, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"fsck", "--data", missing}, 1, "data directory " + missing + ": no such file or directory"},
		{[]string{"gc", "--data", file}, 1, "data directory " + file + ": not a directory"},
		{[]string{"fsck", "--data", dir}, 1, dir + " is not a txnfs data directory"},
		{[]string{"mount", "--data", filepath.Join(dir, "d"), missing}, 1, "mount point " + missing + ": no such file or directory"},
		{[]string{"mount", "--data", filepath.Join(dir, "d"), file}, 1, "mount point " + file + ": not a directory"},
		{[]string{"rm", "nfs://127.0.0.1:1/f#1"}, 1, "a fragment is not supported"},
		{[]string{"cp", file, file}, 1, "'" + file + "' and '" + file + "' are the same file"},
		{[]string{"cp", "-r", dir, filepath.Join(dir, "sub")}, 1, "into itself"},
		{[]string{"clone", file, file}, 1, "are the same file"},
		{[]string{"concat", file, file}, 1, "are the same file"},
		{[]string{"untar", "-f", file, "-C", missing}, 1, missing + ": no such file or directory"},
		{[]string{"untar", "-f", file, "-C", file}, 1, file + ": not a directory"},
		{[]string{"cp", "/dev/null", filepath.Join(dir, "null")}, 1, "/dev/null: 1 special file (device, FIFO, socket) not copied"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || strings.Count(errb.String(), c.want) != 1 || out.Len() != 0 {
			t.Errorf("%q: exit %d (want %d), stdout %q, stderr %q (want %q once)", c.args, code, c.code, out.String(), errb.String(), c.want)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a command created %s: %v", missing, err)
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Errorf("file holds %q", b)
	}
}

// TestDoubleDash: operands after "--" were parsed as flags again ("txnfs
// rm -- -a -b": "flag provided but not defined: -b") and clustered
// ("-rf" after "--" became -r -f).
func TestDoubleDash(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--", "-a", "-b"}, []string{"-a", "-b"}},
		{[]string{"-r", "x", "--", "-rf", "--"}, []string{"x", "-rf", "--"}},
		{[]string{"-f", "--", "y", "-r"}, []string{"y"}}, // "--" is -f's value
	} {
		fl := newFlags("rm", io.Discard)
		r := fl.Bool("r", false, "")
		f := fl.String("f", "", "")
		pos, err := toolFlags(fl, c.args, 0, "")
		if err != nil || !reflect.DeepEqual(pos, c.want) {
			t.Errorf("%q: %q %v, want %q", c.args, pos, err, c.want)
		}
		if c.args[0] == "-f" && (*f != "--" || !*r) {
			t.Errorf("%q: -f %q -r %v", c.args, *f, *r)
		}
	}
}

// TestServerAddr: mount --server took only HOST:PORT; "HOST" and
// "nfs://HOST:PORT" failed at dial time with "missing port in address"
// and "too many colons in address".
func TestServerAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:2050": "127.0.0.1:2050", "127.0.0.1": "127.0.0.1:2049", "h": "h:2049",
		"[::1]:7": "[::1]:7", "[::1]": "[::1]:2049", "::1": "[::1]:2049",
		"nfs://127.0.0.1:2049": "", "h:": "", "h:0": "", "h:70000": "", ":2049": "", "": "",
	} {
		got, err := serverAddr(in)
		if got != want || (err != nil) != (want == "") || err != nil && !errors.Is(err, errUsage) {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
}

// TestArchiveOnTerminal: "txnfs untar" without -f waited for an archive
// typed on the terminal, and "txnfs tar PATH" wrote binary to it; both
// are refused like GNU tar.
func TestArchiveOnTerminal(t *testing.T) {
	defer func(f func(*os.File) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(f *os.File) bool { return f == os.Stdin || f == os.Stdout }
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"untar", "-C", dir}, "refusing to read archive contents from a terminal"},
		{[]string{"tar", "-c", dir}, "refusing to write archive contents to a terminal"},
	} {
		var errb bytes.Buffer
		code := run(context.Background(), c.args, os.Stdout, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d: %s", c.args, code, errb.String())
		}
	}
}
