package slice_test

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/slice"
)

// A local store with a memory tier: put, make durable, read a sub-range.
func Example() {
	ctx := context.Background()
	l, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.NewMem(), Dir: "/srv/slices"})
	if err != nil {
		panic(err)
	}
	store := slice.NewCache(l, 64<<20)
	defer store.Close()

	const region = 7 // hint: slices of one file region share a backing file
	p, err := store.Put(ctx, region, []byte("hello, immutable world"))
	if err != nil {
		panic(err)
	}
	// Durable before any metadata that references p commits.
	if err := store.Sync(ctx, []slice.Pointer{p}); err != nil {
		panic(err)
	}
	buf := make([]byte, 9)
	if err := store.ReadAt(ctx, p, 7, buf); err != nil {
		panic(err)
	}
	fmt.Printf("%v\n%q\n", p, buf)
	// Output:
	// b4@0+22/crc=69ab45a3
	// "immutable"
}
