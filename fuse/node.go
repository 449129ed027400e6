package fuse

import (
	"errors"
	"os"
	"syscall"
	"time"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
)

// typeBits returns the S_IFMT bits of t.
func typeBits(t fs.FileType) uint32 {
	switch t {
	case fs.TypeRegular:
		return syscall.S_IFREG
	case fs.TypeDirectory:
		return syscall.S_IFDIR
	case fs.TypeSymlink:
		return syscall.S_IFLNK
	case fs.TypeFIFO:
		return syscall.S_IFIFO
	case fs.TypeSocket:
		return syscall.S_IFSOCK
	case fs.TypeChar:
		return syscall.S_IFCHR
	case fs.TypeBlock:
		return syscall.S_IFBLK
	}
	return 0
}

// fileType returns the engine type for S_IFMT bits, or 0.
func fileType(mode uint32) fs.FileType {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		return fs.TypeRegular
	case syscall.S_IFDIR:
		return fs.TypeDirectory
	case syscall.S_IFLNK:
		return fs.TypeSymlink
	case syscall.S_IFIFO:
		return fs.TypeFIFO
	case syscall.S_IFSOCK:
		return fs.TypeSocket
	case syscall.S_IFCHR:
		return fs.TypeChar
	case syscall.S_IFBLK:
		return fs.TypeBlock
	}
	return 0
}

// Device numbers: the engine stores major<<32 | minor; FUSE carries the
// kernel's 32-bit new_encode_dev format.
func decodeDev(d uint32) uint64 {
	major := uint64((d & 0xfff00) >> 8)
	minor := uint64((d & 0xff) | ((d >> 12) & 0xfff00))
	return major<<32 | minor
}

func encodeDev(d uint64) uint32 {
	major, minor := uint32(d>>32), uint32(d)
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12
}

func fillAttr(out *raw.Attr, a *fs.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = a.Size
	out.Blocks = (a.Used + 511) / 512
	out.Atime, out.Atimensec = uint64(a.Atime.Unix()), uint32(a.Atime.Nanosecond())
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Unix()), uint32(a.Mtime.Nanosecond())
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Unix()), uint32(a.Ctime.Nanosecond())
	out.Mode = typeBits(a.Type) | a.Mode&fs.ModePerm
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Rdev = encodeDev(a.Rdev)
	out.Blksize = blockSize
}

// entry fills out for a lookup result and counts the kernel's reference.
func (m *Server) entry(out *raw.EntryOut, a *fs.Attr) {
	first, gen := m.nodes.ref(a.Ino, a.Change, a.Type == fs.TypeRegular)
	out.NodeId = uint64(a.Ino)
	out.Generation = a.Gen + gen
	out.SetEntryTimeout(m.cfg.EntryTimeout)
	out.SetAttrTimeout(m.cfg.AttrTimeout)
	fillAttr(&out.Attr, a)
	if first {
		m.pin(a.Ino)
	}
}

func (m *Server) attrOut(out *raw.AttrOut, a *fs.Attr) {
	out.SetTimeout(m.cfg.AttrTimeout)
	fillAttr(&out.Attr, a)
}

// Lookup implements RawFileSystem.
func (m *Server) Lookup(_ <-chan struct{}, h *raw.InHeader, name string, out *raw.EntryOut) raw.Status {
	dir := fs.Ino(h.NodeId)
	c := m.cred(h)
	for attempt := 0; ; attempt++ {
		removals := m.pins.started.Load()
		var a fs.Attr
		err := m.view(c, func(t *fs.Txn) (err error) {
			switch name {
			case ".":
				a, err = t.GetAttr(m.ctx, dir)
			case "..":
				a, err = t.Parent(m.ctx, dir)
			default:
				a, err = t.Lookup(m.ctx, dir, name)
			}
			return err
		})
		if err == nil && m.mirrors.dirty(a.Ino) {
			// Passthrough writers wrote its mirror: the engine's size
			// follows before the kernel is told one.
			if err = m.mirrors.reconcile(a.Ino); err == nil {
				err = m.view(c, func(t *fs.Txn) (err error) {
					a, err = t.GetAttr(m.ctx, a.Ino)
					return err
				})
			}
		}
		if errors.Is(err, fs.ErrNotExist) && m.cfg.NegativeTimeout > 0 {
			// A negative entry: the kernel caches the absence.
			*out = raw.EntryOut{}
			out.SetEntryTimeout(m.cfg.NegativeTimeout)
			return raw.OK
		}
		if err != nil {
			return m.status("lookup", err)
		}
		m.entry(out, &a)
		if m.pins.started.Load() == removals || attempt == 3 || m.alive(c, a.Ino) {
			return raw.OK
		}
		// A removal committed between the lookup and the pin: the
		// inode may be gone. Look again.
		m.Forget(uint64(a.Ino), 1)
	}
}

