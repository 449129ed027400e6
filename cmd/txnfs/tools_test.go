package main

import (
	"bytes"
	"context"
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
