// Package model is a dumb in-memory reference implementation of the txnfs
// file-system semantics (package fs), used by model-based tests: random
// operation sequences run against the real engine and against a Model must
// give the same results and the same tree.
//
// The model is deliberately simple: maps and byte slices, no slices, no
// regions, no transactions. A transaction is modelled by Clone: a
// transaction works on a clone of the committed model, and committing it
// means replaying its operations on the committed model (see the fs tests).
// It runs everything as the superuser; permission checks are tested
// elsewhere.
//
// Errors are the sentinels of package fs, so results compare with
// errors.Is. The model's inode numbers are its own and differ from the
// engine's; tests compare trees by path (see Snapshot).
package model

import (
	"bytes"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/txnfs/txnfs/fs"
)

// Node is one inode.
type Node struct {
	Ino      fs.Ino
	Type     fs.FileType
	Mode     uint32
	Uid, Gid uint32
	Rdev     uint64
	Nlink    uint32
	Data     []byte            // regular files
	Target   string            // symlinks
	Entries  map[string]fs.Ino // directories
	Parent   fs.Ino            // directories
	Xattrs   map[string][]byte
	// Version increases on every change to the node (data, attributes,
	// entries); it plays the part of fs.Attr.Change.
	Version uint64
}

// Model is the reference file system.
type Model struct {
	Nodes   map[fs.Ino]*Node
	NextIno fs.Ino
	Pins    map[fs.Ino]int
}

// New returns a model holding an empty root directory.
func New() *Model {
	m := &Model{Nodes: map[fs.Ino]*Node{}, NextIno: fs.RootIno + 1, Pins: map[fs.Ino]int{}}
	m.Nodes[fs.RootIno] = &Node{Ino: fs.RootIno, Type: fs.TypeDirectory, Mode: 0o755, Nlink: 2,
		Entries: map[string]fs.Ino{}, Parent: fs.RootIno, Xattrs: map[string][]byte{}, Version: 1}
	return m
}

// Clone returns a deep copy of m.
func (m *Model) Clone() *Model {
	c := &Model{Nodes: make(map[fs.Ino]*Node, len(m.Nodes)), NextIno: m.NextIno, Pins: maps.Clone(m.Pins)}
	for ino, n := range m.Nodes {
		nn := *n
		nn.Data = bytes.Clone(n.Data)
		if n.Entries != nil {
			nn.Entries = maps.Clone(n.Entries)
		}
		nn.Xattrs = make(map[string][]byte, len(n.Xattrs))
		for k, v := range n.Xattrs {
			nn.Xattrs[k] = bytes.Clone(v)
		}
		c.Nodes[ino] = &nn
	}
	return c
}

// Attr returns the attributes of a node in the shape of fs.Attr (times
// and Gen are zero; Change is the node's Version).
func (n *Node) Attr() fs.Attr {
	a := fs.Attr{Ino: n.Ino, Type: n.Type, Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid,
		Rdev: n.Rdev, Change: n.Version}
	switch n.Type {
	case fs.TypeRegular:
		a.Size = uint64(len(n.Data))
	case fs.TypeSymlink:
		a.Size = uint64(len(n.Target))
	}
	return a
}

func (m *Model) touch(ns ...*Node) {
	for _, n := range ns {
		if n != nil {
			n.Version++
		}
	}
}

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return fs.ErrBadName
	case len(name) > fs.MaxNameLen:
		return fs.ErrNameTooLong
	}
	return nil
}

func (m *Model) node(ino fs.Ino) (*Node, error) {
	n, ok := m.Nodes[ino]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return n, nil
}

func (m *Model) dir(ino fs.Ino) (*Node, error) {
	n, err := m.node(ino)
	if err != nil {
		return nil, err
	}
	if n.Type != fs.TypeDirectory {
		return nil, fs.ErrNotDir
	}
	return n, nil
}

