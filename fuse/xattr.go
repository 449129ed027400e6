package fuse

import (
	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/fs"
)

// setxattr(2) flags.
const (
	xattrCreate  = 1
	xattrReplace = 2
)

// GetXAttr implements RawFileSystem. A zero-length dest asks for the size.
func (m *Server) GetXAttr(_ <-chan struct{}, h *raw.InHeader, name string, dest []byte) (uint32, raw.Status) {
	var v []byte
	err := m.view(m.cred(h), func(t *fs.Txn) (err error) {
		v, err = t.GetXattr(m.ctx, fs.Ino(h.NodeId), name)
		return err
	})
	if err != nil {
		return 0, m.nodeStatus("getxattr", err)
	}
	if len(dest) == 0 {
		return uint32(len(v)), raw.OK
	}
	if len(v) > len(dest) {
		return uint32(len(v)), raw.ERANGE
	}
	return uint32(copy(dest, v)), raw.OK
}

// ListXAttr implements RawFileSystem: NUL-terminated names.
func (m *Server) ListXAttr(_ <-chan struct{}, h *raw.InHeader, dest []byte) (uint32, raw.Status) {
	var names []string
	err := m.view(m.cred(h), func(t *fs.Txn) (err error) {
		names, err = t.ListXattr(m.ctx, fs.Ino(h.NodeId))
		return err
	})
	if err != nil {
		return 0, m.nodeStatus("listxattr", err)
	}
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	if len(dest) == 0 {
		return uint32(len(b)), raw.OK
	}
	if len(b) > len(dest) {
		return uint32(len(b)), raw.ERANGE
	}
	return uint32(copy(dest, b)), raw.OK
}

// SetXAttr implements RawFileSystem.
func (m *Server) SetXAttr(_ <-chan struct{}, in *raw.SetXAttrIn, name string, data []byte) raw.Status {
	if in.Flags&^(xattrCreate|xattrReplace) != 0 {
		return raw.EINVAL
	}
	flags := fs.XattrFlags{Create: in.Flags&xattrCreate != 0, Replace: in.Flags&xattrReplace != 0}
	ino := fs.Ino(in.NodeId)
	err := m.updateMetadata(m.cred(&in.InHeader), ino, func(t *fs.Txn) error {
		return t.SetXattr(m.ctx, ino, name, data, flags)
	})
	return m.nodeStatus("setxattr", err)
}

// RemoveXAttr implements RawFileSystem.
func (m *Server) RemoveXAttr(_ <-chan struct{}, h *raw.InHeader, name string) raw.Status {
	ino := fs.Ino(h.NodeId)
	err := m.updateMetadata(m.cred(h), ino, func(t *fs.Txn) error {
		return t.RemoveXattr(m.ctx, ino, name)
	})
	return m.nodeStatus("removexattr", err)
}

// updateMetadata runs fn, which changes ino's metadata but not its data,
// in an update invalidating ino, and connects ino's mirror chain across
// it (its change attribute moves, its contents do not).
func (m *Server) updateMetadata(c fs.Cred, ino fs.Ino, fn func(t *fs.Txn) error) error {
	var before, after fs.Attr
	err := m.update(c, &invalidation{inos: []fs.Ino{ino}}, func(t *fs.Txn) (err error) {
		if m.mirrors != nil {
			if before, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange); err != nil {
				return err
			}
		}
		if err = fn(t); err != nil || m.mirrors == nil {
			return err
		}
		after, err = t.GetAttrMask(m.ctx, ino, fs.AttrChange)
		return err
	})
	if err == nil && m.mirrors != nil {
		m.mirrors.apply(ino, before.Change, after.Change, nil)
	}
	return err
}
