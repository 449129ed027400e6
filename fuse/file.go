package fuse

import (
	"fmt"
	"os"
	"syscall"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/slice"
)

// fmodeExec is __FMODE_EXEC: the kernel sets it in the open flags of
// execve, so that the execute permission can be checked at open.
const fmodeExec = 0x20

// openAccess returns the access bits that open flags need.
func openAccess(flags uint32) uint32 {
	var need uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		need = fs.AccessRead
	case syscall.O_WRONLY:
		need = fs.AccessWrite
	default:
		need = fs.AccessRead | fs.AccessWrite
	}
	if flags&syscall.O_TRUNC != 0 {
		need |= fs.AccessWrite
	}
	if flags&fmodeExec != 0 {
		need |= fs.AccessExecute
	}
	return need
}

// openChecks checks permission to open ino with flags and applies O_TRUNC,
// inside the request's transaction. It returns the attributes after open.
func (m *Server) openChecks(t *fs.Txn, ino fs.Ino, flags uint32) (fs.Attr, error) {
	need := openAccess(flags)
	got, err := t.Access(m.ctx, ino, need)
	if err != nil {
		return fs.Attr{}, err
	}
	if got != need {
		return fs.Attr{}, fs.ErrAccess
	}
	if flags&syscall.O_TRUNC != 0 {
		zero := uint64(0)
		// Linux updates mtime and ctime on O_TRUNC even if the file
		// was already empty.
		return t.SetAttr(m.ctx, ino, fs.SetAttr{Size: &zero, Mtime: &fs.SetTime{Now: true}, OpenForWrite: true})
	}
	return t.GetAttr(m.ctx, ino)
}

// appendFlags returns the open flags for a file opened with flags: with
// O_APPEND, direct I/O. Through the page cache the kernel may split one
// write(2) into several WRITE requests at page boundaries, and each would
// be appended on its own, letting another mount's append land in between;
// with direct I/O a write of up to MaxWrite bytes is one request, appended
// atomically.
//
// With the writeback cache the kernel's size is the truth (it includes
// dirty pages not yet written back) and it serializes appends itself, so
// appends are plain writes at the kernel's offset.
func (m *Server) appendFlags(flags uint32) uint32 {
	if flags&syscall.O_APPEND != 0 && !m.cfg.Writeback {
		return raw.FOPEN_DIRECT_IO
	}
	return 0
}

// How an open was answered (mirrorSet).
const (
	notPassthrough = iota
	ptReader       // FOPEN_PASSTHROUGH, read-only
	ptWriter       // FOPEN_PASSTHROUGH, writable (or O_TRUNC)
)

func (m *Server) newHandle(ino fs.Ino, flags uint32, passthrough int) uint64 {
	return m.handles.add(&handle{
		ino:         ino,
		passthrough: passthrough,
		write:       flags&syscall.O_ACCMODE != syscall.O_RDONLY,
		append:      flags&syscall.O_APPEND != 0 && !m.cfg.Writeback,
		sync:        flags&(syscall.O_SYNC|oDSync) != 0,
	})
}

// written records a write through handle fh and, for an O_SYNC or O_DSYNC
// handle, makes it durable before the write is answered.
func (m *Server) written(fh uint64) error {
	h := m.handles.get(fh)
	if h == nil {
		return nil
	}
	if h.sync {
		return m.syncEngine()
	}
	h.dirty.Store(true)
	return nil
}