// regular returns a regular file, ErrIsDir for a directory and
// ErrInvalid for other types.
func (m *Model) regular(ino fs.Ino) (*Node, error) {
	n, err := m.node(ino)
	if err != nil {
		return nil, err
	}
	switch n.Type {
	case fs.TypeRegular:
		return n, nil
	case fs.TypeDirectory:
		return nil, fs.ErrIsDir
	}
	return nil, fs.ErrInvalid
}

// Lookup finds name in dir.
func (m *Model) Lookup(dir fs.Ino, name string) (fs.Attr, error) {
	d, err := m.dir(dir)
	if err != nil {
		return fs.Attr{}, err
	}
	if err := checkName(name); err != nil {
		return fs.Attr{}, err
	}
	ino, ok := d.Entries[name]
	if !ok {
		return fs.Attr{}, fs.ErrNotExist
	}
	return m.Nodes[ino].Attr(), nil
}

// LookupPath resolves an absolute slash-separated path from the root
// without following symlinks ("." and ".." are honoured).
func (m *Model) LookupPath(p string) (fs.Attr, error) {
	cur := m.Nodes[fs.RootIno]
	for _, name := range strings.Split(p, "/") {
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			if cur.Type != fs.TypeDirectory {
				return fs.Attr{}, fs.ErrNotDir
			}
			cur = m.Nodes[cur.Parent]
			continue
		}
		a, err := m.Lookup(cur.Ino, name)
		if err != nil {
			return fs.Attr{}, err
		}
		cur = m.Nodes[a.Ino]
	}
	return cur.Attr(), nil
}

// GetAttr returns the attributes of ino.
func (m *Model) GetAttr(ino fs.Ino) (fs.Attr, error) {
	n, err := m.node(ino)
	if err != nil {
		return fs.Attr{}, err
	}
	return n.Attr(), nil
}

// SetAttr changes attributes (times are accepted and ignored).
func (m *Model) SetAttr(ino fs.Ino, sa fs.SetAttr) (fs.Attr, error) {
	n, err := m.node(ino)
	if err != nil {
		return fs.Attr{}, err
	}
	if sa.Mode != nil && *sa.Mode&^fs.ModePerm != 0 {
		return fs.Attr{}, fs.ErrInvalid
	}
	if sa.Size != nil {
		switch n.Type {
		case fs.TypeRegular:
		case fs.TypeDirectory:
			return fs.Attr{}, fs.ErrIsDir
		default:
			return fs.Attr{}, fs.ErrInvalid
		}
		if *sa.Size > fs.MaxFileSize {
			return fs.Attr{}, fs.ErrFileTooBig
		}
	}
	if sa.Mode != nil {
		n.Mode = *sa.Mode
	}
	// Any chown (even to the same ids, even by root) clears setuid, and
	// setgid when group-executable, as Linux does.
	chown := sa.Uid != nil || sa.Gid != nil
	if sa.Uid != nil {
		n.Uid = *sa.Uid
	}
	if sa.Gid != nil {
		n.Gid = *sa.Gid
	}
	if chown && n.Type != fs.TypeDirectory {
		// Changing the owner clears setuid (and setgid when group-executable).
		n.Mode &^= fs.ModeSetuid
		if n.Mode&0o010 != 0 {
			n.Mode &^= fs.ModeSetgid
		}
	}
	if sa.Size != nil {
		n.Data = resize(n.Data, *sa.Size)
	}
	m.touch(n)
	return n.Attr(), nil
}

func resize(b []byte, size uint64) []byte {
	if uint64(len(b)) >= size {
		return b[:size:size]
	}
	return append(b, make([]byte, size-uint64(len(b)))...)
}

