package vnfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/vnfs"
)

func content(seed, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustN(t *testing.T, n int, err error, want int) {
	t.Helper()
	if err != nil || n != want {
		t.Fatalf("n=%d err=%v, want n=%d", n, err, want)
	}
}

// writeFiles writes count files of size bytes under dir with one VWrite.
func writeFiles(t *testing.T, e *env, dir string, count, size int) [][]byte {
	t.Helper()
	ios := make([]vnfs.IO, count)
	data := make([][]byte, count)
	for i := range ios {
		data[i] = content(i, size)
		ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%04d", dir, i)), Data: data[i], Flags: vnfs.Create | vnfs.Truncate}
	}
	n, err := e.fs.VWrite(context.Background(), ios)
	mustN(t, n, err, count)
	for i := range ios {
		if ios[i].N != size {
			t.Fatalf("item %d wrote %d of %d", i, ios[i].N, size)
		}
	}
	return data
}

func readBack(t *testing.T, e *env, dir string, data [][]byte) {
	t.Helper()
	ios := make([]vnfs.IO, len(data))
	for i := range ios {
		ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%04d", dir, i)), Data: make([]byte, len(data[i])+10)}
	}
	n, err := e.fs.VRead(context.Background(), ios)
	mustN(t, n, err, len(data))
	for i := range ios {
		if !bytes.Equal(ios[i].Data[:ios[i].N], data[i]) || !ios[i].EOF {
			t.Fatalf("item %d: read %d bytes eof=%v, want %d", i, ios[i].N, ios[i].EOF, len(data[i]))
		}
	}
}

func TestReadWrite(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		data := writeFiles(t, e, e.dir, 20, 3000)
		readBack(t, e, e.dir, data)
		// Discontinuous offsets in several files, in one call.
		ctx := context.Background()
		ios := []vnfs.IO{
			{File: vnfs.P(e.dir + "/f0001"), Offset: 10, Data: make([]byte, 5)},
			{File: vnfs.P(e.dir + "/f0002"), Offset: 2990, Data: make([]byte, 100)},
			{File: vnfs.P(e.dir + "/f0001"), Offset: 1000, Data: make([]byte, 7)},
		}
		n, err := e.fs.VRead(ctx, ios)
		mustN(t, n, err, 3)
		if !bytes.Equal(ios[0].Data, data[1][10:15]) || !bytes.Equal(ios[2].Data, data[1][1000:1007]) {
			t.Fatal("wrong bytes at offsets")
		}
		if ios[1].N != 10 || !ios[1].EOF {
			t.Fatalf("read past end: n=%d eof=%v", ios[1].N, ios[1].EOF)
		}
	}, suiteOpts{scalar: true})
}

// TestSplitLongVector checks that a vector longer than one COMPOUND (the
// 256-operation cap) is split and merged invisibly.
func TestSplitLongVector(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		before := e.stats()
		data := writeFiles(t, e, e.dir, 600, 100)
		after := e.stats()
		readBack(t, e, e.dir, data)
		if e.nfs {
			// 600 files × (OPEN, WRITE, CLOSE, RESTOREFH) ≈ 2400 ops:
			// at least 10 COMPOUNDs of ≤ 256 ops, but not one per file.
			c := after.Compounds - before.Compounds
			if c < 10 || c > 50 {
				t.Fatalf("600 writes took %d COMPOUNDs", c)
			}
		}
	})
}

// TestSplitLargeData checks data larger than one RPC (1 MiB).
func TestSplitLargeData(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		big := content(1, 5<<20+123)
		small := content(2, 10)
		ios := []vnfs.IO{
			{File: vnfs.P(e.dir + "/small1"), Data: small, Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/big"), Data: big, Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/small2"), Data: small, Flags: vnfs.Create},
		}
		before := e.stats()
		n, err := e.fs.VWrite(ctx, ios)
		mustN(t, n, err, 3)
		if e.nfs && !e.scalar {
			if c := e.stats().Compounds - before.Compounds; c < 5 || c > 8 {
				t.Fatalf("5 MiB write took %d COMPOUNDs", c)
			}
		}
		got, err := vnfs.ReadFile(ctx, e.fs, e.dir+"/big")
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("read back %d bytes, err %v", len(got), err)
		}
		rd := []vnfs.IO{{File: vnfs.P(e.dir + "/big"), Offset: 1 << 20, Data: make([]byte, 3<<20)}}
		n, err = e.fs.VRead(ctx, rd)
		mustN(t, n, err, 1)
		if !bytes.Equal(rd[0].Data, big[1<<20:4<<20]) {
			t.Fatal("ranged read mismatch")
		}
	}, suiteOpts{scalar: true})
}

