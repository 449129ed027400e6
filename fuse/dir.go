package fuse

import (
	"syscall"

	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
)

// Directory stream offsets: "." is at 1 and ".." at 2; every other entry
// is at its engine cookie, which is stable for the life of the entry and
// starts at 3, so seekdir/telldir survive concurrent changes.
const (
	offDot    = 1
	offDotDot = 2
)

// OpenDir implements RawFileSystem; no per-open state is kept.
func (m *Server) OpenDir(_ <-chan struct{}, in *raw.OpenIn, out *raw.OpenOut) raw.Status {
	ino := fs.Ino(in.NodeId)
	err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) error {
		a, err := t.GetAttr(m.ctx, ino)
		if err != nil {
			return err
		}
		if a.Type != fs.TypeDirectory {
			return fs.ErrNotDir
		}
		need := openAccess(in.Flags &^ syscall.O_TRUNC)
		got, err := t.Access(m.ctx, ino, need)
		if err != nil {
			return err
		}
		if got != need {
			return fs.ErrAccess
		}
		return nil
	})
	return m.nodeStatus("opendir", err)
}

// ReleaseDir implements RawFileSystem.
func (m *Server) ReleaseDir(*raw.ReleaseIn) {}

// ReadDir implements RawFileSystem.
func (m *Server) ReadDir(_ <-chan struct{}, in *raw.ReadIn, out *raw.DirEntryList) raw.Status {
	return m.readDir(in, out, false)
}

// ReadDirPlus implements RawFileSystem: entries with their attributes, so
// that "ls -l" needs no lookup per entry.
func (m *Server) ReadDirPlus(_ <-chan struct{}, in *raw.ReadIn, out *raw.DirEntryList) raw.Status {
	return m.readDir(in, out, true)
}

// direntSize estimates an entry's size in the reply, to size engine pages.
const direntSize = 24 + 16

func (m *Server) readDir(in *raw.ReadIn, out *raw.DirEntryList, plus bool) raw.Status {
	dir := fs.Ino(in.NodeId)
	off := in.Offset
	per := direntSize
	if plus {
		per += 128 // the EntryOut
	}
	limit := max(int(in.Size)/per, 8)
	var entries []fs.DirEntry
	var parent fs.Ino
	err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) error {
		cookie := uint64(0)
		if off > offDotDot {
			cookie = off
		}
		var err error
		entries, _, err = t.ReadDir(m.ctx, dir, fs.ReadDirRequest{Cookie: cookie, Limit: limit, WithAttr: plus})
		if err != nil || off >= offDotDot {
			return err
		}
		// ".." may be listed without search permission on dir.
		t.SetCred(fs.RootCred)
		p, err := t.Parent(m.ctx, dir)
		parent = p.Ino
		return err
	})
	if err != nil {
		return m.status("readdir", err)
	}
	add := func(name string, ino fs.Ino, typ fs.FileType, off uint64, a *fs.Attr) bool {
		e := raw.DirEntry{Name: name, Ino: uint64(ino), Mode: typeBits(typ), Off: off}
		if !plus {
			return out.AddDirEntry(e)
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			return false
		}
		if a != nil { // the kernel takes a reference on all but "." and ".."
			a = m.reconciledAttr(in, a)
			m.entry(eo, a)
		}
		return true
	}
	if off < offDot && !add(".", dir, fs.TypeDirectory, offDot, nil) {
		return raw.OK
	}
	if off < offDotDot && !add("..", parent, fs.TypeDirectory, offDotDot, nil) {
		return raw.OK
	}
	for i := range entries {
		e := &entries[i]
		if !add(e.Name, e.Ino, e.Type, e.Cookie, e.Attr) {
			break
		}
	}
	return raw.OK
}

// reconciledAttr returns a, or, if passthrough writers wrote ino's mirror
// since the engine got it, the attributes after the engine got it (the
// kernel takes the size of an entry reply).
func (m *Server) reconciledAttr(in *raw.ReadIn, a *fs.Attr) *fs.Attr {
	if !m.mirrors.dirty(a.Ino) || m.mirrors.reconcile(a.Ino) != nil {
		return a
	}
	var fresh fs.Attr
	if err := m.view(m.cred(&in.InHeader), func(t *fs.Txn) (err error) {
		fresh, err = t.GetAttr(m.ctx, a.Ino)
		return err
	}); err != nil {
		return a
	}
	return &fresh
}
