//go:build linux

package fuse

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	raw "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
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

// The sandbox on a mount with the kernel writeback cache (the sandboxed
// mount a), observed from a write-through mount b of the same engine.

// needWritebackSandbox skips the test if the kernel of writeback mount m
// is too old for its sandbox (before FUSE 7.44, Linux 6.16).
func needWritebackSandbox(t *testing.T, m *Server) {
	t.Helper()
	if !writebackSandboxOK(m.srv.KernelSettings()) {
		t.Skipf("kernel speaks FUSE 7.%d: a writeback mount's sandbox needs 7.44", m.srv.KernelSettings().Minor)
	}
}

// TestWritebackSandboxFig8 is TestSandboxFig8 with the sandbox on a
// writeback mount.
func TestWritebackSandboxFig8(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mountWriteback(true)
	b, _ := e.mountWriteback(false)
	needWritebackSandbox(t, ma)
	sandboxFig8(t, a, b, ma.Status)
}

// TestWritebackSandboxConflict is TestSandboxConflict with the sandbox on
// a writeback mount.
func TestWritebackSandboxConflict(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mountWriteback(true)
	b, _ := e.mountWriteback(false)
	needWritebackSandbox(t, ma)
	sandboxConflict(t, a, b)
}

// fileState is what a stat and a read show of a file.
type fileState struct {
	size         int64
	mtime, ctime unix.Timespec
	data         string
}

func (s fileState) String() string {
	data := s.data
	if len(data) > 24 {
		data = fmt.Sprintf("%q... (%d bytes, %d distinct)", data[:12], len(data), len(slices.Compact([]byte(data))))
	} else {
		data = fmt.Sprintf("%q", data)
	}
	return fmt.Sprintf("size %d mtime %d.%09d ctime %d.%09d data %s", s.size,
		s.mtime.Sec, s.mtime.Nsec, s.ctime.Sec, s.ctime.Nsec, data)
}

// pathState stats and reads path through a new descriptor.
func pathState(t *testing.T, path string) fileState {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return fileState{size: st.Size, mtime: st.Mtim, ctime: st.Ctim, data: readFile(t, path)}
}

// fdState stats and reads the open file f.
func fdState(f *os.File) (fileState, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileState{}, err
	}
	buf := make([]byte, st.Size+4096)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fileState{}, err
	}
	return fileState{size: st.Size, mtime: st.Mtim, ctime: st.Ctim, data: string(buf[:n])}, nil
}

// retiredFile checks that f fails with EIO (stat, then read, then write).
func retiredFile(t *testing.T, what string, f *os.File) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); !errors.Is(err, syscall.EIO) {
		t.Errorf("%s: fstat: size %d, %v; want EIO", what, st.Size, err)
	}
	if n, err := f.ReadAt(make([]byte, 10), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("%s: read: %d bytes, %v; want EIO", what, n, err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("%s: write: %v; want EIO", what, err)
	}
}

// sandboxChanges are the changes TestWritebackSandboxAttrs makes to its
// files in the sandbox, each through the writeback cache of mount a;
// open holds the descriptors opened before the sandbox.
var sandboxChanges = map[string]func(t *testing.T, path string, open *os.File){
	// extended through a new descriptor
	"grow": func(t *testing.T, path string, _ *os.File) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(strings.Repeat("+", 5000)); err != nil {
			t.Fatal(err)
		}
	},
	// truncated through the descriptor opened before
	"shrink": func(t *testing.T, _ string, open *os.File) {
		if err := open.Truncate(10); err != nil {
			t.Fatal(err)
		}
	},
	// rewritten in place (same size) through the descriptor opened before,
	// left dirty for Abort's write-back
	"rewrite": func(t *testing.T, _ string, open *os.File) {
		if _, err := open.WriteAt([]byte("REWRITTEN"), 3); err != nil {
			t.Fatal(err)
		}
	},
	// only its times
	"touch": func(t *testing.T, path string, _ *os.File) {
		when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		if err := os.Chtimes(path, when, when); err != nil {
			t.Fatal(err)
		}
	},
}