// TestFirstFailure checks the vNFS failure semantics: results for the
// items before the failure, the index of the failed one, and nothing after.
func TestFirstFailure(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ios := []vnfs.IO{
			{File: vnfs.P(e.dir + "/a"), Data: []byte("a"), Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/b"), Data: []byte("b"), Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/missing/c"), Data: []byte("c"), Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/d"), Data: []byte("d"), Flags: vnfs.Create},
		}
		n, err := e.fs.VWrite(ctx, ios)
		var ve *vnfs.Error
		if n != 2 || !errors.As(err, &ve) || ve.Index != 2 || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("n=%d err=%v", n, err)
		}
		if ve.Path != e.dir+"/missing/c" || ve.Op != "write" {
			t.Fatalf("error names %q %q", ve.Op, ve.Path)
		}
		if _, err := vnfs.Stat(ctx, e.fs, e.dir+"/d"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("item after the failure was executed: %v", err)
		}
		if _, err := vnfs.Stat(ctx, e.fs, e.dir+"/b"); err != nil {
			t.Fatalf("item before the failure: %v", err)
		}
		// Writes: the failure in the middle of a long, split vector; no
		// item after it may have run, even with pipelined COMPOUNDs.
		long := make([]vnfs.IO, 600)
		for i := range long {
			long[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/long/f%03d", e.dir, i)), Data: []byte("x"), Flags: vnfs.Create}
		}
		long[400].File = vnfs.P(e.dir + "/nodir/f")
		if err := vnfs.Mkdir(ctx, e.fs, e.dir+"/long", 0o755); err != nil {
			t.Fatal(err)
		}
		n, err = e.fs.VWrite(ctx, long)
		if n != 400 || !errors.As(err, &ve) || ve.Index != 400 {
			t.Fatalf("n=%d err=%v", n, err)
		}
		if ents, err := vnfs.ReadDir(ctx, e.fs, e.dir+"/long", 0); err != nil || len(ents) != 400 {
			t.Fatalf("%d files after a failure at item 400 (%v)", len(ents), err)
		}
		// Reads: the failure in the middle of a long, split vector.
		rd := make([]vnfs.IO, 300)
		for i := range rd {
			rd[i] = vnfs.IO{File: vnfs.P(e.dir + "/a"), Data: make([]byte, 1)}
		}
		rd[250].File = vnfs.P(e.dir + "/nope")
		n, err = e.fs.VRead(ctx, rd)
		if n != 250 || !errors.As(err, &ve) || ve.Index != 250 {
			t.Fatalf("n=%d err=%v", n, err)
		}
		if rd[249].N != 1 || rd[251].N != 0 {
			t.Fatal("results around the failure")
		}
	}, suiteOpts{scalar: true})
}

