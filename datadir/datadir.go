// Package datadir opens a txnfs data directory: the embedded default
// deployment of the engine, with metadata in pebble (DIR/meta) and slices in
// local backing files (DIR/slices), cached in memory.
//
// All disk access goes through one pebble vfs.FS, so tests can inject
// faults or simulate crashes for metadata and data alike.
package datadir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/pebblekv"
	"github.com/txnfs/txnfs/slice"
)

// DefaultCacheBytes is the default size of the slice memory tier.
const DefaultCacheBytes = 256 << 20

// Options configures Open.
type Options struct {
	// Dir is the data directory (created if missing). Required.
	Dir string
	// FS is the disk seam; nil means the real disk (vfs.Default).
	FS vfs.FS
	// NoSync skips metadata fsyncs (tests only: commits are not durable).
	NoSync bool
	// CacheBytes sizes the slice memory tier: 0 means DefaultCacheBytes,
	// negative disables it.
	CacheBytes int64
	// InlineMax overrides fs.Config.InlineMax when non-zero.
	InlineMax int
	// SliceReuseMin overrides slice.LocalOptions.ReuseMin when non-zero
	// (tests make every put reuse freed space with 1).
	SliceReuseMin int
	// SliceReuseMax overrides slice.LocalOptions.ReuseMax when non-zero:
	// negative keeps no freed space for reuse, so the collector gives it
	// all back to the OS (`txnfs gc`: the pool dies with the process).
	SliceReuseMax int64
	// SliceUnstaged sets slice.LocalOptions.Unstaged: aligned large puts
	// are written from the caller's buffer, synchronously (for callers
	// that wait for their writes anyway: txnfs serve).
	SliceUnstaged bool
	// LogBufferBytes bounds the metadata write-ahead-log bytes kept in
	// process memory until a Sync (or synced commit) writes them out,
	// after making the slices durable: 0 means DefaultLogBuffer, negative
	// hands every log write to the OS at once (each one preceded by a
	// slice flush). See orderedFS.
	LogBufferBytes int
	// Reserve is the free space of the data directory's file system that
	// writes, creates, links and xattrs may not use (fs.Config.Reserve):
	// room for the metadata store, so that a full file system gives
	// ENOSPC to writers instead of stopping the metadata store, and can
	// be emptied by removing files. 0 means DefaultReserve of the file
	// system's size; negative: no reserve. Only with the real disk (FS
	// nil).
	Reserve int64
	// MemTableBytes sets pebblekv.Options.MemTableBytes: 0 chooses it
	// from the file system's size (DefaultMemTable; Pebble's default when
	// the size is unknown, i.e. with FS set), negative means Pebble's
	// default (4 MiB).
	MemTableBytes int64
	// Covered sets slice.LocalOptions.Covered: a durable commit whose
	// slices were all written with O_DIRECT into reused space issues one
	// device flush (the metadata log's), not two; the commit records
	// those slices and Open checks them (docs/engine.md "Covered puts").
	// Only with the real disk (FS nil) and the slices and the metadata on
	// one device; otherwise ignored (logged).
	Covered bool
	Logger  *slog.Logger

	// directVFS (tests): slice.LocalOptions.DirectVFS, and Covered on FS.
	directVFS bool
}

// BigMemTable is the memtable size DefaultMemTable picks on a large file
// system, and BigMemTableMinTotal the file system size from which it does.
//
// A 32 MiB memtable keeps a tree created and removed within seconds
// (untar, rm -r) out of sstables and compactions: 20% less process CPU for
// the vectorized rm -r (docs/vnfs.md "Trees, sessions 7 and 8"). It costs
// disk: Pebble preallocates each WAL file to 1.1x the memtable and
// recycles one, ~70 MiB, which a small file system cannot spare (the
// 64 MiB tmpfs of TestNoSpace). From 8 GiB, DefaultReserve (160 MiB and
// up, the room kept for the metadata store) holds two such WALs with
// room left.
const (
	BigMemTable         = 32 << 20
	BigMemTableMinTotal = 8 << 30
)

// DefaultMemTable is the memtable size for a file system of total bytes:
// BigMemTable from BigMemTableMinTotal, else 0 (Pebble's default).
func DefaultMemTable(total uint64) int64 {
	if total >= BigMemTableMinTotal {
		return BigMemTable
	}
	return 0
}

// DefaultReserve is the reserve for a file system of total bytes: 2%,
// between 64 MiB and 4 GiB, and at most a quarter of a small file system.
func DefaultReserve(total uint64) uint64 {
	return min(max(total/50, 64<<20), 4<<30, total/4)
}

// minOpenFree is the free space Open requires before it opens the
// metadata store, whose recovery writes tables: on a full file system
// pebble retries a failed flush forever, and Open would never return.
const minOpenFree = 8 << 20

// Engine is an open data directory.
type Engine struct {
	FS     *fs.FS
	KV     kv.Store
	Slices slice.Store
	local  *slice.Local

	memTable int64 // the pebblekv.Options.MemTableBytes used (tests)
}