// alive reports whether ino still exists.
func (m *Server) alive(c fs.Cred, ino fs.Ino) bool {
	err := m.view(c, func(t *fs.Txn) error {
		_, err := t.GetAttr(m.ctx, ino)
		return err
	})
	return !errors.Is(err, fs.ErrNotExist)
}

// Forget implements RawFileSystem.
func (m *Server) Forget(nodeid, nlookup uint64) {
	if m.nodes.forget(fs.Ino(nodeid), nlookup) {
		m.mirrors.forget(fs.Ino(nodeid))
		m.unpinLater(fs.Ino(nodeid))
	}
}

// GetAttr implements RawFileSystem.
func (m *Server) GetAttr(_ <-chan struct{}, in *raw.GetAttrIn, out *raw.AttrOut) raw.Status {
	if m.nodes.isRetired(fs.Ino(in.NodeId)) {
		return retiredAttr(out)
	}
	if err := m.mirrors.reconcile(fs.Ino(in.NodeId)); err != nil {
		return m.status("getattr", err)
	}
	var a fs.Attr
	err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) (err error) {
		a, err = t.GetAttr(m.ctx, fs.Ino(in.NodeId))
		return err
	})
	if err != nil {
		return m.nodeStatus("getattr", err)
	}
	m.attrOut(out, &a)
	return raw.OK
}

// SetAttr implements RawFileSystem (chmod, chown, truncate, utimens).
func (m *Server) SetAttr(_ <-chan struct{}, in *raw.SetAttrIn, out *raw.AttrOut) raw.Status {
	ino := fs.Ino(in.NodeId)
	if m.nodes.isRetired(ino) {
		return retiredAttr(out)
	}
	var sa fs.SetAttr
	if mode, ok := in.GetMode(); ok {
		sa.Mode = &mode
	}
	if uid, ok := in.GetUID(); ok {
		sa.Uid = &uid
	}
	if gid, ok := in.GetGID(); ok {
		sa.Gid = &gid
	}
	if size, ok := in.GetSize(); ok {
		sa.Size = &size
		if fh, ok := in.GetFh(); ok {
			if h := m.handles.get(fh); h != nil && h.write {
				sa.OpenForWrite = true
			}
		}
	}
	if in.Valid&raw.FATTR_ATIME != 0 {
		sa.Atime = setTime(in.Valid&raw.FATTR_ATIME_NOW != 0, in.Atime, in.Atimensec)
	}
	if in.Valid&raw.FATTR_MTIME != 0 {
		sa.Mtime = setTime(in.Valid&raw.FATTR_MTIME_NOW != 0, in.Mtime, in.Mtimensec)
	}
	if err := m.mirrors.reconcile(ino); err != nil {
		return m.status("setattr", err)
	}
	var before, a fs.Attr
	inv := &invalidation{inos: []fs.Ino{ino}}
	err := m.update(m.cred(&in.InHeader), inv, func(t *fs.Txn) (err error) {
		if before, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange); err != nil {
			return err
		}
		a, err = t.SetAttr(m.ctx, ino, sa)
		return err
	})
	if err != nil {
		m.mirrors.invalidate(ino)
		return m.nodeStatus("setattr", err)
	}
	// The kernel truncates its own pages with the size.
	m.nodes.wrote(ino, before.Change, a.Change)
	switch {
	case sa.Size != nil && *sa.Size == 0:
		m.mirrors.create(ino, a.Change) // O_TRUNC arrives as this
	case sa.Size != nil:
		m.mirrors.apply(ino, before.Change, a.Change, func(f *os.File) error { return f.Truncate(int64(*sa.Size)) })
	default:
		m.mirrors.apply(ino, before.Change, a.Change, nil)
	}
	m.attrOut(out, &a)
	m.timesFlushed(in)
	return raw.OK
}