// TestPathCompression checks that paths with locality are reached
// relative to each other (vNFS §4 "Path compression") and that the result
// is the same as without compression.
func TestPathCompression(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			ops := map[bool]uint64{}
			for _, compress := range []bool{true, false} {
				f, err := vnfs.Dial(ctx, vnfs.Config{Addr: p.Addr, Root: p.Root, NoPathCompression: !compress})
				if err != nil {
					t.Fatal(err)
				}
				base := fmt.Sprintf("/pc%d", seq.Add(1))
				deep := base + "/1/2/3/4/5/6/7"
				if err := vnfs.EnsureDirectory(ctx, f, deep, 0o755); err != nil {
					t.Fatal(err)
				}
				// Siblings (LOOKUPP), files in one deep dir (SAVEFH /
				// RESTOREFH), and a jump back up.
				mk := []vnfs.MkdirItem{{Path: deep + "/a"}, {Path: deep + "/b"}, {Path: deep + "/a/x"}, {Path: deep + "/b/y"}}
				n, err := f.VMkdir(ctx, mk)
				mustN(t, n, err, 4)
				var ios []vnfs.IO
				for _, d := range []string{deep + "/a", deep + "/b", deep + "/a/x", base + "/1"} {
					for i := 0; i < 5; i++ {
						ios = append(ios, vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%d", d, i)), Data: []byte(d), Flags: vnfs.Create})
					}
				}
				s0 := f.(vnfs.StatsFS).Stats()
				n, err = f.VWrite(ctx, ios)
				mustN(t, n, err, len(ios))
				s1 := f.(vnfs.StatsFS).Stats()
				ops[compress] = s1.Ops - s0.Ops
				for i := range ios {
					ios[i].Data = make([]byte, 64)
				}
				n, err = f.VRead(ctx, ios)
				mustN(t, n, err, len(ios))
				for _, io := range ios {
					if string(io.Data[:io.N]) != path.Dir(io.File.Path) {
						t.Fatalf("%s holds %q", io.File.Path, io.Data[:io.N])
					}
				}
				// Renames within and across the deep directories.
				rn := []vnfs.RenameItem{{Old: deep + "/a/f0", New: deep + "/b/g0"}, {Old: deep + "/a/f1", New: deep + "/b/g1"}, {Old: deep + "/b/f0", New: base + "/1/h"}}
				n, err = f.VRename(ctx, rn)
				mustN(t, n, err, 3)
				if err := vnfs.RemoveRecursive(ctx, f, base); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			t.Logf("ops for 20 writes: compressed %d, uncompressed %d", ops[true], ops[false])
			if ops[true] >= ops[false]*2/3 {
				t.Fatalf("compression saved too little: %d vs %d ops", ops[true], ops[false])
			}
		})
	}
}

func TestAttrs(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeFiles(t, e, e.dir, 5, 100)
		mt := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		at := time.Date(2002, 2, 3, 4, 5, 6, 0, time.UTC)
		set := make([]vnfs.AttrItem, 5)
		for i := range set {
			set[i] = vnfs.AttrItem{File: vnfs.P(fmt.Sprintf("%s/f%04d", e.dir, i)),
				Mask: vnfs.AttrMode | vnfs.AttrUid | vnfs.AttrGid | vnfs.AttrSize | vnfs.AttrMtime | vnfs.AttrAtime,
				Attr: vnfs.Attr{Mode: 0o600 + uint32(i), Uid: 1000 + uint32(i), Gid: 2000 + uint32(i), Size: uint64(10 * i), Mtime: mt, Atime: at}}
		}
		n, err := e.fs.VSetAttrs(ctx, set)
		mustN(t, n, err, 5)
		get := make([]vnfs.AttrItem, 6)
		for i := range set {
			get[i] = vnfs.AttrItem{File: set[i].File, Mask: vnfs.AttrStat}
		}
		get[5] = vnfs.AttrItem{File: vnfs.P(e.dir), Mask: vnfs.AttrStat}
		n, err = e.fs.VGetAttrs(ctx, get)
		mustN(t, n, err, 6)
		for i := 0; i < 5; i++ {
			a := get[i].Attr
			if a.Type != vnfs.TypeRegular || a.Mode != 0o600+uint32(i) || a.Uid != 1000+uint32(i) || a.Gid != 2000+uint32(i) ||
				a.Size != uint64(10*i) || !a.Mtime.Equal(mt) || !a.Atime.Equal(at) || a.Nlink != 1 || a.Ino == 0 {
				t.Fatalf("item %d: %+v", i, a)
			}
		}
		if get[5].Attr.Type != vnfs.TypeDir {
			t.Fatalf("dir type %v", get[5].Attr.Type)
		}
		// Root attributes.
		if a, err := vnfs.Stat(ctx, e.fs, "/"); err != nil || a.Type != vnfs.TypeDir {
			t.Fatalf("root: %v %v", a.Type, err)
		}
	}, suiteOpts{scalar: true})
}

