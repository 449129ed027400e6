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