// Open implements RawFileSystem. (The inode is pinned since its lookup,
// so it outlives its last link while open.)
func (m *Server) Open(_ <-chan struct{}, in *raw.OpenIn, out *raw.OpenOut) raw.Status {
	ino := fs.Ino(in.NodeId)
	if m.nodes.isRetired(ino) {
		return raw.EIO
	}
	writer := openAccess(in.Flags)&fs.AccessWrite != 0
	if writer {
		if err := m.mirrors.reconcile(ino); err != nil {
			return m.status("open", err)
		}
	}
	var a fs.Attr
	var err error
	if in.Flags&syscall.O_TRUNC != 0 {
		err = m.update(m.cred(&in.InHeader), &invalidation{inos: []fs.Ino{ino}}, func(t *fs.Txn) (err error) {
			a, err = m.openChecks(t, ino, in.Flags)
			return err
		})
	} else {
		err = m.view(m.cred(&in.InHeader), func(t *fs.Txn) (err error) {
			a, err = m.openChecks(t, ino, in.Flags)
			return err
		})
	}
	if err == nil && a.Type == fs.TypeDirectory && in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		err = fs.ErrIsDir
	}
	if err == nil && a.Nlink == 0 && m.cfg.Group != nil && !m.nodes.wasRemovedHere(ino) {
		// The kernel opens a removed file by a name: the file was
		// removed or replaced through another mount and the name is
		// stale. ESTALE makes the kernel look the name up again, so
		// that close-to-open holds across mounts. (Removals through
		// this mount keep local semantics: a racing open may still
		// get the old file, as on a local file system.)
		err = fs.ErrNotExist
	}
	if err != nil {
		return m.nodeStatus("open", err)
	}
	if writer && a.Type == fs.TypeRegular {
		backing, err := m.mirrors.openWriter(ino, a.Change)
		if err != nil {
			return m.status("open", err)
		}
		if backing != 0 {
			// Passthrough readers have the file open: the kernel takes
			// only a passthrough open now, so this writer writes the
			// mirror, which the mount writes to the engine at FLUSH,
			// fsync and before answering about the file (reconcile).
			m.passthroughOpen(out, ino, in.Flags, ptWriter, backing, a.Change)
			return raw.OK
		}
	} else if writer {
		m.mirrors.openedWriter(ino)
	} else {
		eligible := a.Type == fs.TypeRegular && in.Flags&(fmodeExec|oDirect) == 0 && !m.inSandbox()
		backing, err := m.mirrors.openReader(ino, a.Change, eligible)
		if err != nil {
			return m.status("open", err)
		}
		if backing != 0 {
			m.passthroughOpen(out, ino, in.Flags, ptReader, backing, a.Change)
			return raw.OK
		}
	}
	out.Fh = m.newHandle(ino, in.Flags, notPassthrough)
	// Close-to-open: the kernel keeps its caches only if the file has
	// not changed since it last saw its attributes. Otherwise its pages
	// are dropped (no KEEP_CACHE) and its attributes, the size above all,
	// are invalidated before open returns. (Attribute-only invalidation
	// takes no inode lock, so it is safe from a request handler.)
	if m.nodes.opened(ino, a.Change) {
		out.OpenFlags |= raw.FOPEN_KEEP_CACHE
	} else {
		m.srv.InodeNotify(uint64(ino), -1, 0)
	}
	out.OpenFlags |= m.appendFlags(in.Flags)
	return raw.OK
}

// passthroughOpen answers an open of ino (at change) FOPEN_PASSTHROUGH
// with the mirror's backing id (see mirrorSet). Its reads and writes go
// to the mirror, not the FUSE page cache: the pages are left as they are
// (the next cached open checks them, nodeTable.opened), and the
// attributes are refreshed if the file changed since the kernel saw them.
// No KEEP_CACHE: the kernel refuses it with passthrough.
func (m *Server) passthroughOpen(out *raw.OpenOut, ino fs.Ino, flags uint32, kind int, backing int32, change uint64) {
	out.Fh = m.newHandle(ino, flags, kind)
	out.BackingID = backing
	out.OpenFlags = raw.FOPEN_PASSTHROUGH
	if !m.nodes.current(ino, change) {
		m.srv.InodeNotify(uint64(ino), -1, 0)
	}
}