// Open opens (creating if needed) the data directory.
func Open(ctx context.Context, o Options) (*Engine, error) {
	if o.Dir == "" {
		return nil, errors.New("datadir: Options.Dir is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	disk := o.FS
	if disk == nil {
		disk = vfs.Default
	}
	for _, d := range []string{o.Dir, filepath.Join(o.Dir, "meta"), filepath.Join(o.Dir, "slices")} {
		if err := mkdirSynced(disk, d); err != nil {
			return nil, fmt.Errorf("datadir: %w", err)
		}
	}
	var capacity func() (uint64, uint64, error)
	if o.FS == nil {
		dir := o.Dir
		capacity = func() (uint64, uint64, error) {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return 0, 0, err
			}
			return uint64(st.Blocks) * uint64(st.Bsize), uint64(st.Bavail) * uint64(st.Bsize), nil
		}
		if _, free, err := capacity(); err == nil && free < minOpenFree {
			return nil, fmt.Errorf("datadir: %s: the file system is full (%d bytes free; opening needs %d): free some space first",
				o.Dir, free, minOpenFree)
		}
	}
	covered := o.Covered
	if covered && !o.directVFS {
		if err := sameDevice(o.FS, filepath.Join(o.Dir, "slices"), filepath.Join(o.Dir, "meta")); err != nil {
			o.Logger.Warn("covered puts off", "err", err)
			covered = false
		}
	}
	local, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: disk, Dir: filepath.Join(o.Dir, "slices"),
		ReuseMin: o.SliceReuseMin, ReuseMax: o.SliceReuseMax, Unstaged: o.SliceUnstaged, Covered: covered, DirectVFS: o.directVFS,
		Logger: o.Logger.With("component", "slices")})
	if err != nil {
		return nil, fmt.Errorf("datadir: opening slices: %w", err)
	}
	// With the slice directory locked, before anything opens the metadata
	// store for writing (which would flush the replayed log into
	// sstables): cut commits whose covered slices are not on disk.
	if err := recoverCovered(disk, o.Dir, o.Logger.With("component", "recovery")); err != nil {
		local.Close()
		return nil, fmt.Errorf("datadir: %w", err)
	}
	// Metadata bytes reach the OS only after the slice bytes put before
	// them are durable (orderedFS), so fs NoSync commits flush no slices;
	// log bytes wait in memory for the next Sync.
	limit := o.LogBufferBytes
	if limit == 0 {
		limit = DefaultLogBuffer
	}
	metaFS := &orderedFS{FS: disk, limit: limit, before: func() error { return local.SyncAll(context.Background()) },
		beforeSync: func() (*slice.Deferred, error) { return local.SyncAllDeferred(context.Background()) }}
	memTable := o.MemTableBytes
	if memTable < 0 {
		memTable = 0
	} else if memTable == 0 && capacity != nil {
		if total, _, err := capacity(); err == nil {
			memTable = DefaultMemTable(total)
		}
	}
	store, err := pebblekv.Open(pebblekv.Options{Dir: filepath.Join(o.Dir, "meta"), FS: metaFS, NoSync: o.NoSync,
		MemTableBytes: memTable, Logger: o.Logger.With("component", "pebble")})
	if err != nil {
		local.Close()
		return nil, fmt.Errorf("datadir: opening metadata: %w", err)
	}
	var slices slice.Store = local
	cache := o.CacheBytes
	if cache == 0 {
		cache = DefaultCacheBytes
	}
	if cache > 0 {
		slices = slice.NewCache(local, cache)
	}
	cfg := fs.Config{KV: store, Slices: slices, Logger: o.Logger, InlineMax: o.InlineMax, SlicesOrdered: true, Capacity: capacity}
	if capacity != nil && o.Reserve >= 0 {
		cfg.Reserve = uint64(o.Reserve)
		if o.Reserve == 0 {
			if total, _, err := capacity(); err == nil {
				cfg.Reserve = DefaultReserve(total)
			}
		}
	}
	f, err := fs.Open(ctx, cfg)
	if err != nil {
		store.Close()
		local.Close()
		return nil, fmt.Errorf("datadir: %w", err)
	}
	return &Engine{FS: f, KV: store, Slices: slices, local: local, memTable: memTable}, nil
}

// sameDevice returns nil if the directories a and b are on one device of
// the real disk (fs nil), where one device flush covers both.
func sameDevice(fs vfs.FS, a, b string) error {
	if fs != nil {
		return errors.New("not the real disk")
	}
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return err
	}
	if sa.Dev != sb.Dev {
		return fmt.Errorf("%s and %s are on different devices", a, b)
	}
	return nil
}

// mkdirSynced creates dir and any missing parents, syncing the parent of
// every directory it creates so that the new entries survive a crash.
func mkdirSynced(disk vfs.FS, dir string) error {
	dir = filepath.Clean(dir)
	if _, err := disk.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirSynced(disk, parent); err != nil {
			return err
		}
	}
	if err := disk.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d, err := disk.OpenDir(parent)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// Close closes the engine and its stores (the metadata store first: its
// last log writes make slice data durable through the slice store).
func (e *Engine) Close() error {
	return errors.Join(e.FS.Close(), e.KV.Close(), e.local.Close())
}
