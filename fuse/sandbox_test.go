//go:build linux

package fuse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// populate creates a small tree: data.0000 .. data.0003 (as in WTF's
// Fig. 8) and a subdirectory with files.
func populate(t *testing.T, dir string) []string {
	for i := range 4 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("data.%04d", i)), strings.Repeat(fmt.Sprint(i), 1000))
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	writeFile(t, filepath.Join(dir, "sub", "f"), "nested")
	return names(t, dir)
}

// tree returns every path under dir with its content (files) or "/"
// (directories), for comparing whole trees.
func tree(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.IsDir() {
			out[rel] = "/"
		} else {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d paths, want %d", what, len(got), len(want))
	}
	for p, w := range want {
		if g, ok := got[p]; !ok || g != w {
			t.Errorf("%s: %s differs (present %v)", what, p, ok)
		}
	}
}

// TestSandboxFig8 is WTF's Fig. 8: in a sandbox, rm -rf everything; the
// sandboxed mount shows nothing, a second mount of the same file system
// still sees everything; abort restores it all; the same with commit
// makes the deletion visible to the other mount at once and entirely.
func TestSandboxFig8(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mount()
	b, _ := e.mount()
	sandboxFig8(t, a, b, ma.Status)
}

// sandboxFig8 runs Fig. 8 with the sandbox on mount a, observed from
// mount b; status is a's sandbox status.
func sandboxFig8(t *testing.T, a, b string, status func() SandboxStatus) {
	populate(t, a)
	before := tree(t, a)
	sameTree(t, "second mount before", tree(t, b), before)

	for _, end := range []string{"abort", "commit"} {
		t.Run(end, func(t *testing.T) {
			if _, err := Control(a, OpBegin); err != nil {
				t.Fatal(err)
			}
			st, err := Control(a, OpStatus)
			if err != nil || !st.Active {
				t.Fatalf("status after begin: %+v %v", st, err)
			}
			_, err = Control(a, OpBegin)
			if !errors.Is(err, syscall.EBUSY) {
				t.Errorf("second begin: %v, want EBUSY", err)
			}
			run(t, a, "sh", "-c", "rm -rf ./*")
			if got := names(t, a); len(got) != 0 {
				t.Fatalf("sandboxed mount after rm -rf: %v", got)
			}
			if _, err := os.Stat(filepath.Join(a, "data.0001")); !os.IsNotExist(err) {
				t.Errorf("stat in sandbox: %v", err)
			}
			// Changes other than deletions stay private too.
			writeFile(t, filepath.Join(a, "new"), "made in the sandbox")
			sameTree(t, "other mount during the sandbox", tree(t, b), before)
			if st := status(); !st.Active || st.Ops == 0 {
				t.Errorf("status: %+v", st)
			}

			switch end {
			case "abort":
				if _, err := Control(a, OpAbort); err != nil {
					t.Fatal(err)
				}
				sameTree(t, "sandboxed mount after abort", tree(t, a), before)
				sameTree(t, "other mount after abort", tree(t, b), before)
			case "commit":
				if _, err := Control(a, OpCommit); err != nil {
					t.Fatal(err)
				}
				want := map[string]string{".": "/", "new": "made in the sandbox"}
				sameTree(t, "other mount right after commit", tree(t, b), want)
				sameTree(t, "sandboxed mount after commit", tree(t, a), want)
			}
			if st, _ := Control(a, OpStatus); st.Active {
				t.Errorf("sandbox still active after %s", end)
			}
			_, err = Control(a, OpAbort)
			if !errors.Is(err, syscall.ENOENT) {
				t.Errorf("abort without a sandbox: %v, want ENOENT", err)
			}
		})
	}
}

// TestSandboxConflict: a sandbox that read something another mount then
// changed fails to commit and leaves nothing behind; one whose reads were
// not disturbed commits even though other files changed meanwhile (the
// engine replays its log instead of aborting spuriously).
func TestSandboxConflict(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, _ := e.mount()
	b, _ := e.mount()
	sandboxConflict(t, a, b)
}

// sandboxConflict runs the conflict checks with the sandbox on mount a
// and the concurrent writer on mount b.
func sandboxConflict(t *testing.T, a, b string) {
	writeFile(t, filepath.Join(a, "shared"), "v1")
	writeFile(t, filepath.Join(a, "other"), "o1")

	// No conflict: the other mount changes a file the sandbox never read.
	Control(a, OpBegin)
	writeFile(t, filepath.Join(a, "mine"), "sandboxed")
	writeFile(t, filepath.Join(b, "other"), "o2")
	if _, err := Control(a, OpCommit); err != nil {
		t.Fatalf("commit without a real conflict: %v", err)
	}
	if got := readFile(t, filepath.Join(b, "mine")); got != "sandboxed" {
		t.Errorf("after commit: %q", got)
	}

	// Conflict: the sandbox copies "shared" while the other mount
	// rewrites it.
	Control(a, OpBegin)
	data := readFile(t, filepath.Join(a, "shared"))
	writeFile(t, filepath.Join(a, "copy"), data+"+")
	writeFile(t, filepath.Join(b, "shared"), "v2 longer")
	_, err := Control(a, OpCommit)
	var se *SandboxError
	if !errors.As(err, &se) || !errors.Is(err, syscall.EBUSY) || !strings.Contains(se.Msg, "conflict") {
		t.Fatalf("conflicting commit: %v", err)
	}
	for _, dir := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(dir, "copy")); !os.IsNotExist(err) {
			t.Errorf("%s: partial commit: copy exists (%v)", dir, err)
		}
		if got := readFile(t, filepath.Join(dir, "shared")); got != "v2 longer" {
			t.Errorf("%s: shared = %q", dir, got)
		}
	}
	if got := names(t, a); !slices.Equal(got, []string{"mine", "other", "shared"}) {
		t.Errorf("after failed commit: %v", got)
	}

	// Conflict through a descriptor opened before the sandbox, whose
	// pages the kernel had cached: Begin drops them, so the read goes
	// through the sandbox's transaction and the rewrite is detected.
	f, err := os.Open(filepath.Join(a, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 100)
	f.ReadAt(buf, 0) // cache the pages
	Control(a, OpBegin)
	n, _ := f.ReadAt(buf, 0)
	writeFile(t, filepath.Join(a, "copy2"), string(buf[:n]))
	writeFile(t, filepath.Join(b, "shared"), "v3 same len")
	if _, err := Control(a, OpCommit); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("commit after reading data rewritten meanwhile: %v, want a conflict", err)
	}
}