// Create implements RawFileSystem (open with O_CREAT of a missing name).
func (m *Server) Create(_ <-chan struct{}, in *raw.CreateIn, name string, out *raw.CreateOut) raw.Status {
	dir := fs.Ino(in.NodeId)
	req := fs.CreateRequest{Type: fs.TypeRegular, Mode: in.Mode & fs.ModePerm, Exclusive: in.Flags&syscall.O_EXCL != 0}
	var a fs.Attr
	var created bool
	inv := &invalidation{}
	inv.entry(dir, name)
	inv.ino(dir)
	err := m.update(m.cred(&in.InHeader), inv, func(t *fs.Txn) error {
		var err error
		a, created, err = t.Create(m.ctx, dir, name, req)
		if err != nil || created {
			return err
		}
		// The name appeared since the kernel's lookup: open it.
		a, err = m.openChecks(t, a.Ino, in.Flags)
		return err
	})
	if err != nil {
		return m.status("create", err)
	}
	if created {
		m.mirrors.create(a.Ino, a.Change)
		m.mirrors.openedWriter(a.Ino)
	} else {
		// The name appeared since the lookup: an open of the file.
		if in.Flags&syscall.O_TRUNC != 0 {
			m.mirrors.create(a.Ino, a.Change) // emptied
		}
		backing, err := m.mirrors.openWriter(a.Ino, a.Change)
		if err != nil {
			return m.status("create", err)
		}
		if backing != 0 { // passthrough readers have it open (see Open)
			m.entry(&out.EntryOut, &a)
			m.passthroughOpen(&out.OpenOut, a.Ino, in.Flags, ptWriter, backing, a.Change)
			return raw.OK
		}
	}
	m.entry(&out.EntryOut, &a)
	out.Fh = m.newHandle(a.Ino, in.Flags, notPassthrough)
	m.nodes.opened(a.Ino, a.Change)
	out.OpenFlags |= m.appendFlags(in.Flags)
	return raw.OK
}

// Tmpfile implements RawFileSystem: open(O_TMPFILE), a regular file with
// no name (fs.Txn.CreateOrphan). linkat (AT_EMPTY_PATH, or
// /proc/self/fd/N with AT_SYMLINK_FOLLOW) may give it a name through Link;
// the kernel refuses that itself for O_TMPFILE|O_EXCL. A file never named
// is deleted at the kernel's FORGET after the last close, like any
// unlinked open file, and an engine crash leaves nothing (it is an orphan
// from the start). The parent directory is not changed. Inside a sandbox
// O_TMPFILE is EOPNOTSUPP: the engine pins the file only when the
// transaction commits, and the sandbox's commits much later.
func (m *Server) Tmpfile(_ <-chan struct{}, in *raw.CreateIn, out *raw.CreateOut) raw.Status {
	dir := fs.Ino(in.NodeId)
	var a fs.Attr
	err := m.update(m.cred(&in.InHeader), nil, func(t *fs.Txn) (err error) {
		if m.sb.txn == t { // update holds the sandbox gate
			return fmt.Errorf("%w: O_TMPFILE inside a sandbox", fs.ErrNotSupported)
		}
		a, err = t.CreateOrphan(m.ctx, dir, in.Mode&fs.ModePerm)
		return err
	})
	if err != nil {
		return m.status("tmpfile", err)
	}
	// The kernel now holds a reference (entry pins it, as any lookup);
	// the engine's own pin for the caller is not needed beyond that.
	m.entry(&out.EntryOut, &a)
	if err := m.eng.Unpin(m.ctx, a.Ino); err != nil {
		m.log.Error("unpin of a new O_TMPFILE file failed", "ino", a.Ino, "err", err)
	}
	m.mirrors.openedWriter(a.Ino)
	out.Fh = m.newHandle(a.Ino, in.Flags, notPassthrough)
	m.nodes.opened(a.Ino, a.Change)
	out.OpenFlags |= m.appendFlags(in.Flags)
	return raw.OK
}