// timesFlushed starts the early Sync of an fsync-each writer at the
// SETATTR of its file's times, under the writeback cache. The kernel
// owns mtime and ctime then, and its fsync writes the pages back (the
// synchronous WRITE), sends the times it set as a SETATTR, then the FSYNC:
// an early Sync begun at the WRITE (as on a write-through mount) would
// miss the SETATTR's commit, and the FSYNC would sync a second time. So
// once a handle's fsync was preceded by such a SETATTR, its synchronous
// writes leave the early Sync to the next one (Write; Fsync goes back to
// starting it at the write when none came).
func (m *Server) timesFlushed(in *raw.SetAttrIn) {
	const times = raw.FATTR_MTIME | raw.FATTR_CTIME | raw.FATTR_FH | raw.FATTR_LOCKOWNER
	if !m.cfg.Writeback || in.Valid&^times != 0 || in.Valid&raw.FATTR_MTIME == 0 || in.Valid&raw.FATTR_FH == 0 {
		return
	}
	h := m.handles.get(in.Fh)
	if h == nil {
		return
	}
	h.timesBeforeFsync.Store(true)
	if h.presyncAtTimes.Swap(false) {
		m.presync.start(m)
		m.presync.atTimes.Add(1)
	}
}

func setTime(now bool, sec uint64, nsec uint32) *fs.SetTime {
	if now {
		return &fs.SetTime{Now: true}
	}
	return &fs.SetTime{Time: time.Unix(int64(sec), int64(nsec))}
}

// create makes a new inode and answers with its entry.
func (m *Server) create(op string, h *raw.InHeader, name string, req fs.CreateRequest, out *raw.EntryOut) raw.Status {
	dir := fs.Ino(h.NodeId)
	var a fs.Attr
	inv := &invalidation{}
	inv.entry(dir, name)
	inv.ino(dir)
	err := m.update(m.cred(h), inv, func(t *fs.Txn) (err error) {
		a, _, err = t.Create(m.ctx, dir, name, req)
		return err
	})
	if err != nil {
		return m.status(op, err)
	}
	m.entry(out, &a)
	return raw.OK
}

// Mknod implements RawFileSystem.
func (m *Server) Mknod(_ <-chan struct{}, in *raw.MknodIn, name string, out *raw.EntryOut) raw.Status {
	typ := fileType(in.Mode)
	if typ == 0 || typ == fs.TypeDirectory || typ == fs.TypeSymlink {
		return raw.EINVAL
	}
	req := fs.CreateRequest{Type: typ, Mode: in.Mode & fs.ModePerm, Exclusive: true}
	if typ == fs.TypeChar || typ == fs.TypeBlock {
		req.Rdev = decodeDev(in.Rdev)
	}
	return m.create("mknod", &in.InHeader, name, req, out)
}

// Mkdir implements RawFileSystem.
func (m *Server) Mkdir(_ <-chan struct{}, in *raw.MkdirIn, name string, out *raw.EntryOut) raw.Status {
	req := fs.CreateRequest{Type: fs.TypeDirectory, Mode: in.Mode & fs.ModePerm, Exclusive: true}
	return m.create("mkdir", &in.InHeader, name, req, out)
}

// Symlink implements RawFileSystem.
func (m *Server) Symlink(_ <-chan struct{}, h *raw.InHeader, target, name string, out *raw.EntryOut) raw.Status {
	req := fs.CreateRequest{Type: fs.TypeSymlink, Mode: 0o777, Target: target, Exclusive: true}
	return m.create("symlink", h, name, req, out)
}

// Link implements RawFileSystem.
func (m *Server) Link(_ <-chan struct{}, in *raw.LinkIn, name string, out *raw.EntryOut) raw.Status {
	dir, ino := fs.Ino(in.NodeId), fs.Ino(in.Oldnodeid)
	// The kernel takes the size of the entry reply: passthrough writes
	// reach the engine first.
	if err := m.mirrors.reconcile(ino); err != nil {
		return m.status("link", err)
	}
	var a fs.Attr
	inv := &invalidation{}
	inv.entry(dir, name)
	inv.ino(dir, ino)
	var before fs.Attr // the inode's change before: its mirror's chain
	err := m.update(m.cred(&in.InHeader), inv, func(t *fs.Txn) (err error) {
		if before, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange); err != nil {
			return err
		}
		a, err = t.Link(m.ctx, ino, dir, name)
		return err
	})
	if err != nil {
		return m.status("link", err)
	}
	m.mirrors.apply(ino, before.Change, a.Change, nil) // no data changed
	m.entry(out, &a)
	return raw.OK
}

// remove unlinks or rmdirs name, invalidating the removed inode too.
func (m *Server) remove(op string, h *raw.InHeader, name string, rmdir bool) raw.Status {
	dir := fs.Ino(h.NodeId)
	inv := &invalidation{}
	var victim fs.Ino
	err := m.pins.removing(func() error {
		return m.update(m.cred(h), inv, func(t *fs.Txn) error {
			*inv = invalidation{}
			inv.entry(dir, name)
			inv.ino(dir)
			victim = 0
			if m.cfg.Group != nil {
				if a, err := t.Lookup(m.ctx, dir, name); err == nil {
					inv.ino(a.Ino)
					victim = a.Ino
				}
			}
			if rmdir {
				return t.Rmdir(m.ctx, dir, name)
			}
			return t.Unlink(m.ctx, dir, name)
		})
	})
	if err == nil && victim != 0 {
		m.nodes.removedHere(victim)
	}
	return m.status(op, err)
}

