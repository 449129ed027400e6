package datadir

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// orderedFS is the file system pebble (the metadata store) writes through:
// before any byte of any pebble file (write-ahead log, sstable, manifest)
// is handed to the OS, it runs before, which makes every slice put so far
// durable (slice.Local.SyncAll). So no metadata can reach the disk ahead of
// the slice bytes it references, whenever the OS writes pages back — the
// engine's invariant — and a NoSync commit needs no slice flush of its own:
// the flush happens once per log write, in pebble's log flusher, shared by
// every commit in that write (see docs/engine.md, "Durability").
//
// It relies on pebble doing all its file I/O through the vfs.FS it is
// given (it does: pebble does not mmap files for writing, and the writers
// it wraps around files — syncing, disk-health checking — write through
// them).
type orderedFS struct {
	vfs.FS
	before func() error
}

func (o *orderedFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &orderedFile{File: f, before: o.before}, nil
}

func (o *orderedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return o.wrap(o.FS.Create(name, c))
}

func (o *orderedFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return o.wrap(o.FS.OpenReadWrite(name, c, opts...))
}

func (o *orderedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return o.wrap(o.FS.ReuseForWrite(oldname, newname, c))
}

// Open returns read-only files: nothing to order.

type orderedFile struct {
	vfs.File
	before func() error
}

func (f *orderedFile) Write(p []byte) (int, error) {
	if err := f.before(); err != nil {
		return 0, fmt.Errorf("datadir: making slice data durable before a metadata write: %w", err)
	}
	return f.File.Write(p)
}

func (f *orderedFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.before(); err != nil {
		return 0, fmt.Errorf("datadir: making slice data durable before a metadata write: %w", err)
	}
	return f.File.WriteAt(p, off)
}