// Release implements RawFileSystem: the last close of a file. A
// write-behind failure not reported by then (writes through a mapping
// after close) is logged.
func (m *Server) Release(_ <-chan struct{}, in *raw.ReleaseIn) {
	h := m.handles.remove(in.Fh)
	if h != nil {
		m.mirrors.closed(h.ino, h.passthrough != notPassthrough, h.passthrough == ptWriter)
	}
	if h != nil && m.wbOn && h.write {
		m.waitWrites()
		if err := h.takeErr(); err != nil {
			m.log.Error("write failed after the file was closed; nobody was told", "ino", h.ino, "err", err)
		}
	}
}

// Read implements RawFileSystem. Permission was checked at open.
func (m *Server) Read(_ <-chan struct{}, in *raw.ReadIn, buf []byte) (raw.ReadResult, raw.Status) {
	m.readRequests.Add(1)
	if m.nodes.isRetired(fs.Ino(in.NodeId)) {
		return nil, raw.EIO
	}
	buf = buf[:min(len(buf), int(in.Size))]
	var n int
	err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) (err error) {
		n, _, err = t.Read(m.ctx, fs.Ino(in.NodeId), in.Offset, buf)
		return err
	})
	if err != nil {
		return nil, m.status("read", err)
	}
	return raw.ReadResultData(buf[:n]), raw.OK
}

// Write implements RawFileSystem. Permission was checked at open. A file
// opened with O_APPEND is appended to atomically at the engine's end of
// file, whatever offset the kernel computed from its cached size (another
// mount may have appended meanwhile).
func (m *Server) Write(cancel <-chan struct{}, in *raw.WriteIn, data []byte) (uint32, raw.Status) {
	ino := fs.Ino(in.NodeId)
	if m.nodes.isRetired(ino) {
		return 0, raw.EIO // pages of a file the sandbox changed, written after it ended
	}
	c := m.cred(&in.InHeader)
	h := m.handles.get(in.Fh)
	// The first write after an fsync that followed a single write
	// commits before it is answered (see Fsync), and starts the Sync of
	// the fsync expected next (presync).
	fsyncNext := false
	if h != nil && m.wbOn && !h.append && !h.sync {
		fsyncNext = h.sinceSync.Add(1) == 1 && h.syncEach.Load()
	}
	// A large write of an fsync-each writer is queued too when its
	// request buffer can be lent (queueWrite, syncNext): answered as its
	// O_DIRECT write starts, committed at once and synced early.
	syncNextQueued := fsyncNext && len(data) >= wbLarge && !m.cfg.Writeback
	if h != nil && m.wbOn && !h.append && !h.sync && (!fsyncNext || syncNextQueued) {
		if err := h.takeErr(); err != nil {
			return 0, m.status("write", err)
		}
		if end := in.Offset + uint64(len(data)); end > fs.MaxFileSize || end < in.Offset {
			return 0, m.status("write", fs.ErrFileTooBig)
		}
		if queued, err := m.queueWrite(h, c, ino, in, cancel, data, fsyncNext); queued {
			if err != nil {
				return 0, m.status("write", err)
			}
			return uint32(len(data)), raw.OK
		}
	}
	if h != nil && h.append {
		_, err := m.appendData(c, ino, data)
		m.mirrors.invalidate(ino) // the chain is not known
		if err == nil {
			err = m.written(in.Fh)
		}
		if err != nil {
			return 0, m.status("write", err)
		}
		// Pages other descriptors cached may cover the appended range
		// (and the kernel's idea of the end of file may have been
		// stale): with explicit data cache control nothing else drops
		// them.
		m.notify.push(&invalidation{inos: []fs.Ino{ino}})
		return uint32(len(data)), raw.OK
	}
	// The kernel wrote data into its page cache as it sent it: if its
	// view of the file was current before this write, it still is after
	// it, and the next open keeps the pages (reads of recently written
	// data from the page cache; issue 5).
	//
	// A write whose writer waits for its data to be on disk anyway (the
	// fsync expected next, an O_SYNC/O_DSYNC handle) is written with
	// O_DIRECT straight from go-fuse's request buffer, without the
	// staging copy (slice.WithUnstaged; ENGINE-REQUESTS 11): its NoSync
	// commit waits for the slice write either way. Writes answered before
	// their data is on disk keep the copy, which lets the buffer go.
	wctx := m.ctx
	if fsyncNext || (h != nil && h.sync) {
		wctx = slice.WithUnstaged(m.ctx)
	}
	var before, after fs.Attr
	err := m.update(c, &invalidation{inos: []fs.Ino{ino}}, func(t *fs.Txn) (err error) {
		if before, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange); err != nil {
			return err
		}
		if err = t.Write(wctx, ino, in.Offset, data); err != nil {
			return err
		}
		after, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange)
		return err
	})
	if err == nil {
		m.nodes.wrote(ino, before.Change, after.Change)
		m.mirrors.apply(ino, before.Change, after.Change, func(f *os.File) error {
			_, err := f.WriteAt(data, int64(in.Offset))
			return err
		})
		err = m.written(in.Fh)
	} else {
		m.mirrors.invalidate(ino)
	}
	if err != nil {
		return 0, m.status("write", err)
	}
	if fsyncNext {
		if m.cfg.Writeback && h.timesBeforeFsync.Load() {
			h.presyncAtTimes.Store(true) // SetAttr starts it
		} else {
			m.presync.start(m)
		}
	}
	return uint32(len(data)), raw.OK
}