// Create makes a new inode named name in dir; see fs.CreateRequest.
func (m *Model) Create(dir fs.Ino, name string, req fs.CreateRequest) (fs.Attr, bool, error) {
	if err := checkName(name); err != nil {
		return fs.Attr{}, false, err
	}
	switch req.Type {
	case fs.TypeRegular, fs.TypeDirectory, fs.TypeFIFO, fs.TypeSocket, fs.TypeChar, fs.TypeBlock:
	case fs.TypeSymlink:
		if req.Target == "" || strings.IndexByte(req.Target, 0) >= 0 {
			return fs.Attr{}, false, fs.ErrInvalid
		}
		if len(req.Target) > fs.MaxSymlink {
			return fs.Attr{}, false, fs.ErrNameTooLong
		}
	default:
		return fs.Attr{}, false, fs.ErrInvalid
	}
	d, err := m.dir(dir)
	if err != nil {
		return fs.Attr{}, false, err
	}
	if ino, ok := d.Entries[name]; ok {
		n := m.Nodes[ino]
		if req.Exclusive || req.Type != fs.TypeRegular {
			return fs.Attr{}, false, fs.ErrExist
		}
		switch n.Type {
		case fs.TypeRegular:
			return n.Attr(), false, nil
		case fs.TypeDirectory:
			return fs.Attr{}, false, fs.ErrIsDir
		}
		return fs.Attr{}, false, fs.ErrExist
	}
	n := &Node{Ino: m.NextIno, Type: req.Type, Mode: req.Mode & fs.ModePerm, Nlink: 1, Xattrs: map[string][]byte{}, Version: 1}
	if d.Mode&fs.ModeSetgid != 0 {
		// BSD group semantics in setgid directories.
		n.Gid = d.Gid
		if req.Type == fs.TypeDirectory {
			n.Mode |= fs.ModeSetgid
		}
	}
	switch req.Type {
	case fs.TypeDirectory:
		if d.Nlink >= fs.MaxLinks {
			return fs.Attr{}, false, fs.ErrTooManyLinks
		}
		n.Nlink = 2
		n.Entries = map[string]fs.Ino{}
		n.Parent = dir
		d.Nlink++
	case fs.TypeSymlink:
		n.Target = req.Target
	case fs.TypeChar, fs.TypeBlock:
		n.Rdev = req.Rdev
	}
	m.NextIno++
	m.Nodes[n.Ino] = n
	d.Entries[name] = n.Ino
	m.touch(d)
	return n.Attr(), true, nil
}

// Link adds name in dir as a new link to ino.
func (m *Model) Link(ino, dir fs.Ino, name string) (fs.Attr, error) {
	if err := checkName(name); err != nil {
		return fs.Attr{}, err
	}
	n, err := m.node(ino)
	if err != nil {
		return fs.Attr{}, err
	}
	d, err := m.dir(dir)
	if err != nil {
		return fs.Attr{}, err
	}
	if n.Type == fs.TypeDirectory {
		return fs.Attr{}, fs.ErrPerm
	}
	if _, ok := d.Entries[name]; ok {
		return fs.Attr{}, fs.ErrExist
	}
	if n.Nlink == 0 {
		return fs.Attr{}, fs.ErrNotExist
	}
	if n.Nlink >= fs.MaxLinks {
		return fs.Attr{}, fs.ErrTooManyLinks
	}
	n.Nlink++
	d.Entries[name] = ino
	m.touch(n, d)
	return n.Attr(), nil
}

// dropLink removes one link of n, deleting it when the last link goes and
// it is not pinned.
func (m *Model) dropLink(n *Node) {
	if n.Type == fs.TypeDirectory {
		n.Nlink = 0
	} else {
		n.Nlink--
	}
	m.touch(n)
	if n.Nlink == 0 && m.Pins[n.Ino] == 0 {
		delete(m.Nodes, n.Ino)
	}
}

// Unlink removes a non-directory entry.
func (m *Model) Unlink(dir fs.Ino, name string) error { return m.remove(dir, name, false, true) }

// Rmdir removes an empty directory entry.
func (m *Model) Rmdir(dir fs.Ino, name string) error { return m.remove(dir, name, true, false) }

// Remove removes an entry of any type (directories must be empty).
func (m *Model) Remove(dir fs.Ino, name string) error { return m.remove(dir, name, true, true) }

