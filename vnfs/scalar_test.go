package vnfs_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/txnfs/txnfs/vnfs"
)

// TestScalarCache checks the baseline's kernel-like data cache: a second
// read of an unchanged file sends no READ, and a change made by another
// client is seen at the next open (close-to-open).
func TestScalarCache(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			dial := func(cfg vnfs.Config) vnfs.FS {
				cfg.Addr, cfg.Root = p.Addr, p.Root
				f, err := vnfs.Dial(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				return f
			}
			writer := dial(vnfs.Config{})
			cached := dial(vnfs.Config{Scalar: true, ScalarCache: true})
			dir := fmt.Sprintf("/scalar-cache-%d", seq.Add(1))
			if err := vnfs.Mkdir(ctx, writer, dir, 0o755); err != nil {
				t.Fatal(err)
			}
			name := dir + "/f"
			one := bytes.Repeat([]byte("a"), 300<<10) // several READs
			if err := vnfs.WriteFile(ctx, writer, name, one, 0o644); err != nil {
				t.Fatal(err)
			}
			read := func() ([]byte, uint64) {
				t.Helper()
				before := rpcs(cached)
				ios := []vnfs.IO{{File: vnfs.P(name), Data: make([]byte, 1<<20)}}
				if _, err := cached.VRead(ctx, ios); err != nil {
					t.Fatal(err)
				}
				return ios[0].Data[:ios[0].N], rpcs(cached) - before
			}
			got, cold := read()
			if !bytes.Equal(got, one) {
				t.Fatalf("cold read: %d bytes, want %d", len(got), len(one))
			}
			got, warm := read()
			if !bytes.Equal(got, one) {
				t.Fatalf("warm read: %d bytes, want %d", len(got), len(one))
			}
			if warm != 2 || cold <= warm {
				t.Fatalf("RPCs: cold %d, warm %d; want warm = 2 (OPEN+GETATTR, CLOSE)", cold, warm)
			}
			two := bytes.Repeat([]byte("b"), 100)
			if err := vnfs.WriteFile(ctx, writer, name, two, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, n := read(); !bytes.Equal(got, two) || n <= 2 {
				t.Fatalf("after another client's write: %q (%d RPCs), want %q read from the server", got, n, two)
			}
		})
	}
}

// TestScalarRmPattern checks the baseline's rm -r against the Linux
// client's RPCs: one READDIR per directory (entries' handles primed, no
// LOOKUP of a listed subdirectory), then LOOKUP + REMOVE per name but the
// first of each directory (the directory changed, so its dentries are
// revalidated), and ls -R costs one READDIR per directory.
func TestScalarRmPattern(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			vec, err := vnfs.Dial(ctx, vnfs.Config{Addr: p.Addr, Root: p.Root})
			if err != nil {
				t.Fatal(err)
			}
			defer vec.Close()
			sc, err := vnfs.Dial(ctx, vnfs.Config{Addr: p.Addr, Root: p.Root, Scalar: true})
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			top := fmt.Sprintf("/scalar-rm-%d", seq.Add(1))
			const dirs, files = 3, 4
			mk := []vnfs.MkdirItem{{Path: top, Mode: 0o755}}
			var ios []vnfs.IO
			for d := 0; d < dirs; d++ {
				dp := fmt.Sprintf("%s/d%d", top, d)
				mk = append(mk, vnfs.MkdirItem{Path: dp, Mode: 0o755})
				for i := 0; i < files; i++ {
					ios = append(ios, vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/f%d", dp, i)), Data: []byte("x"), Flags: vnfs.Create})
				}
			}
			if _, err := vec.VMkdir(ctx, mk); err != nil {
				t.Fatal(err)
			}
			if _, err := vec.VWrite(ctx, ios); err != nil {
				t.Fatal(err)
			}
			before := rpcs(sc)
			if err := sc.VListDir(ctx, []string{top}, vnfs.ListOptions{Recursive: true}, nil); err != nil {
				t.Fatal(err)
			}
			// LOOKUP of top, READDIR of top and of each subdirectory.
			if got := rpcs(sc) - before; got != 1+1+dirs {
				t.Fatalf("ls -R: %d RPCs, want %d", got, 2+dirs)
			}
			before = rpcs(sc)
			if err := vnfs.RemoveRecursive(ctx, sc, top); err != nil {
				t.Fatal(err)
			}
			// stat of top; READDIR x (1 + dirs); per directory: REMOVE,
			// then LOOKUP + REMOVE for the other files; the
			// subdirectories likewise in top; top in its parent (which
			// this client did not change: no LOOKUP).
			want := 1 + (1 + dirs) + dirs*(1+2*(files-1)) + (1 + 2*(dirs-1)) + 1
			if got := rpcs(sc) - before; got != uint64(want) {
				t.Fatalf("rm -r: %d RPCs, want %d", got, want)
			}
		})
	}
}