// queueWrite queues a WRITE on m's write-behind queue unless a sandbox
// is active (the write then runs in it, synchronously), and reports
// whether it did. A large write goes into the queue's open transaction
// (writeBehind.addLarge), which may fail it at once; if it can, its
// request buffer is taken from go-fuse for the slice write (bufLender:
// no staging copy).
//
// syncNext: the writer fsyncs after every write (the fsync is expected
// next). Such a large write is queued only with a lent buffer (else the
// synchronous unstaged write costs less than a staging copy), and its
// transaction commits at once and starts the early Sync (presync) as it
// commits: the WRITE is answered as soon as its O_DIRECT write is
// started, so the write overlaps the reply and the writer's FSYNC
// request instead of preceding them (docs/fuse.md "Session 12").
func (m *Server) queueWrite(h *handle, c fs.Cred, ino fs.Ino, in *raw.WriteIn, cancel <-chan struct{}, data []byte, syncNext bool) (bool, error) {
	off := in.Offset
	m.sb.gate.RLock()
	defer m.sb.gate.RUnlock()
	if m.sb.txn != nil {
		return false, nil
	}
	if len(data) >= wbLarge {
		loan := m.lender.lend(cancel, in, data)
		if syncNext && loan == nil {
			return false, nil
		}
		h.dirty.Store(true)
		err := m.wb.addLarge(m, h, c, ino, off, data, loan, syncNext)
		if loan != nil {
			loan.Release() // this handler's hold: its puts hold their own
		}
		return true, err
	}
	h.dirty.Store(true)
	m.wb.add(m, h, c, ino, off, data)
	return true, nil
}

// Flush implements RawFileSystem (every close(2)): if the file was
// written through this handle, everything committed so far is made
// durable (FS.Sync), so a closed file survives a crash as after fsync. A
// write-behind failure of the handle is reported here (as close(2)
// reports NFS write errors).
func (m *Server) Flush(_ <-chan struct{}, in *raw.FlushIn) raw.Status {
	h := m.handles.get(in.Fh)
	if h == nil {
		return raw.OK
	}
	if h.passthrough == ptWriter {
		// Its writes went to the mirror: into the engine, durably.
		if err := m.mirrors.reconcile(h.ino); err != nil {
			return m.status("flush", err)
		}
		h.dirty.Store(true)
	}
	m.waitWrites()
	if err := h.takeErr(); err != nil {
		h.dirty.Store(false)
		return m.status("flush", err)
	}
	if h.dirty.Swap(false) {
		return m.status("flush", m.syncEngine())
	}
	return raw.OK
}