func (m *Model) remove(dir fs.Ino, name string, dirs, files bool) error {
	if dirs && !files && name == "." {
		return fs.ErrInvalid
	}
	if dirs && !files && name == ".." {
		return fs.ErrNotEmpty
	}
	if err := checkName(name); err != nil {
		return err
	}
	d, err := m.dir(dir)
	if err != nil {
		return err
	}
	ino, ok := d.Entries[name]
	if !ok {
		return fs.ErrNotExist
	}
	n := m.Nodes[ino]
	if n.Type == fs.TypeDirectory {
		if !dirs {
			return fs.ErrIsDir
		}
		if len(n.Entries) > 0 {
			return fs.ErrNotEmpty
		}
		d.Nlink--
	} else if !files {
		return fs.ErrNotDir
	}
	delete(d.Entries, name)
	m.touch(d)
	m.dropLink(n)
	return nil
}

// isAncestor reports whether a is b or an ancestor of b.
func (m *Model) isAncestor(a, b fs.Ino) bool {
	for {
		if a == b {
			return true
		}
		if b == fs.RootIno {
			return false
		}
		n, ok := m.Nodes[b]
		if !ok || n.Type != fs.TypeDirectory {
			return false
		}
		b = n.Parent
	}
}

// Rename moves srcDir/srcName to dstDir/dstName.
func (m *Model) Rename(srcDir fs.Ino, srcName string, dstDir fs.Ino, dstName string, fl fs.RenameFlags) error {
	if fl.NoReplace && fl.Exchange {
		return fs.ErrInvalid
	}
	if err := checkName(srcName); err != nil {
		return err
	}
	if err := checkName(dstName); err != nil {
		return err
	}
	sd, err := m.dir(srcDir)
	if err != nil {
		return err
	}
	dd, err := m.dir(dstDir)
	if err != nil {
		return err
	}
	srcIno, ok := sd.Entries[srcName]
	if !ok {
		return fs.ErrNotExist
	}
	src := m.Nodes[srcIno]
	dstIno, dstExists := dd.Entries[dstName]
	if fl.NoReplace && dstExists {
		return fs.ErrExist
	}
	if fl.Exchange && !dstExists {
		return fs.ErrNotExist
	}
	if dstExists && dstIno == srcIno {
		return nil // same entry, or two links to one inode: nothing to do
	}
	if src.Type == fs.TypeDirectory && m.isAncestor(srcIno, dstDir) {
		return fs.ErrInvalid
	}
	var dst *Node
	if dstExists {
		dst = m.Nodes[dstIno]
		if fl.Exchange && dst.Type == fs.TypeDirectory && m.isAncestor(dstIno, srcDir) {
			return fs.ErrInvalid
		}
	}
	if fl.Exchange {
		sd.Entries[srcName], dd.Entries[dstName] = dstIno, srcIno
		if src.Type == fs.TypeDirectory {
			src.Parent = dstDir
			sd.Nlink--
			dd.Nlink++
		}
		if dst.Type == fs.TypeDirectory {
			dst.Parent = srcDir
			dd.Nlink--
			sd.Nlink++
		}
		m.touch(sd, dd, src, dst)
		return nil
	}
	if dstExists {
		switch {
		case dst.Type == fs.TypeDirectory && src.Type != fs.TypeDirectory:
			return fs.ErrIsDir
		case dst.Type != fs.TypeDirectory && src.Type == fs.TypeDirectory:
			return fs.ErrNotDir
		case dst.Type == fs.TypeDirectory && len(dst.Entries) > 0:
			return fs.ErrNotEmpty
		}
	}
	delete(sd.Entries, srcName)
	if dstExists {
		if dst.Type == fs.TypeDirectory {
			dd.Nlink--
		}
		delete(dd.Entries, dstName)
		m.dropLink(dst)
	}
	dd.Entries[dstName] = srcIno
	if src.Type == fs.TypeDirectory {
		src.Parent = dstDir
		sd.Nlink--
		dd.Nlink++
	}
	m.touch(sd, dd, src)
	return nil
}

// DirEntry is a directory entry as the model reports it.
type DirEntry struct {
	Name string
	Type fs.FileType
}