// TestWritebackSandboxAttrs: under the writeback cache the kernel owns the
// size, mtime and ctime of the regular files it holds. A file extended,
// truncated, rewritten or touched in a sandbox shows its engine size,
// mtime, ctime and content again after abort, through a new descriptor,
// and a descriptor opened before fails with EIO instead of showing the
// sandbox's (whether it is used before or after the name is looked up
// again); a file the sandbox did not change keeps its descriptors. After
// commit the other mount shows what the sandbox made, with the times the
// sandboxed mount's kernel set.
func TestWritebackSandboxAttrs(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mountWriteback(true)
	b, _ := e.mountWriteback(false)
	needWritebackSandbox(t, ma)
	files := slices.Sorted(maps.Keys(sandboxChanges))
	for _, end := range []string{"abort", "commit"} {
		t.Run(end, func(t *testing.T) {
			dir := filepath.Join(a, end)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			before, kernelBefore := map[string]fileState{}, map[string]fileState{}
			open := map[string]*os.File{}
			for i, name := range append(files, "unchanged") {
				p := filepath.Join(dir, name)
				writeFile(t, p, strings.Repeat(string(rune('a'+i)), 1000+i))
				old := time.Date(2020, 1, 1, 0, 0, i, 0, time.UTC)
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
				f, err := os.OpenFile(p, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				open[name] = f
				if kernelBefore[name], err = fdState(f); err != nil { // caches the pages
					t.Fatal(err)
				}
				// The engine's state: the kernel owns ctime under the
				// writeback cache (its coarse clock, and the engine sets
				// its own ctime when a SETATTR of times arrives), so
				// mount a shows another ctime than the engine.
				before[name] = pathState(t, filepath.Join(b, end, name))
			}
			time.Sleep(10 * time.Millisecond) // the kernel's clock ticks between before and the changes

			if _, err := Control(a, OpBegin); err != nil {
				t.Fatal(err)
			}
			inside := map[string]fileState{}
			for _, name := range files {
				p := filepath.Join(dir, name)
				sandboxChanges[name](t, p, open[name])
				// Through the descriptor opened before, which leaves
				// "rewrite" dirty (a close would write the inode back).
				var err error
				if inside[name], err = fdState(open[name]); err != nil {
					t.Fatal(err)
				}
				if inside[name] == before[name] {
					t.Fatalf("%s: the change made no difference: %v", name, inside[name])
				}
				if got := pathState(t, filepath.Join(b, end, name)); got != before[name] {
					t.Errorf("%s: other mount during the sandbox: %v, want %v", name, got, before[name])
				}
			}
			if _, err := Control(a, OpStatus); err != nil {
				t.Fatal(err)
			}

			if end == "commit" {
				if _, err := Control(a, OpCommit); err != nil {
					t.Fatal(err)
				}
				for _, name := range files {
					// ctime: the engine's (see before).
					want := inside[name]
					got := pathState(t, filepath.Join(b, end, name))
					want.ctime = got.ctime
					if got != want {
						t.Errorf("%s: other mount after commit: %v, want %v", name, got, want)
					}
					if got := pathState(t, filepath.Join(a, end, name)); got != inside[name] {
						t.Errorf("%s: sandboxed mount after commit: %v, want %v", name, got, inside[name])
					}
				}
				return
			}

			if _, err := Control(a, OpAbort); err != nil {
				t.Fatal(err)
			}
			for i, name := range files {
				p := filepath.Join(dir, name)
				// Half the old descriptors are used before the name
				// is looked up again, half after.
				if i%2 == 0 {
					retiredFile(t, name+": descriptor opened before, used first after abort", open[name])
				}
				if got := pathState(t, p); got != before[name] {
					t.Errorf("%s: after abort: %v, want %v", name, got, before[name])
				}
				if i%2 == 1 {
					retiredFile(t, name+": descriptor opened before, used after a lookup", open[name])
				}
				if got := pathState(t, filepath.Join(b, end, name)); got != before[name] {
					t.Errorf("%s: other mount after abort: %v, want %v", name, got, before[name])
				}
			}
			if got, err := fdState(open["unchanged"]); err != nil || got != kernelBefore["unchanged"] {
				t.Errorf("unchanged file's descriptor after abort: %v %v, want %v", got, err, kernelBefore["unchanged"])
			}
		})
	}
}

// TestWritebackSandboxDirtyBefore: data written through the writeback
// cache before Begin and still in dirty pages is outside the sandbox: the
// other mount sees it during the sandbox and it survives abort; a
// descriptor of that file stays usable. Repeated, since whether syncfs
// alone would have written the pages back in time varies (see
// flushKernel).
func TestWritebackSandboxDirtyBefore(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mountWriteback(true)
	b, _ := e.mountWriteback(false)
	needWritebackSandbox(t, ma)
	writeFile(t, filepath.Join(a, "f"), "old")
	f, err := os.OpenFile(filepath.Join(a, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 20 {
		want := fmt.Sprintf("written before sandbox %d, not yet written back", i)
		if _, err := f.WriteAt([]byte(want), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := Control(a, OpBegin); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(b, "f")); got != want {
			t.Errorf("round %d: other mount during the sandbox: %q, want %q", i, got, want)
		}
		writeFile(t, filepath.Join(a, "g"), "in the sandbox")
		if _, err := Control(a, OpAbort); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{a, b} {
			if got := readFile(t, filepath.Join(dir, "f")); got != want {
				t.Errorf("round %d: %s after abort: %q, want %q", i, dir, got, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "g")); !os.IsNotExist(err) {
				t.Errorf("round %d: %s after abort: g: %v", i, dir, err)
			}
		}
		if got, err := fdState(f); err != nil || got.data != want {
			t.Fatalf("round %d: descriptor after abort: %v %v", i, got, err)
		}
	}
}

// TestWritebackSandboxRetiredRequests pins what the mount answers for a
// kernel inode that an abort retired, called directly (a kernel that
// marked the inode bad at its first GETATTR sends none of the others):
// attributes the kernel rejects for GETATTR and SETATTR, EIO for the
// rest, including the WRITE of a page dirtied after the abort's
// write-back; and that the entry the mount gives next carries a new
// generation, after which requests are served again.
func TestWritebackSandboxRetiredRequests(t *testing.T) {
	a, m := newEnv(t, envOptions{}).mountWriteback(true)
	needWritebackSandbox(t, m)
	p := filepath.Join(a, "f")
	writeFile(t, p, "committed")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	ino := st.Ino
	lookupGen := func() uint64 {
		t.Helper()
		var out raw.EntryOut
		if s := m.Lookup(nil, &raw.InHeader{NodeId: 1}, "f", &out); s != raw.OK || out.NodeId != ino {
			t.Fatalf("lookup: %v, node %d", s, out.NodeId)
		}
		m.Forget(ino, 1) // the kernel never saw this entry
		return out.Generation
	}
	gen := lookupGen()

	if _, err := Control(a, OpBegin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(" and extended in the sandbox"), 9); err != nil {
		t.Fatal(err)
	}
	if _, err := Control(a, OpAbort); err != nil {
		t.Fatal(err)
	}

	h := raw.InHeader{NodeId: ino}
	var attr raw.AttrOut
	if s := m.GetAttr(nil, &raw.GetAttrIn{InHeader: h}, &attr); s != raw.OK || attr.Mode != 0 {
		t.Errorf("getattr of the retired inode: %v, mode %#o; want OK and no file type", s, attr.Mode)
	}
	attr = raw.AttrOut{}
	if s := m.SetAttr(nil, &raw.SetAttrIn{SetAttrInCommon: raw.SetAttrInCommon{InHeader: h}}, &attr); s != raw.OK || attr.Mode != 0 {
		t.Errorf("setattr of the retired inode: %v, mode %#o; want OK and no file type", s, attr.Mode)
	}
	var open raw.OpenOut
	if s := m.Open(nil, &raw.OpenIn{InHeader: h, Flags: syscall.O_RDWR}, &open); s != raw.EIO {
		t.Errorf("open of the retired inode: %v, want EIO", s)
	}
	if _, s := m.Read(nil, &raw.ReadIn{InHeader: h, Size: 10}, make([]byte, 10)); s != raw.EIO {
		t.Errorf("read of the retired inode: %v, want EIO", s)
	}
	if _, s := m.Write(nil, &raw.WriteIn{InHeader: h, Size: 1}, []byte("x")); s != raw.EIO {
		t.Errorf("write of the retired inode: %v, want EIO", s)
	}
	if s := m.Fallocate(nil, &raw.FallocateIn{InHeader: h, Length: 10}); s != raw.EIO {
		t.Errorf("fallocate of the retired inode: %v, want EIO", s)
	}
	if _, s := m.CopyFileRange(nil, &raw.CopyFileRangeIn{InHeader: raw.InHeader{NodeId: 1}, NodeIdOut: ino, Len: 1}); s != raw.EIO {
		t.Errorf("copy_file_range into the retired inode: %v, want EIO", s)
	}

	if got := lookupGen(); got == gen {
		t.Errorf("entry after abort has the old generation %d", got)
	}
	attr = raw.AttrOut{}
	if s := m.GetAttr(nil, &raw.GetAttrIn{InHeader: h}, &attr); s != raw.OK || attr.Mode&syscall.S_IFMT != syscall.S_IFREG || attr.Size != 9 {
		t.Errorf("getattr after the new entry: %v, mode %#o size %d; want a regular file of 9 bytes", s, attr.Mode, attr.Size)
	}
	if got := readFile(t, p); got != "committed" {
		t.Errorf("after abort: %q", got)
	}
}

// TestWritebackSandboxKernel: this kernel takes FUSE_NOTIFY_INC_EPOCH
// (so a writeback mount's sandbox is allowed), sent through go-fuse's
// FUSE device found by reflection (incEpoch); a kernel before protocol
// 7.44 would refuse the sandbox of a writeback mount.
func TestWritebackSandboxKernel(t *testing.T) {
	_, m := newEnv(t, envOptions{}).mountWriteback(true)
	needWritebackSandbox(t, m)
	if err := incEpoch(m.srv); err != nil {
		t.Errorf("FUSE_NOTIFY_INC_EPOCH: %v", err)
	}
	for minor, want := range map[uint32]bool{43: false, 44: true, 45: true} {
		if got := writebackSandboxOK(&raw.InitIn{Major: 7, Minor: minor}); got != want {
			t.Errorf("protocol 7.%d: sandbox allowed %v, want %v", minor, got, want)
		}
	}
}

var wbSandboxSeed = flag.Uint64("wbsandbox.seed", 0, "seed of TestWritebackSandboxRandom (0: random, logged)")

// TestWritebackSandboxRandom: rounds of random changes (the metamorphic
// test's operations, and writes and truncates through descriptors opened
// before, which also leave dirty pages from before Begin) in a sandbox on
// a writeback mount, ended by abort or commit at random. After abort both
// mounts show the tree the other mount saw during the sandbox (types,
// modes, link counts, sizes, contents); after commit both show the same
// tree. Not mtimes: the engine's mtime of a file written through the
// writeback cache is often a few ms later than the one the kernel shows,
// sandbox or not (measured: 85 of 100 rewrites and closes; its WRITE may
// be answered after the SETATTR of the kernel's times), so a file the
// sandbox did not change may differ in it; TestWritebackSandboxAttrs
// checks the times of changed files. A failure prints the seed (rerun
// with -args -wbsandbox.seed N).
func TestWritebackSandboxRandom(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mountWriteback(true)
	b, _ := e.mountWriteback(false)
	needWritebackSandbox(t, ma)
	seed := *wbSandboxSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	paths := []string{"a", "b", "d1", "d1/a", "d1/b", "d2", "d2/c"}
	pick := func() string { return paths[rng.IntN(len(paths))] }
	data := func() []byte {
		b := make([]byte, rng.IntN(3)*rng.IntN(20000)+rng.IntN(100))
		for i := range b {
			b[i] = byte(rng.IntN(4)) + 'w'
		}
		return b
	}
	ra, rb := filepath.Join(a, "r"), filepath.Join(b, "r")
	if err := os.Mkdir(ra, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		op, _ := randomOp(rng, pick, data)
		op(ra)
	}
	var held []*os.File
	defer func() { // before the unmount, also after a failure
		for _, f := range held {
			f.Close()
		}
	}()
	for round := range 8 {
		held = held[:0]
		for range 3 {
			if f, err := os.OpenFile(filepath.Join(ra, pick()), os.O_RDWR, 0); err == nil {
				f.WriteAt(data(), int64(rng.IntN(30000))) // dirty before Begin
				held = append(held, f)
			}
		}
		if _, err := Control(a, OpBegin); err != nil {
			t.Fatal(err)
		}
		before := dump(t, rb)
		var ops []string
		for range 25 {
			if len(held) > 0 && rng.IntN(4) == 0 {
				f := held[rng.IntN(len(held))]
				if rng.IntN(2) == 0 {
					b, off := data(), int64(rng.IntN(30000))
					_, err := f.WriteAt(b, off)
					ops = append(ops, fmt.Sprintf("pwrite %s %d@%d: %v", f.Name(), len(b), off, err))
				} else {
					n := int64(rng.IntN(30000))
					ops = append(ops, fmt.Sprintf("ftruncate %s %d: %v", f.Name(), n, f.Truncate(n)))
				}
				continue
			}
			op, args := randomOp(rng, pick, data)
			ops = append(ops, args+": "+op(ra))
		}
		if got := dump(t, rb); got != before {
			t.Fatalf("seed %d round %d: other mount during the sandbox:\n%s\nwant\n%s\nops: %q", seed, round, got, before, ops)
		}
		end := OpAbort
		if rng.IntN(2) == 0 {
			end = OpCommit
		}
		if _, err := Control(a, end); err != nil {
			t.Fatalf("seed %d round %d: end %d: %v", seed, round, end, err)
		}
		gotA, gotB := dump(t, ra), dump(t, rb)
		if end == OpAbort && gotA != before {
			t.Fatalf("seed %d round %d: sandboxed mount after abort:\n%s\nwant\n%s\nops: %q", seed, round, gotA, before, ops)
		}
		if end == OpAbort && gotB != before {
			t.Fatalf("seed %d round %d: other mount after abort:\n%s\nwant\n%s", seed, round, gotB, before)
		}
		if end == OpCommit && gotA != gotB {
			t.Fatalf("seed %d round %d: after commit the sandboxed mount shows\n%s\nthe other\n%s\nops: %q", seed, round, gotA, gotB, ops)
		}
		for _, f := range held {
			f.Close() // EIO if the sandbox changed it and was aborted
		}
		held = held[:0]
	}
}