func TestMkdirListdir(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := vnfs.EnsureDirectory(ctx, e.fs, e.dir+"/x/y/z", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := vnfs.EnsureDirectory(ctx, e.fs, e.dir+"/x/y/w", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := vnfs.EnsureDirectory(ctx, e.fs, e.dir+"/x/y", 0o755); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, e, e.dir+"/x/y/z", 300, 1)
		if err := vnfs.WriteFile(ctx, e.fs, e.dir+"/x/file", []byte("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := vnfs.EnsureDirectory(ctx, e.fs, e.dir+"/x/file/sub", 0o755); !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("ensure under a file: %v", err)
		}
		var got []string
		sizes := map[string]uint64{}
		err := e.fs.VListDir(ctx, []string{e.dir}, vnfs.ListOptions{Mask: vnfs.AttrSize | vnfs.AttrMode, Recursive: true}, func(de vnfs.DirEntry) error {
			got = append(got, fmt.Sprintf("%d %s %s", de.Depth, de.Path(), de.Attr.Type))
			sizes[de.Path()] = de.Attr.Size
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		if len(got) != 305 || got[0] != "0 "+e.dir+"/x directory" || got[1] != "1 "+e.dir+"/x/file regular" {
			t.Fatalf("%d entries: %q", len(got), got[:min(5, len(got))])
		}
		if sizes[e.dir+"/x/file"] != 2 || sizes[e.dir+"/x/y/z/f0299"] != 1 {
			t.Fatal("sizes in listing")
		}
		// Several directories at once, non-recursive; a missing one fails.
		ents := map[string]int{}
		err = e.fs.VListDir(ctx, []string{e.dir + "/x/y", e.dir + "/x/y/z"}, vnfs.ListOptions{}, func(de vnfs.DirEntry) error {
			ents[de.Dir]++
			return nil
		})
		if err != nil || ents[e.dir+"/x/y"] != 2 || ents[e.dir+"/x/y/z"] != 300 {
			t.Fatalf("%v %v", ents, err)
		}
		err = e.fs.VListDir(ctx, []string{e.dir + "/x", e.dir + "/nope"}, vnfs.ListOptions{}, nil)
		var ve *vnfs.Error
		if !errors.As(err, &ve) || ve.Index != 1 || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("missing dir: %v", err)
		}
		// mkdir of an existing directory.
		n, err := e.fs.VMkdir(ctx, []vnfs.MkdirItem{{Path: e.dir + "/new"}, {Path: e.dir + "/x"}})
		if n != 1 || !errors.Is(err, fs.ErrExist) {
			t.Fatalf("n=%d err=%v", n, err)
		}
	}, suiteOpts{scalar: true})
}

func TestLinks(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeFiles(t, e, e.dir, 3, 10)
		sl := []vnfs.SymlinkItem{{Path: e.dir + "/s1", Target: "f0000"}, {Path: e.dir + "/s2", Target: "/some/where/else"}, {Path: e.dir + "/s3", Target: "../x"}}
		n, err := e.fs.VSymlink(ctx, sl)
		mustN(t, n, err, 3)
		rl := []vnfs.ReadlinkItem{{Path: e.dir + "/s1"}, {Path: e.dir + "/s2"}, {Path: e.dir + "/s3"}}
		n, err = e.fs.VReadlink(ctx, rl)
		mustN(t, n, err, 3)
		for i := range rl {
			if rl[i].Target != sl[i].Target {
				t.Fatalf("readlink %s = %q", rl[i].Path, rl[i].Target)
			}
		}
		hl := []vnfs.LinkItem{{Old: e.dir + "/f0000", New: e.dir + "/h0"}, {Old: e.dir + "/f0000", New: e.dir + "/h1"}, {Old: e.dir + "/f0001", New: e.dir + "/h2"}}
		n, err = e.fs.VHardlink(ctx, hl)
		mustN(t, n, err, 3)
		a, err := vnfs.Stat(ctx, e.fs, e.dir+"/h1")
		if err != nil || a.Nlink != 3 || a.Size != 10 {
			t.Fatalf("%+v %v", a, err)
		}
		a, err = vnfs.Stat(ctx, e.fs, e.dir+"/s2")
		if err != nil || a.Type != vnfs.TypeSymlink {
			t.Fatalf("symlink stat %+v %v", a, err)
		}
		if _, err := vnfs.Readlink(ctx, e.fs, e.dir+"/f0000"); err == nil {
			t.Fatal("readlink of a regular file succeeded")
		}
	}, suiteOpts{scalar: true})
}

