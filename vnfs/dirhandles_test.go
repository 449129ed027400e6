package vnfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/txnfs/txnfs/vnfs"
)

// Tests of the directory-handle cache (Config.DirCacheTTL), against each
// NFS server.

// deepCopies creates two 8-level-deep directory chains under e.dir with
// one VMkdir, writes files into the first, and copies them into the
// second with one VSCopy; it returns the operations the copy sent.
func deepCopies(t *testing.T, e *env, f vnfs.FS, files int) uint64 {
	t.Helper()
	ctx := context.Background()
	var mk []vnfs.MkdirItem
	src, dst := e.dir+"/src", e.dir+"/dst"
	for _, top := range []string{src, dst} {
		p := top
		for i := 0; i < 8; i++ {
			mk = append(mk, vnfs.MkdirItem{Path: p, Mode: 0o755})
			p += fmt.Sprintf("/d%d", i)
		}
		mk = append(mk, vnfs.MkdirItem{Path: p, Mode: 0o755})
	}
	n, err := f.VMkdir(ctx, mk)
	mustN(t, n, err, len(mk))
	leaf := "/d0/d1/d2/d3/d4/d5/d6/d7"
	ios := make([]vnfs.IO, files)
	cps := make([]vnfs.CopyItem, files)
	for i := range ios {
		name := fmt.Sprintf("/f%03d", i)
		ios[i] = vnfs.IO{File: vnfs.P(src + leaf + name), Data: []byte(strings.Repeat("x", i+1)), Flags: vnfs.Create | vnfs.Stable, Mode: 0o644}
		cps[i] = vnfs.CopyItem{Src: vnfs.P(src + leaf + name), Dst: vnfs.P(dst + leaf + name), Length: vnfs.CopyToEnd,
			Flags: vnfs.Create | vnfs.Truncate | vnfs.Stable, Mode: 0o644}
	}
	n, err = f.VWrite(ctx, ios)
	mustN(t, n, err, files)
	before := f.(vnfs.StatsFS).Stats().Ops
	n, err = f.VSCopy(ctx, cps)
	mustN(t, n, err, files)
	ops := f.(vnfs.StatsFS).Stats().Ops - before
	// Every byte landed where it should.
	rd := make([]vnfs.IO, files)
	for i := range rd {
		rd[i] = vnfs.IO{File: cps[i].Dst, Data: make([]byte, files+10)}
	}
	n, err = f.VRead(ctx, rd)
	mustN(t, n, err, files)
	for i := range rd {
		if rd[i].N != i+1 {
			t.Fatalf("%s: %d bytes, want %d", rd[i].File.Path, rd[i].N, i+1)
		}
	}
	return ops
}

// TestDirHandlesFewerOps: with directory handles learnt from VMkdir, a
// copy between two deep directories reaches each with one PUTFH instead
// of a LOOKUP per component (the source and destination handles are both
// files after a COPY, so path compression alone starts from the root).
func TestDirHandlesFewerOps(t *testing.T) {
	const files = 40
	var with, without uint64
	for _, ttl := range []int{0, -1} {
		forEach(t, func(t *testing.T, e *env) {
			if !e.nfs || e.scalar || e.peer.Name != "txnfs" {
				t.Skip("txnfs only (COPY)")
			}
			ops := deepCopies(t, e, e.fs, files)
			t.Logf("%s ttl=%d: %d operations for %d copies", e.name, ttl, ops, files)
			if ttl == 0 {
				with = ops
			} else {
				without = ops
			}
		}, suiteOpts{cfg: func(c *vnfs.Config) {
			if ttl < 0 {
				c.DirCacheTTL = -1
			}
		}})
		if t.Failed() {
			return
		}
	}
	if with == 0 || without == 0 {
		t.Skip("no NFS server")
	}
	// Per copy: LOOKUP, SAVEFH, OPEN, SETATTR, COPY, CLOSE and at most
	// two PUTFHs with the cache; 2x(PUTFH + 10 LOOKUPs) more without.
	if with > files*9 || without < with+files*10 {
		t.Fatalf("operations: %d with directory handles, %d without; want <= %d and >= %d more without",
			with, without, files*9, files*10)
	}
}

