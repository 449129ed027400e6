package pebblekv_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/kvtest"
	"github.com/txnfs/txnfs/kv/pebblekv"
)

func open(t *testing.T, opts pebblekv.Options) kv.Store {
	t.Helper()
	s, err := pebblekv.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		// Sync on: MemFS syncs are free, and this runs the
		// ApplyNoSyncWait + SyncWait path.
		return open(t, pebblekv.Options{Dir: "db", FS: vfs.NewMem()})
	})
}

func TestConformanceNoSync(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	kvtest.Run(t, func(t *testing.T) kv.Store {
		return open(t, pebblekv.Options{Dir: "db", FS: vfs.NewMem(), NoSync: true})
	})
}

func TestDurabilityDisk(t *testing.T) {
	kvtest.RunDurability(t, func(t *testing.T) (kv.Store, func() kv.Store) {
		dir := t.TempDir()
		var cur kv.Store
		openDisk := func() kv.Store {
			s, err := pebblekv.Open(pebblekv.Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			cur = s
			return s
		}
		t.Cleanup(func() { _ = cur.Close() })
		return openDisk(), func() kv.Store {
			if err := cur.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return openDisk()
		}
	})
}

// TestDurabilityCrash reopens after a simulated power loss: the crash clone
// keeps only what was fsynced.
func TestDurabilityCrash(t *testing.T) {
	kvtest.RunDurability(t, func(t *testing.T) (kv.Store, func() kv.Store) {
		fs := vfs.NewCrashableMem()
		var cur kv.Store
		openFS := func(fs vfs.FS) kv.Store {
			s, err := pebblekv.Open(pebblekv.Options{Dir: "db", FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			cur = s
			return s
		}
		t.Cleanup(func() { _ = cur.Close() })
		return openFS(fs), func() kv.Store {
			crashed := fs.CrashClone(vfs.CrashCloneCfg{})
			_ = cur.Close() // its writes after the clone do not reach crashed
			fs = crashed
			return openFS(crashed)
		}
	})
}