func TestRemoveRename(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeFiles(t, e, e.dir, 10, 10)
		if err := vnfs.Mkdir(ctx, e.fs, e.dir+"/d", 0o755); err != nil {
			t.Fatal(err)
		}
		rn := make([]vnfs.RenameItem, 10)
		for i := range rn {
			rn[i] = vnfs.RenameItem{Old: fmt.Sprintf("%s/f%04d", e.dir, i), New: fmt.Sprintf("%s/d/g%d", e.dir, i)}
		}
		n, err := e.fs.VRename(ctx, rn)
		mustN(t, n, err, 10)
		ents, err := vnfs.ReadDir(ctx, e.fs, e.dir, 0)
		if err != nil || len(ents) != 1 || ents[0].Name != "d" {
			t.Fatalf("%v %v", ents, err)
		}
		// Remove: a non-empty directory fails in the middle.
		rm := []string{e.dir + "/d/g0", e.dir + "/d", e.dir + "/d/g1"}
		n, err = e.fs.VRemove(ctx, rm)
		if n != 1 || !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			t.Fatalf("n=%d err=%v", n, err)
		}
		if err := vnfs.RemoveRecursive(ctx, e.fs, e.dir+"/d"); err != nil {
			t.Fatal(err)
		}
		ents, err = vnfs.ReadDir(ctx, e.fs, e.dir, 0)
		if err != nil || len(ents) != 0 {
			t.Fatalf("%v %v", ents, err)
		}
		if err := vnfs.RemoveRecursive(ctx, e.fs, e.dir+"/d"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("removing a missing tree: %v", err)
		}
	}, suiteOpts{scalar: true})
}

func TestOpenClose(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		items := []vnfs.OpenItem{
			{Path: e.dir + "/a", Flags: vnfs.OpenRead | vnfs.OpenWrite | vnfs.OpenCreate},
			{Path: e.dir + "/b", Flags: vnfs.OpenWrite | vnfs.OpenCreate | vnfs.OpenExclusive, Mode: 0o600},
		}
		n, err := e.fs.VOpen(ctx, items)
		mustN(t, n, err, 2)
		fa, fb := items[0].FD, items[1].FD
		if fa == 0 || fb == 0 || fa == fb {
			t.Fatalf("fds %d %d", fa, fb)
		}
		ios := []vnfs.IO{
			{File: vnfs.D(fa), Data: []byte("hello "), Offset: 0},
			{File: vnfs.D(fb), Data: []byte("bee"), Offset: 0},
			{File: vnfs.D(fa), Data: []byte("world"), Offset: 6},
		}
		n, err = e.fs.VWrite(ctx, ios)
		mustN(t, n, err, 3)
		rd := []vnfs.IO{{File: vnfs.D(fa), Data: make([]byte, 20)}}
		n, err = e.fs.VRead(ctx, rd)
		mustN(t, n, err, 1)
		if string(rd[0].Data[:rd[0].N]) != "hello world" {
			t.Fatalf("read %q", rd[0].Data[:rd[0].N])
		}
		// Opening b exclusively again fails.
		n, err = e.fs.VOpen(ctx, []vnfs.OpenItem{{Path: e.dir + "/b", Flags: vnfs.OpenWrite | vnfs.OpenCreate | vnfs.OpenExclusive}})
		if n != 0 || !errors.Is(err, fs.ErrExist) {
			t.Fatalf("exclusive reopen: %v", err)
		}
		n, err = e.fs.VClose(ctx, []vnfs.FD{fa, fb})
		mustN(t, n, err, 2)
		if _, err := e.fs.VRead(ctx, rd); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("read of a closed fd: %v", err)
		}
		if got, err := vnfs.ReadFile(ctx, e.fs, e.dir+"/b"); err != nil || string(got) != "bee" {
			t.Fatalf("%q %v", got, err)
		}
	}, suiteOpts{scalar: true})
}