// TestDirHandlesRename: after this client renames a directory whose
// handle it knows, the old path is gone and the new one works, within one
// vector and across calls.
func TestDirHandlesRename(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.dir+"/a", e.dir+"/b"
		n, err := e.fs.VMkdir(ctx, []vnfs.MkdirItem{{Path: a, Mode: 0o755}, {Path: a + "/sub", Mode: 0o755}})
		mustN(t, n, err, 2)
		// Learn the handles from a listing too.
		if err := e.fs.VListDir(ctx, []string{e.dir}, vnfs.ListOptions{Recursive: true}, nil); err != nil {
			t.Fatal(err)
		}
		n, err = e.fs.VRename(ctx, []vnfs.RenameItem{{Old: a, New: b}})
		mustN(t, n, err, 1)
		// Old path: NOENT, not the renamed directory.
		_, err = e.fs.VWrite(ctx, []vnfs.IO{{File: vnfs.P(a + "/sub/f"), Data: []byte("x"), Flags: vnfs.Create}})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("write under the old path: %v, want not exist", err)
		}
		// Rename back and forth inside one vector, then write under
		// the final name in the same call sequence.
		n, err = e.fs.VRename(ctx, []vnfs.RenameItem{{Old: b, New: a}, {Old: a + "/sub", New: a + "/sub2"}})
		mustN(t, n, err, 2)
		n, err = e.fs.VWrite(ctx, []vnfs.IO{{File: vnfs.P(a + "/sub2/f"), Data: []byte("x"), Flags: vnfs.Create}})
		mustN(t, n, err, 1)
		_, err = e.fs.VWrite(ctx, []vnfs.IO{{File: vnfs.P(a + "/sub/f"), Data: []byte("x"), Flags: vnfs.Create}})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("write under a renamed subdirectory: %v, want not exist", err)
		}
		// Removed and recreated by this client: the new directory.
		if err := vnfs.RemoveRecursive(ctx, e.fs, a+"/sub2"); err != nil {
			t.Fatal(err)
		}
		n, err = e.fs.VMkdir(ctx, []vnfs.MkdirItem{{Path: a + "/sub2", Mode: 0o755}})
		mustN(t, n, err, 1)
		n, err = e.fs.VWrite(ctx, []vnfs.IO{{File: vnfs.P(a + "/sub2/g"), Data: []byte("y"), Flags: vnfs.Create}})
		mustN(t, n, err, 1)
	})
}

// TestDirHandlesOtherClientRemoves: a directory another client removed
// and recreated under the same path is, within the TTL, reached by its
// old handle: the item fails with ESTALE, the cache is emptied, and the
// next call resolves the path again.
func TestDirHandlesOtherClientRemoves(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if !e.nfs || e.scalar {
			t.Skip("NFS only")
		}
		ctx := context.Background()
		d := e.dir + "/d"
		n, err := e.fs.VMkdir(ctx, []vnfs.MkdirItem{{Path: d, Mode: 0o755}})
		mustN(t, n, err, 1)
		o := other(t, e)
		if err := vnfs.RemoveRecursive(ctx, o, d); err != nil {
			t.Fatal(err)
		}
		n, err = o.VMkdir(ctx, []vnfs.MkdirItem{{Path: d, Mode: 0o755}})
		mustN(t, n, err, 1)
		_, err = e.fs.VWrite(ctx, []vnfs.IO{{File: vnfs.P(d + "/f"), Data: []byte("x"), Flags: vnfs.Create}})
		if err != nil && !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("first write: %v, want success or ESTALE", err)
		}
		n, err = e.fs.VWrite(ctx, []vnfs.IO{{File: vnfs.P(d + "/f"), Data: []byte("x"), Flags: vnfs.Create}})
		mustN(t, n, err, 1)
		st, err := vnfs.Stat(ctx, o, d+"/f")
		if err != nil || st.Size != 1 {
			t.Fatalf("the other client sees %+v, %v", st, err)
		}
	})
}
