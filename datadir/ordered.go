package datadir

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/slice"
)

// DefaultLogBuffer is the default bound on the write-ahead-log bytes an
// orderedFS keeps in process memory (Options.LogBufferBytes).
const DefaultLogBuffer = 64 << 20

// orderedFS is the file system pebble (the metadata store) writes through.
// It keeps the engine's invariant — durable metadata never references slice
// bytes that are not durable, whenever the OS writes pages back — and lets
// NoSync commits cost no flush at all (see docs/engine.md, "Durability"):
//
//   - write-ahead-log bytes (files named *.log) stay in process memory,
//     not handed to the OS, until pebble syncs or closes the log, reads or
//     stats it, a non-log file is written, or more than limit bytes are
//     buffered. Then before runs (slice.Local.SyncAll: every slice put so
//     far becomes durable) and the buffered bytes are written, in order.
//     An OS that writes nothing back before fsync is a legal OS, so pebble
//     recovers from what this leaves on disk: a prefix of the log.
//   - before any byte of any other pebble file (sstable, manifest, options)
//     reaches the OS, every log buffer is written out (so no file gets
//     ahead of the log it was derived from) and before runs.
//
// So a NoSync commit's log record is a memory copy; one SyncAll and one log
// write happen per Sync (or synced commit), shared by every commit before
// it. A kill -9 loses the buffered NoSync commits — a suffix of the log,
// which NoSync allows — and never a synced one: Sync writes the buffer
// before it syncs the file.
//
// It relies on pebble doing all its file I/O through the vfs.FS it is
// given (it does: pebble does not mmap files for writing, and the writers
// it wraps around files — syncing, disk-health checking — write through
// them).
type orderedFS struct {
	vfs.FS
	before func() error
	// beforeSync, if set, replaces before when a log is synced: it may
	// leave running covered slice writes to the log's flush (see
	// orderedFile.syncLog), returning a wait for them.
	beforeSync func() (*slice.Deferred, error)
	limit      int // bytes buffered per log before it is written out; <= 0: no buffering

	mu   sync.Mutex
	logs map[*orderedFile]struct{} // open log files with buffers
}

func (o *orderedFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	wal := strings.HasSuffix(name, ".log")
	of := &orderedFile{File: f, fs: o, wal: wal, log: wal && o.limit > 0}
	if wal {
		// A new log is empty; a recycled one (ReuseForWrite) keeps its old
		// size and is overwritten from its start.
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		of.zeros.cond.L = &of.zeros.Mutex
		of.zeros.end = fi.Size()
		if of.zeros.end == 0 { // a new log: its zeros are written at once
			of.zeros.Lock()
			of.startZeros()
			of.zeros.Unlock()
		}
	}
	if of.log {
		o.mu.Lock()
		if o.logs == nil {
			o.logs = make(map[*orderedFile]struct{})
		}
		o.logs[of] = struct{}{}
		o.mu.Unlock()
	}
	return of, nil
}

func (o *orderedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := o.flushLogs(); err != nil {
		return nil, err
	}
	f, err := o.FS.Create(name, c)
	return o.wrap(name, f, err)
}

func (o *orderedFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := o.FS.OpenReadWrite(name, c, opts...)
	return o.wrap(name, f, err)
}

func (o *orderedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := o.FS.ReuseForWrite(oldname, newname, c)
	return o.wrap(newname, f, err)
}

// Rename, Link and Remove change which bytes a name refers to (pebble
// installs a new manifest or options file by renaming it over the current
// one): the logs are written out first, like before a non-log write.

func (o *orderedFS) Rename(oldname, newname string) error {
	if err := o.flushLogs(); err != nil {
		return err
	}
	return o.FS.Rename(oldname, newname)
}

func (o *orderedFS) Link(oldname, newname string) error {
	if err := o.flushLogs(); err != nil {
		return err
	}
	return o.FS.Link(oldname, newname)
}

// Open returns read-only files: nothing to order. (pebble opens its live
// log only for writing; a log it reads back is closed, hence written out.)

