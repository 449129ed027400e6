package model

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/txnfs/txnfs/fs"
)

// Entry is one path of a Snapshot.
type Entry struct {
	Path     string
	Type     fs.FileType
	Mode     uint32
	Uid, Gid uint32
	Rdev     uint64
	Nlink    uint32
	Size     uint64
	Data     []byte // regular files
	Target   string // symlinks
	Xattrs   map[string]string
	// Link numbers inodes in walk order, so that two paths naming the
	// same inode (hard links) have the same Link in both the model's and
	// the engine's snapshot although their inode numbers differ.
	Link int
}

// Snapshot is a whole tree, one Entry per path, in walk order (depth
// first, names sorted).
type Snapshot []Entry

// Walker reads a tree; the model and the engine (in tests) each provide one.
type Walker interface {
	// Root returns the root's handle.
	Root() fs.Ino
	// Stat returns an inode's entry fields (Path and Link are filled in
	// by Walk) and, for directories, the sorted child names and handles.
	Stat(ino fs.Ino) (Entry, []string, []fs.Ino, error)
}

// Walk builds the snapshot of the tree w reads.
func Walk(w Walker) (Snapshot, error) {
	var snap Snapshot
	links := map[fs.Ino]int{}
	var walk func(path string, ino fs.Ino) error
	walk = func(path string, ino fs.Ino) error {
		e, names, inos, err := w.Stat(ino)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if _, seen := links[ino]; seen && e.Type == fs.TypeDirectory {
			return fmt.Errorf("%s: %w: directory %d reached twice (a cycle or a hard link to a directory)",
				path, fs.ErrCorrupt, ino)
		}
		e.Path = path
		id, ok := links[ino]
		if !ok {
			id = len(links)
			links[ino] = id
		}
		e.Link = id
		snap = append(snap, e)
		for i, name := range names {
			if err := walk(strings.TrimSuffix(path, "/")+"/"+name, inos[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return snap, walk("/", w.Root())
}

type modelWalker struct{ m *Model }

func (w modelWalker) Root() fs.Ino { return fs.RootIno }

func (w modelWalker) Stat(ino fs.Ino) (Entry, []string, []fs.Ino, error) {
	n, ok := w.m.Nodes[ino]
	if !ok {
		return Entry{}, nil, nil, fs.ErrNotExist
	}
	a := n.Attr()
	e := Entry{Type: n.Type, Mode: n.Mode, Uid: n.Uid, Gid: n.Gid, Rdev: n.Rdev, Nlink: n.Nlink, Size: a.Size,
		Target: n.Target, Xattrs: map[string]string{}}
	if n.Type == fs.TypeRegular {
		e.Data = bytes.Clone(n.Data)
	}
	for k, v := range n.Xattrs {
		e.Xattrs[k] = string(v)
	}
	names := slices.Sorted(maps.Keys(n.Entries))
	inos := make([]fs.Ino, len(names))
	for i, name := range names {
		inos[i] = n.Entries[name]
	}
	return e, names, inos, nil
}

// Snapshot returns the model's tree.
func (m *Model) Snapshot() Snapshot {
	s, err := Walk(modelWalker{m})
	if err != nil {
		panic(err) // the model is inconsistent: a bug in the model
	}
	return s
}

// Check verifies the model's own invariants (link counts, parents) and
// returns the problems found.
func (m *Model) Check() []string {
	var probs []string
	links := map[fs.Ino]uint32{}
	subdirs := map[fs.Ino]uint32{}
	for ino, n := range m.Nodes {
		for _, c := range n.Entries {
			links[c]++
			if cn := m.Nodes[c]; cn == nil {
				probs = append(probs, fmt.Sprintf("dir %d: entry to missing %d", ino, c))
			} else if cn.Type == fs.TypeDirectory {
				subdirs[ino]++
				if cn.Parent != ino {
					probs = append(probs, fmt.Sprintf("dir %d: parent %d, found in %d", c, cn.Parent, ino))
				}
			}
		}
	}
	for ino, n := range m.Nodes {
		want := links[ino]
		if n.Type == fs.TypeDirectory {
			want = 2 + subdirs[ino]
		}
		if n.Nlink != want && !(n.Nlink == 0 && m.Pins[ino] > 0) {
			probs = append(probs, fmt.Sprintf("inode %d: nlink %d, want %d", ino, n.Nlink, want))
		}
	}
	sort.Strings(probs)
	return probs
}

// Equal reports whether two entries are the same.
func (e Entry) Equal(o Entry) bool {
	return e.Path == o.Path && e.Type == o.Type && e.Mode == o.Mode && e.Uid == o.Uid && e.Gid == o.Gid &&
		e.Rdev == o.Rdev && e.Nlink == o.Nlink && e.Size == o.Size && bytes.Equal(e.Data, o.Data) &&
		e.Target == o.Target && maps.Equal(e.Xattrs, o.Xattrs) && e.Link == o.Link
}

func (e Entry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v mode=%o uid=%d gid=%d nlink=%d size=%d link=#%d", e.Path, e.Type, e.Mode, e.Uid, e.Gid,
		e.Nlink, e.Size, e.Link)
	if e.Rdev != 0 {
		fmt.Fprintf(&b, " rdev=%d", e.Rdev)
	}
	if e.Type == fs.TypeRegular {
		fmt.Fprintf(&b, " data=%s", abbrev(e.Data))
	}
	if e.Target != "" {
		fmt.Fprintf(&b, " -> %q", e.Target)
	}
	if len(e.Xattrs) > 0 {
		fmt.Fprintf(&b, " xattrs=%v", e.Xattrs)
	}
	return b.String()
}

// abbrev prints data compactly: runs of one byte as byte*count.
func abbrev(d []byte) string {
	var parts []string
	for i := 0; i < len(d); {
		j := i
		for j < len(d) && d[j] == d[i] {
			j++
		}
		if j-i > 3 {
			parts = append(parts, fmt.Sprintf("%02x*%d", d[i], j-i))
		} else {
			parts = append(parts, fmt.Sprintf("%x", d[i:j]))
		}
		i = j
		if len(parts) > 16 {
			parts = append(parts, "...")
			break
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Diff describes the differences between want and got, or returns "" if
// they are equal.
func Diff(want, got Snapshot) string {
	wm := map[string]Entry{}
	for _, e := range want {
		wm[e.Path] = e
	}
	gm := map[string]Entry{}
	for _, e := range got {
		gm[e.Path] = e
	}
	var out []string
	for _, e := range want {
		g, ok := gm[e.Path]
		switch {
		case !ok:
			out = append(out, "missing: "+e.String())
		case !e.Equal(g):
			out = append(out, "want: "+e.String(), " got: "+g.String())
		}
	}
	for _, g := range got {
		if _, ok := wm[g.Path]; !ok {
			out = append(out, "extra:   "+g.String())
		}
	}
	return strings.Join(out, "\n")
}