// Fsync implements RawFileSystem: requests commit without waiting for
// durability (TxnOptions.NoSync); fsync and fdatasync make every change
// committed so far durable (FS.Sync, one metadata log flush). Inside a
// sandbox nothing is durable before the sandbox commits.
func (m *Server) Fsync(_ <-chan struct{}, in *raw.FsyncIn) raw.Status {
	err := m.mirrors.reconcile(fs.Ino(in.NodeId)) // passthrough writes
	if serr := m.syncEngine(); err == nil {       // waits for the write-behind queue first
		err = serr
	}
	if h := m.handles.get(in.Fh); h != nil {
		// A writer that fsyncs after every write gains nothing from
		// write-behind (the fsync waits for the write at once) and
		// would pay its copy and hand-off: after an fsync that found
		// at most one write, the next write commits before it is
		// answered (the ones after it are queued again).
		h.syncEach.Store(h.sinceSync.Swap(0) <= 1)
		if h.presyncAtTimes.Swap(false) {
			// The times did not change (the kernel's clock ticks
			// every few ms): start the next early Sync at the write.
			h.timesBeforeFsync.Store(false)
		}
		h.dirty.Store(false)
		if werr := h.takeErr(); werr != nil {
			err = werr
		}
	}
	return m.status("fsync", err)
}

// FsyncDir implements RawFileSystem, as Fsync (a directory's entries are
// metadata commits like any other).
func (m *Server) FsyncDir(_ <-chan struct{}, _ *raw.FsyncIn) raw.Status {
	return m.status("fsyncdir", m.syncEngine())
}

// fallocate(2) modes.
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// fallocMode checks a FALLOCATE request of either kind of mount and
// says what it asks: drop the range's data (PUNCH_HOLE, ZERO_RANGE)
// and/or allocate it, extending the file (no KEEP_SIZE).
func fallocMode(in *raw.FallocateIn) (punch, allocate bool, st raw.Status) {
	mode := in.Mode
	if mode&^(fallocKeepSize|fallocPunchHole|fallocZeroRange) != 0 ||
		(mode&fallocPunchHole != 0 && (mode&fallocKeepSize == 0 || mode&fallocZeroRange != 0)) {
		return false, false, raw.Status(syscall.EOPNOTSUPP)
	}
	if in.Length == 0 {
		return false, false, raw.EINVAL
	}
	return mode&(fallocPunchHole|fallocZeroRange) != 0, mode&fallocKeepSize == 0, raw.OK
}

// Fallocate implements RawFileSystem: plain allocation extends the file
// (space is not reserved: slices are allocated when written), PUNCH_HOLE
// and ZERO_RANGE drop the range's slices (metadata only).
func (m *Server) Fallocate(_ <-chan struct{}, in *raw.FallocateIn) raw.Status {
	ino := fs.Ino(in.NodeId)
	if m.nodes.isRetired(ino) {
		return raw.EIO
	}
	punch, allocate, st := fallocMode(in)
	if st != raw.OK {
		return st
	}
	if in.Offset+in.Length < in.Offset || in.Offset+in.Length > fs.MaxFileSize {
		return raw.Status(syscall.EFBIG)
	}
	if err := m.mirrors.reconcile(ino); err != nil {
		return m.status("fallocate", err)
	}
	var before, after fs.Attr
	err := m.update(m.cred(&in.InHeader), &invalidation{inos: []fs.Ino{ino}}, func(t *fs.Txn) (err error) {
		if before, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange); err != nil {
			return err
		}
		defer func() {
			if err == nil {
				after, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange)
			}
		}()
		if punch {
			if err := t.Punch(m.ctx, ino, in.Offset, in.Length); err != nil {
				return err
			}
		}
		if !allocate {
			// Nothing to reserve; the inode must still exist.
			_, err := t.GetAttr(m.ctx, ino)
			return err
		}
		return t.Allocate(m.ctx, ino, in.Offset, in.Length)
	})
	if err != nil {
		m.mirrors.invalidate(ino)
		return m.status("fallocate", err)
	}
	m.mirrors.apply(ino, before.Change, after.Change, func(f *os.File) error {
		return mirrorFallocate(f, punch, allocate, in.Offset, in.Length)
	})
	return raw.OK
}