// ReadDir lists dir sorted by name (the engine's order is by cookie;
// tests compare sets).
func (m *Model) ReadDir(dir fs.Ino) ([]DirEntry, error) {
	d, err := m.dir(dir)
	if err != nil {
		return nil, err
	}
	var out []DirEntry
	for name, ino := range d.Entries {
		out = append(out, DirEntry{Name: name, Type: m.Nodes[ino].Type})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Readlink returns a symlink's target.
func (m *Model) Readlink(ino fs.Ino) (string, error) {
	n, err := m.node(ino)
	if err != nil {
		return "", err
	}
	if n.Type != fs.TypeSymlink {
		return "", fs.ErrWrongType
	}
	return n.Target, nil
}

// Read returns up to n bytes at off and whether the read reached the end
// of the file.
func (m *Model) Read(ino fs.Ino, off uint64, n int) ([]byte, bool, error) {
	f, err := m.regular(ino)
	if err != nil {
		return nil, false, err
	}
	size := uint64(len(f.Data))
	if off >= size {
		return nil, true, nil
	}
	end := min(size, off+uint64(n))
	return bytes.Clone(f.Data[off:end]), end == size, nil
}

func (m *Model) writeAt(f *Node, off uint64, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	end := off + uint64(len(data))
	if end > fs.MaxFileSize || end < off {
		return fs.ErrFileTooBig
	}
	if uint64(len(f.Data)) < end {
		f.Data = resize(f.Data, end)
	}
	copy(f.Data[off:], data)
	m.touch(f)
	return nil
}

// Write writes data at off, extending the file (with zeros) as needed.
func (m *Model) Write(ino fs.Ino, off uint64, data []byte) error {
	if end := off + uint64(len(data)); end > fs.MaxFileSize || end < off {
		return fs.ErrFileTooBig
	}
	f, err := m.regular(ino)
	if err != nil {
		return err
	}
	return m.writeAt(f, off, data)
}

// Append writes data at the end of the file and returns where.
func (m *Model) Append(ino fs.Ino, data []byte) (uint64, error) {
	f, err := m.regular(ino)
	if err != nil {
		return 0, err
	}
	off := uint64(len(f.Data))
	return off, m.writeAt(f, off, data)
}

// Yank returns the bytes of [off, off+n) that lie inside the file.
func (m *Model) Yank(ino fs.Ino, off, n uint64) ([]byte, error) {
	f, err := m.regular(ino)
	if err != nil {
		return nil, err
	}
	size := uint64(len(f.Data))
	if off >= size {
		return []byte{}, nil
	}
	return bytes.Clone(f.Data[off:min(size, off+n)]), nil
}

// Paste writes yanked bytes at off.
func (m *Model) Paste(ino fs.Ino, off uint64, s []byte) error { return m.Write(ino, off, s) }

// Punch zeroes [off, off+n) inside the file; the size does not change.
func (m *Model) Punch(ino fs.Ino, off, n uint64) error {
	f, err := m.regular(ino)
	if err != nil {
		return err
	}
	size := uint64(len(f.Data))
	if off < size && n > 0 {
		clear(f.Data[off:min(size, off+n)])
		m.touch(f)
	}
	return nil
}

// Allocate extends the file to at least off+n bytes.
func (m *Model) Allocate(ino fs.Ino, off, n uint64) error {
	if off+n > fs.MaxFileSize || off+n < off {
		return fs.ErrFileTooBig
	}
	f, err := m.regular(ino)
	if err != nil {
		return err
	}
	if uint64(len(f.Data)) < off+n {
		f.Data = resize(f.Data, off+n)
		m.touch(f)
	}
	return nil
}

// Concat makes dst's content the concatenation of the srcs' contents (as
// they were before the call; dst may be among them).
func (m *Model) Concat(dst fs.Ino, srcs []fs.Ino) error {
	var buf []byte
	for _, s := range srcs {
		f, err := m.regular(s)
		if err != nil {
			return err
		}
		buf = append(buf, f.Data...)
	}
	d, err := m.regular(dst)
	if err != nil {
		return err
	}
	if uint64(len(buf)) > fs.MaxFileSize {
		return fs.ErrFileTooBig
	}
	d.Data = buf
	m.touch(d)
	return nil
}

// Copy makes dst's content a copy of src's.
func (m *Model) Copy(src, dst fs.Ino) error {
	s, err := m.regular(src)
	if err != nil {
		return err
	}
	d, err := m.regular(dst)
	if err != nil {
		return err
	}
	d.Data = bytes.Clone(s.Data)
	m.touch(d)
	return nil
}

// CopyRange copies up to n bytes (n == 0: up to the end of src) from src
// at srcOff to dst at dstOff and returns how many it copied (fewer at src's
// end of file).
func (m *Model) CopyRange(src fs.Ino, srcOff uint64, dst fs.Ino, dstOff, n uint64) (uint64, error) {
	s, err := m.regular(src)
	if err != nil {
		return 0, err
	}
	size := uint64(len(s.Data))
	var data []byte
	if srcOff < size {
		if n == 0 {
			n = size - srcOff
		}
		data = bytes.Clone(s.Data[srcOff:min(size, srcOff+n)])
	}
	if dstOff+uint64(len(data)) > fs.MaxFileSize {
		return 0, fs.ErrFileTooBig
	}
	d, err := m.regular(dst)
	if err != nil {
		return 0, err
	}
	return uint64(len(data)), m.writeAt(d, dstOff, data)
}

// xattrAllowed applies the namespace rules (as the superuser): "user."
// attributes only on regular files and directories; "trusted." and
// "security." anywhere; other namespaces are not supported.
func xattrAllowed(n *Node, name string) error {
	switch {
	case name == "" || len(name) > 255:
		return fs.ErrRange
	case strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security."):
		return nil
	case strings.HasPrefix(name, "user."):
		if n.Type != fs.TypeRegular && n.Type != fs.TypeDirectory {
			return fs.ErrPerm
		}
		return nil
	}
	return fs.ErrNotSupported
}

// GetXattr returns an extended attribute.
func (m *Model) GetXattr(ino fs.Ino, name string) ([]byte, error) {
	n, err := m.node(ino)
	if err != nil {
		return nil, err
	}
	if err := xattrAllowed(n, name); err != nil {
		return nil, err
	}
	v, ok := n.Xattrs[name]
	if !ok {
		return nil, fs.ErrNoAttr
	}
	return bytes.Clone(v), nil
}

// SetXattr sets an extended attribute.
func (m *Model) SetXattr(ino fs.Ino, name string, value []byte, fl fs.XattrFlags) error {
	if len(value) > 64<<10 {
		return fs.ErrRange
	}
	n, err := m.node(ino)
	if err != nil {
		return err
	}
	if err := xattrAllowed(n, name); err != nil {
		return err
	}
	_, ok := n.Xattrs[name]
	if fl.Create && ok {
		return fs.ErrExist
	}
	if fl.Replace && !ok {
		return fs.ErrNoAttr
	}
	n.Xattrs[name] = bytes.Clone(value)
	m.touch(n)
	return nil
}

// ListXattr lists attribute names, sorted.
func (m *Model) ListXattr(ino fs.Ino) ([]string, error) {
	n, err := m.node(ino)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(n.Xattrs)), nil
}

// RemoveXattr removes an extended attribute.
func (m *Model) RemoveXattr(ino fs.Ino, name string) error {
	n, err := m.node(ino)
	if err != nil {
		return err
	}
	if err := xattrAllowed(n, name); err != nil {
		return err
	}
	if _, ok := n.Xattrs[name]; !ok {
		return fs.ErrNoAttr
	}
	delete(n.Xattrs, name)
	m.touch(n)
	return nil
}

// Pin keeps ino alive after its last link is removed, until Unpin.
func (m *Model) Pin(ino fs.Ino) { m.Pins[ino]++ }

// Unpin releases a Pin; an unlinked inode goes with its last pin.
func (m *Model) Unpin(ino fs.Ino) {
	if m.Pins[ino]--; m.Pins[ino] <= 0 {
		delete(m.Pins, ino)
		if n, ok := m.Nodes[ino]; ok && n.Nlink == 0 {
			delete(m.Nodes, ino)
		}
	}
}