func TestAppend(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ios := []vnfs.IO{
			{File: vnfs.P(e.dir + "/log"), Offset: vnfs.AppendOffset, Data: []byte("one\n"), Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/log"), Offset: vnfs.AppendOffset, Data: []byte("two\n")},
			{File: vnfs.P(e.dir + "/log2"), Offset: vnfs.AppendOffset, Data: []byte("x"), Flags: vnfs.Create},
		}
		n, err := e.fs.VWrite(ctx, ios)
		mustN(t, n, err, 3)
		if err := vnfs.AppendFile(ctx, e.fs, e.dir+"/log", []byte("three\n")); err != nil {
			t.Fatal(err)
		}
		got, err := vnfs.ReadFile(ctx, e.fs, e.dir+"/log")
		if err != nil || string(got) != "one\ntwo\nthree\n" {
			t.Fatalf("log = %q, %v", got, err)
		}
		if a, err := vnfs.Stat(ctx, e.fs, e.dir+"/log2"); err != nil || a.Size != 1 {
			t.Fatalf("log2: %+v %v", a, err)
		}
	}, suiteOpts{scalar: true})
}

func TestCopyClone(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		data := writeFiles(t, e, e.dir, 4, 5000)
		items := []vnfs.CopyItem{
			{Src: vnfs.P(e.dir + "/f0000"), Dst: vnfs.P(e.dir + "/c0"), Length: vnfs.CopyToEnd, Flags: vnfs.Create},
			{Src: vnfs.P(e.dir + "/f0001"), Dst: vnfs.P(e.dir + "/c1"), SrcOffset: 100, Length: 50, Flags: vnfs.Create},
		}
		for _, op := range []string{"copy", "scopy"} {
			var n int
			var err error
			if op == "copy" {
				n, err = e.fs.VCopy(ctx, items)
			} else {
				n, err = e.fs.VSCopy(ctx, items)
			}
			mustN(t, n, err, 2)
			c0, _ := vnfs.ReadFile(ctx, e.fs, e.dir+"/c0")
			c1, _ := vnfs.ReadFile(ctx, e.fs, e.dir+"/c1")
			if !bytes.Equal(c0, data[0]) || !bytes.Equal(c1, data[1][100:150]) || items[0].N != 5000 || items[1].N != 50 {
				t.Fatalf("%s: %d %d bytes, N %d %d", op, len(c0), len(c1), items[0].N, items[1].N)
			}
		}
		// concat f2 + f3 by cloning.
		cl := []vnfs.CopyItem{
			{Src: vnfs.P(e.dir + "/f0002"), Dst: vnfs.P(e.dir + "/cat"), Length: vnfs.CopyToEnd, Flags: vnfs.Create | vnfs.Truncate},
			{Src: vnfs.P(e.dir + "/f0003"), Dst: vnfs.P(e.dir + "/cat"), DstOffset: 5000, Length: vnfs.CopyToEnd},
		}
		n, err := e.fs.VClone(ctx, cl)
		if errors.Is(err, vnfs.ErrNotSupported) {
			t.Logf("%s: clone not supported: %v", e.name, err)
			if e.peer != nil && e.peer.Name == "txnfs" {
				t.Fatal("txnfs must support CLONE")
			}
			return
		}
		mustN(t, n, err, 2)
		got, _ := vnfs.ReadFile(ctx, e.fs, e.dir+"/cat")
		if !bytes.Equal(got, append(append([]byte(nil), data[2]...), data[3]...)) || cl[1].N != 5000 {
			t.Fatalf("cat: %d bytes", len(got))
		}
	})
}