// lseek whence values served by the file system (the kernel does the rest).
const (
	seekData = 3
	seekHole = 4
)

// Lseek implements RawFileSystem for SEEK_DATA and SEEK_HOLE.
func (m *Server) Lseek(_ <-chan struct{}, in *raw.LseekIn, out *raw.LseekOut) raw.Status {
	var whence fs.Whence
	switch in.Whence {
	case seekData:
		whence = fs.SeekData
	case seekHole:
		whence = fs.SeekHole
	default:
		return raw.EINVAL
	}
	var off uint64
	var eof bool
	var size uint64
	if err := m.mirrors.reconcile(fs.Ino(in.NodeId)); err != nil {
		return m.status("lseek", err)
	}
	err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) error {
		a, err := t.GetAttr(m.ctx, fs.Ino(in.NodeId))
		if err != nil {
			return err
		}
		size = a.Size
		off, eof, err = t.Seek(m.ctx, fs.Ino(in.NodeId), in.Offset, whence)
		return err
	})
	if err != nil {
		return m.status("lseek", err)
	}
	if in.Offset >= size || (whence == fs.SeekData && eof) {
		return raw.Status(syscall.ENXIO)
	}
	out.Offset = off
	return raw.OK
}

// maxCopy bounds one copy_file_range reply (its count is 32 bits); the
// caller loops over short copies.
const maxCopy = 1 << 30

// CopyFileRange implements RawFileSystem with the engine's metadata-only
// CopyRange: no data is read or written.
func (m *Server) CopyFileRange(_ <-chan struct{}, in *raw.CopyFileRangeIn) (uint32, raw.Status) {
	if in.Flags != 0 {
		return 0, raw.EINVAL
	}
	n := min(in.Len, maxCopy)
	if n == 0 {
		return 0, raw.OK
	}
	src, dst := fs.Ino(in.NodeId), fs.Ino(in.NodeIdOut)
	for _, ino := range []fs.Ino{src, dst} {
		if m.nodes.isRetired(ino) {
			return 0, raw.EIO
		}
	}
	for _, ino := range []fs.Ino{src, dst} {
		if err := m.mirrors.reconcile(ino); err != nil {
			return 0, m.status("copy_file_range", err)
		}
	}
	var copied uint64
	var before, after fs.Attr
	err := m.update(m.cred(&in.InHeader), &invalidation{inos: []fs.Ino{dst}}, func(t *fs.Txn) (err error) {
		if before, err = t.GetAttrMask(m.ctx, dst, fs.AttrChange); err != nil {
			return err
		}
		if copied, err = t.CopyRange(m.ctx, src, in.OffIn, dst, in.OffOut, n); err != nil {
			return err
		}
		after, err = t.GetAttrMask(m.ctx, dst, fs.AttrChange)
		return err
	})
	if err != nil {
		m.mirrors.invalidate(dst)
		return 0, m.status("copy_file_range", err)
	}
	// The copied range goes into dst's mirror (not a copy of the whole
	// file again, which would also drop what passthrough writers write
	// meanwhile).
	m.mirrors.apply(dst, before.Change, after.Change, func(f *os.File) error {
		return m.mirrors.readEngine(f, dst, in.OffOut, copied)
	})
	return uint32(copied), raw.OK
}
