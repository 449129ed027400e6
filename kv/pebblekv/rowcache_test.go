package pebblekv_test

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/kvtest"
	"github.com/txnfs/txnfs/kv/pebblekv"
)

// TestRowCacheHistory checks reads against a model of the committed
// history with interleaved transactions (kvtest.History), with the row
// cache off, tiny (every fill and update evicts: the entries a commit
// replaced are often gone, so a stale fill would be served) and large.
func TestRowCacheHistory(t *testing.T) {
	for _, size := range []int{-1, 200, 1 << 10, pebblekv.DefaultRowCacheBytes} {
		t.Run(fmt.Sprintf("bytes=%d", size), func(t *testing.T) {
			s := open(t, pebblekv.Options{Dir: "db", FS: vfs.NewMem(), NoSync: true, RowCacheBytes: size})
			kvtest.History(t, s, 20000)
		})
	}
}

// TestConformanceTinyRowCache runs the conformance suite with a row cache
// that holds a few entries.
func TestConformanceTinyRowCache(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	kvtest.Run(t, func(t *testing.T) kv.Store {
		return open(t, pebblekv.Options{Dir: "db", FS: vfs.NewMem(), NoSync: true, RowCacheBytes: 300})
	})
}