// TestTxn checks transactional mode: all-or-nothing on txnfs, a clean
// refusal elsewhere, and a clear error when the vector does not fit one
// COMPOUND.
func TestTxn(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tx := e.fs.Txn()
		mk := []vnfs.MkdirItem{{Path: e.dir + "/a"}, {Path: e.dir + "/a/b"}}
		n, err := tx.VMkdir(ctx, mk)
		if !e.txn {
			if !errors.Is(err, vnfs.ErrTxnUnsupported) || n != 0 {
				t.Fatalf("n=%d err=%v", n, err)
			}
			if _, err := vnfs.Stat(ctx, e.fs, e.dir+"/a"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("refused transaction left a trace: %v", err)
			}
			return
		}
		mustN(t, n, err, 2)
		// A failing item aborts everything before it.
		ios := []vnfs.IO{
			{File: vnfs.P(e.dir + "/a/x"), Data: []byte("x"), Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/a/b/y"), Data: []byte("y"), Flags: vnfs.Create},
			{File: vnfs.P(e.dir + "/nope/z"), Data: []byte("z"), Flags: vnfs.Create},
		}
		n, err = tx.VWrite(ctx, ios)
		var ve *vnfs.Error
		if n != 0 || !errors.As(err, &ve) || ve.Index != 2 {
			t.Fatalf("n=%d err=%v", n, err)
		}
		if _, err := vnfs.Stat(ctx, e.fs, e.dir+"/a/x"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("aborted transaction left a/x: %v", err)
		}
		ios[2].File = vnfs.P(e.dir + "/z")
		n, err = tx.VWrite(ctx, ios)
		mustN(t, n, err, 3)
		// Renames of directories, atomically.
		n, err = tx.VRename(ctx, []vnfs.RenameItem{{Old: e.dir + "/a", New: e.dir + "/a2"}, {Old: e.dir + "/z", New: e.dir + "/a2/z"}})
		mustN(t, n, err, 2)
		if got, err := vnfs.ReadFile(ctx, e.fs, e.dir+"/a2/b/y"); err != nil || string(got) != "y" {
			t.Fatalf("%q %v", got, err)
		}
		// Too large for one COMPOUND: a multi-compound transaction
		// (txn_test.go tests it further).
		big := make([]vnfs.MkdirItem, 400)
		for i := range big {
			big[i] = vnfs.MkdirItem{Path: fmt.Sprintf("%s/m%d", e.dir, i)}
		}
		n, err = tx.VMkdir(ctx, big)
		mustN(t, n, err, len(big))
		if _, err := vnfs.Stat(ctx, e.fs, e.dir+"/m399"); err != nil {
			t.Fatalf("multi-compound transaction did not create m399: %v", err)
		}
	})
}

// TestUnordered checks the unordered view: everything is done, and a
// failure names the first failed item.
func TestUnordered(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		u := vnfs.Unordered(e.fs)
		ios := make([]vnfs.IO, 700)
		for i := range ios {
			ios[i] = vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%04d", e.dir, i)), Data: content(i, 500), Flags: vnfs.Create}
		}
		n, err := u.VWrite(ctx, ios)
		mustN(t, n, err, len(ios))
		data := make([][]byte, len(ios))
		for i := range data {
			data[i] = content(i, 500)
		}
		readBack(t, e, e.dir, data)
		ios[300].File = vnfs.P(e.dir + "/none/x")
		ios[500].File = vnfs.P(e.dir + "/none/y")
		n, err = u.VWrite(ctx, ios)
		var ve *vnfs.Error
		if n != 300 || !errors.As(err, &ve) || ve.Index != 300 {
			t.Fatalf("n=%d err=%v", n, err)
		}
		if err := vnfs.RemoveRecursive(ctx, u, e.dir); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCreateTruncateInOpen: a write with Create|Truncate over existing,
// longer files leaves exactly the new data (and keeps the files' mode),
// and, over NFS, truncates in the OPEN (UNCHECKED4 with size 0 in
// createattrs): OPEN, WRITE, CLOSE and the step back to the directory
// per file, no SETATTR.
func TestCreateTruncateInOpen(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const files = 40
		writeFiles(t, e, e.dir, files, 300)
		it := []vnfs.AttrItem{{File: vnfs.P(e.dir + "/f0000"), Mask: vnfs.AttrMode, Attr: vnfs.Attr{Mode: 0o600}}}
		if _, err := e.fs.VSetAttrs(ctx, it); err != nil {
			t.Fatal(err)
		}
		var ops0 uint64
		if e.nfs {
			ops0 = e.stats().Ops
		}
		data := writeFiles(t, e, e.dir, files, 10)
		if e.nfs && !e.scalar {
			if per := float64(e.stats().Ops-ops0) / files; per > 4.5 {
				t.Fatalf("%.1f operations per file, want OPEN, WRITE, CLOSE and a RESTOREFH", per)
			}
		}
		readBack(t, e, e.dir, data)
		a, err := vnfs.Stat(ctx, e.fs, e.dir+"/f0000")
		if err != nil || a.Size != 10 || a.Mode&0o777 != 0o600 {
			t.Fatalf("after the truncating write: %+v %v, want size 10 mode 0600", a, err)
		}
	}, suiteOpts{scalar: true})
}