// Unlink implements RawFileSystem.
func (m *Server) Unlink(_ <-chan struct{}, h *raw.InHeader, name string) raw.Status {
	return m.remove("unlink", h, name, false)
}

// Rmdir implements RawFileSystem.
func (m *Server) Rmdir(_ <-chan struct{}, h *raw.InHeader, name string) raw.Status {
	return m.remove("rmdir", h, name, true)
}

// Linux renameat2 flags.
const (
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
	renameWhiteout  = 1 << 2
)

// Rename implements RawFileSystem (rename and renameat2).
func (m *Server) Rename(_ <-chan struct{}, in *raw.RenameIn, oldName, newName string) raw.Status {
	if in.Flags&^(renameNoReplace|renameExchange) != 0 {
		if in.Flags&renameWhiteout != 0 {
			return raw.Status(syscall.EOPNOTSUPP)
		}
		return raw.EINVAL
	}
	flags := fs.RenameFlags{NoReplace: in.Flags&renameNoReplace != 0, Exchange: in.Flags&renameExchange != 0}
	src, dst := fs.Ino(in.NodeId), fs.Ino(in.Newdir)
	inv := &invalidation{}
	var victim fs.Ino
	var moved, movedAfter fs.Attr // the renamed inode's change: its mirror's chain
	err := m.pins.removing(func() error {
		return m.update(m.cred(&in.InHeader), inv, func(t *fs.Txn) (err error) {
			*inv = invalidation{}
			inv.entry(src, oldName)
			inv.entry(dst, newName)
			inv.ino(src, dst)
			victim = 0
			moved = fs.Attr{}
			if a, lerr := t.Lookup(m.ctx, src, oldName); m.mirrors != nil && lerr == nil {
				moved = a
				defer func() {
					if err == nil {
						movedAfter, err = t.GetAttrMask(m.ctx, moved.Ino, fs.AttrChange)
					}
				}()
			}
			for i, e := range inv.entries {
				if m.cfg.Group == nil {
					break
				}
				if a, err := t.Lookup(m.ctx, e.parent, e.name); err == nil {
					inv.ino(a.Ino)
					if i == 1 && !flags.Exchange {
						victim = a.Ino
					}
				}
			}
			return t.Rename(m.ctx, src, oldName, dst, newName, flags)
		})
	})
	if err == nil && victim != 0 {
		m.nodes.removedHere(victim)
	}
	if err == nil && moved.Ino != 0 {
		// A rename changes no data (save-by-rename keeps the mirror).
		m.mirrors.apply(moved.Ino, moved.Change, movedAfter.Change, nil)
	}
	return m.status("rename", err)
}

// Readlink implements RawFileSystem.
func (m *Server) Readlink(_ <-chan struct{}, h *raw.InHeader) ([]byte, raw.Status) {
	var target string
	err := m.view(m.cred(h), func(t *fs.Txn) (err error) {
		target, err = t.Readlink(m.ctx, fs.Ino(h.NodeId))
		return err
	})
	if err != nil {
		return nil, m.nodeStatus("readlink", err)
	}
	return []byte(target), raw.OK
}

// Access implements RawFileSystem (access(2), chdir, and exec checks).
func (m *Server) Access(_ <-chan struct{}, in *raw.AccessIn) raw.Status {
	mask := in.Mask & 7
	var got uint32
	err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) (err error) {
		got, err = t.Access(m.ctx, fs.Ino(in.NodeId), mask)
		return err
	})
	if err != nil {
		return m.nodeStatus("access", err)
	}
	if got != mask {
		return raw.EACCES
	}
	return raw.OK
}

// StatFs implements RawFileSystem.
func (m *Server) StatFs(_ <-chan struct{}, _ *raw.InHeader, out *raw.StatfsOut) raw.Status {
	st, err := m.eng.StatFS(m.ctx)
	if err != nil {
		return m.status("statfs", err)
	}
	*out = raw.StatfsOut{Blocks: st.Blocks, Bfree: st.BlocksFree, Bavail: st.BlocksAvail,
		Files: st.Files, Ffree: st.FilesFree, Bsize: st.BlockSize, Frsize: st.BlockSize, NameLen: st.NameLen}
	return raw.OK
}