// flushLogs writes out every log buffer (running before first).
func (o *orderedFS) flushLogs() error {
	o.mu.Lock()
	logs := make([]*orderedFile, 0, len(o.logs))
	for f := range o.logs {
		logs = append(logs, f)
	}
	o.mu.Unlock()
	for _, f := range logs {
		f.mu.Lock()
		err := f.flushLocked()
		f.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (o *orderedFS) runBefore() error {
	if err := o.before(); err != nil {
		return fmt.Errorf("datadir: making slice data durable before a metadata write: %w", err)
	}
	return nil
}

type orderedFile struct {
	vfs.File
	fs  *orderedFS
	wal bool // a write-ahead log (*.log): kept written ahead of its end (writeLog)
	log bool // a write-ahead log whose writes are buffered (wal and a limit)

	pos   int64 // wal: where the next sequential write lands (guarded by mu)
	zeros struct {
		sync.Mutex
		cond      sync.Cond // on the Mutex: end or extending changed
		end       int64     // the file's size: [pos, end) holds zeros or a recycled log's old bytes
		extending bool      // an extendZeros is running
		failed    bool      // writing zeros failed: the log is appended to without them
	}

	mu       sync.Mutex // guards the buffer and err (flushLogs runs in other goroutines)
	chunks   [][]byte   // log bytes not yet handed to the OS, in order, each up to logChunk
	buffered int        // total length of chunks
	spare    [][]byte   // emptied chunks kept for reuse (at most keepChunks)
	err      error      // a failed flush: the file refuses further writes
}

// The log buffer is a list of fixed-size chunks, not one growing slice: no
// copying on growth, and a few chunks are reused from burst to burst.
const (
	logChunk   = 1 << 20
	keepChunks = 4
)

// appendLocked copies p to the end of the buffer.
func (f *orderedFile) appendLocked(p []byte) {
	f.buffered += len(p)
	for len(p) > 0 {
		if n := len(f.chunks); n == 0 || len(f.chunks[n-1]) == cap(f.chunks[n-1]) {
			var c []byte
			if k := len(f.spare); k > 0 {
				c, f.spare = f.spare[k-1][:0], f.spare[:k-1]
			} else {
				c = make([]byte, 0, logChunk)
			}
			f.chunks = append(f.chunks, c)
		}
		last := &f.chunks[len(f.chunks)-1]
		n := min(len(p), cap(*last)-len(*last))
		*last = append(*last, p[:n]...)
		p = p[n:]
	}
}

// flushLocked hands the buffered log bytes to the OS, after before.
func (f *orderedFile) flushLocked() error {
	if f.err != nil {
		return f.err
	}
	if f.buffered == 0 {
		return nil
	}
	if err := f.fs.runBefore(); err != nil {
		f.err = err
		return err
	}
	return f.writeBufferLocked()
}

// writeBufferLocked writes the buffered log bytes out, in order.
func (f *orderedFile) writeBufferLocked() error {
	for i, c := range f.chunks {
		if err := f.writeLog(c); err != nil {
			f.err = fmt.Errorf("datadir: writing buffered log bytes: %w", err)
			return f.err
		}
		f.chunks[i] = nil
		if len(f.spare) < keepChunks {
			f.spare = append(f.spare, c[:0])
		}
	}
	f.chunks, f.buffered = f.chunks[:0], 0
	return nil
}

// walAhead is how far past a log's write position its file is kept
// written (zeros), so that the log's syncs overwrite written blocks of a
// file whose size does not change: on ext4 (and XFS) such an fdatasync is
// a device cache flush, while one that grows the file — or writes blocks
// that pebble's fallocate left unwritten — also commits the file system's
// journal: measured on this machine 0.11–0.14 ms against 0.23–0.31 ms per
// 4 KiB write + fdatasync (docs/engine.md "Durability"). Pebble recycles
// old logs, which are written already; this covers the new ones.
//
// The zeros are written in the background, one walZeroChunk at a time,
// each written back (sync_file_range) before it is published, starting
// when a new log is created and whenever the log comes within walAhead/2
// of their end: a log sync then never waits for more than one chunk's
// writeback, and the size changes once per chunk. A log write that
// reaches past the published zeros waits for the chunk in progress, or,
// with no extension running, writes one chunk past itself first.
const walAhead = 4 << 20

const walZeroChunk = 1 << 20

// walZeroWrite is the size of each write of the zeros: one page. Linux
// (6.16+ on ext4; XFS earlier) caches a file's pages in folios sized by
// the writes that created them, and each later small write into a folio
// walks the buffer heads of the whole folio (ext4_block_write_begin). A
// log record of a few hundred bytes written into the 1 MiB folio of one
// 1 MiB write of zeros cost 12–15 µs of CPU per write() here, against
// 5 µs into page-sized folios (docs/nfs-server.md "Session 11"); the log
// write is on every durable commit's critical path.
const walZeroWrite = 4 << 10

var walZeros [walZeroWrite]byte

// writeLog writes p at the log's write position (f.mu held), after the
// zeros ahead of it if p would reach past them. The zeros are an ordinary
// log tail to pebble (it preallocates, and recycles logs, so its reader
// takes a zeroed or stale chunk for the end of the log). They are only
// an optimization: once writing them fails (a full disk), this log is
// appended to as it would be without them.
func (f *orderedFile) writeLog(p []byte) error {
	end := f.pos + int64(len(p))
	z := &f.zeros
	z.Lock()
	for end > z.end && z.extending {
		z.cond.Wait()
	}
	if end > z.end && !z.failed { // no extension running
		z.extending = true
		from := z.end
		z.Unlock()
		f.extendZeros(from, end+walZeroChunk, false)
		z.Lock()
	}
	if !z.extending && !z.failed && z.end-end < walAhead/2 {
		f.startZeros()
	}
	z.end = max(z.end, end) // past the zeros only once they failed: no extension runs
	z.Unlock()
	n, err := f.File.Write(p)
	f.pos += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return err
}

// startZeros starts a background extension of the zeros by walAhead
// (f.zeros locked, no extension running).
func (f *orderedFile) startZeros() {
	f.zeros.extending = true
	from := f.zeros.end
	go f.extendZeros(from, from+walAhead, true)
}

// extendZeros writes zeros from from (the file's size) up to to rounded
// up to whole walZeroChunks, one chunk at a time, publishing each in
// f.zeros.end, then ends the extension (f.zeros.extending, set by the
// caller); a failure sets f.zeros.failed. Nothing else writes at or past
// from meanwhile: writeLog waits for published zeros before it writes
// past them. In the background each chunk is written back before it is
// published.
func (f *orderedFile) extendZeros(from, to int64, background bool) {
	to = (to + walZeroChunk - 1) / walZeroChunk * walZeroChunk
	var err error
	for off := from; off < to; off += walZeroChunk {
		for p := off; p < off+walZeroChunk && err == nil; p += walZeroWrite {
			_, err = f.File.WriteAt(walZeros[:], p)
		}
		if err != nil {
			break
		}
		if background {
			writeBack(f.File, off, walZeroChunk)
		}
		f.zeros.Lock()
		f.zeros.end = off + walZeroChunk
		f.zeros.cond.Broadcast()
		f.zeros.Unlock()
	}
	f.zeros.Lock()
	f.zeros.extending = false
	f.zeros.failed = err != nil
	f.zeros.cond.Broadcast()
	f.zeros.Unlock()
}

// waitZeros waits for a background extension of the zeros (before the
// file is closed).
func (f *orderedFile) waitZeros() {
	f.zeros.Lock()
	for f.zeros.extending {
		f.zeros.cond.Wait()
	}
	f.zeros.Unlock()
}

func (f *orderedFile) flush() error {
	if !f.log {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked()
}

func (f *orderedFile) Write(p []byte) (int, error) {
	if f.log {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.err != nil {
			return 0, f.err
		}
		f.appendLocked(p)
		if f.buffered >= f.fs.limit {
			if err := f.flushLocked(); err != nil {
				return 0, err
			}
		}
		return len(p), nil
	}
	if err := f.fs.flushLogs(); err != nil {
		return 0, err
	}
	if err := f.fs.runBefore(); err != nil {
		return 0, err
	}
	if f.wal { // an unbuffered log (no limit)
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.writeLog(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return f.File.Write(p)
}

func (f *orderedFile) WriteAt(p []byte, off int64) (int, error) {
	if f.log {
		if err := f.flush(); err != nil {
			return 0, err
		}
	} else if err := f.fs.flushLogs(); err != nil {
		return 0, err
	}
	if err := f.fs.runBefore(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *orderedFile) Sync() error {
	return f.syncLog(f.File.Sync)
}

func (f *orderedFile) SyncData() error {
	return f.syncLog(f.File.SyncData)
}

func (f *orderedFile) SyncTo(length int64) (fullSync bool, err error) {
	err = f.syncLog(func() error {
		fullSync, err = f.File.SyncTo(length)
		return err
	})
	return fullSync, err
}

// syncLog writes out the buffer and runs sync (an fsync of the file).
// For a buffered log with beforeSync set, the covered slice writes still
// running (slice.Local.SyncAllDeferred; their commits were pledged,
// slice.Local.Pledge) do not hold up the log write: the log bytes are
// written, and their writeback started, while those writes run; sync —
// the device flush that acknowledges the log's commits — starts once
// they returned, so it follows the completion of every covered write of
// every commit in the log. Until then the log's record of such a commit
// may reach the disk without its slice bytes; such a commit is not
// acknowledged, and recovery cuts it if a power cut left its bytes
// missing (docs/engine.md "Covered puts"). Without running writes this is
// the ordinary order: slices, log, sync.
func (f *orderedFile) syncLog(sync func() error) error {
	if !f.log || f.fs.beforeSync == nil {
		if err := f.flush(); err != nil {
			return err
		}
		return sync()
	}
	f.mu.Lock()
	var running *slice.Deferred
	err := f.err
	if err == nil && f.buffered > 0 {
		running, err = f.fs.beforeSync()
		if err != nil {
			err = fmt.Errorf("datadir: making slice data durable before a metadata write: %w", err)
			f.err = err
		} else {
			from := f.pos
			err = f.writeBufferLocked()
			if err == nil && running != nil && !running.Done() {
				// The log's pages go to the device while the slice
				// writes run; the sync then only waits for them.
				startWriteBack(f.File, from, f.pos-from)
			}
		}
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if running != nil {
		if err := running.Wait(context.Background()); err != nil {
			err = fmt.Errorf("datadir: slice writes named by the log failed: %w", err)
			f.mu.Lock()
			if f.err == nil {
				f.err = err
			}
			f.mu.Unlock()
			return err
		}
	}
	return sync()
}

func (f *orderedFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *orderedFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *orderedFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

// Close writes out the buffer (a log is closed after pebble synced it, or
// at shutdown) and closes the file.
func (f *orderedFile) Close() error {
	err := f.flush()
	f.waitZeros()
	if f.log {
		f.fs.mu.Lock()
		delete(f.fs.logs, f)
		f.fs.mu.Unlock()
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}
