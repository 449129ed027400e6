package vtools

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/txnfs/txnfs/vnfs"
)

// TarOptions configure Tar.
type TarOptions struct {
	// Archive is where the archive goes: a local path, an nfs:// URL or
	// "-" for Stdout.
	Archive string
	// Dir is the directory the Paths are relative to (tar -C); empty
	// means each path's parent, so that the archive holds its last
	// component (tar -C parent base). Absolute Paths and URLs ignore
	// it and are archived by their last component.
	Dir string
}

// tarBudget bounds the file data read by one VRead.
const tarBudget = 32 << 20

// Tar writes a tar archive (POSIX ustar, PAX when needed, readable by
// GNU tar and bsdtar) of paths. Each tree is listed with one recursive
// VListDir; file contents are read with VRead vectors of up to 32 MiB and
// symlink targets with one VReadlink. Hard links are archived as links.
func Tar(ctx context.Context, env *Env, paths []string, o TarOptions) (err error) {
	out, closeOut, err := openArchiveWriter(ctx, env, o.Archive)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := closeOut(); err == nil {
			err = cerr
		}
	}()
	self, err := archiveIdentity(ctx, env, o.Archive, out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	names := &idNames{users: map[uint32]string{}, groups: map[uint32]string{}}
	inodes := map[uint64]string{}
	for _, a := range paths {
		arg := a
		// -C applies to relative PATHs only, as in GNU tar.
		relative := o.Dir != "" && !path.IsAbs(a) && !vnfs.IsNFS(a)
		if relative {
			if vnfs.IsNFS(o.Dir) {
				arg = strings.TrimSuffix(o.Dir, "/") + "/" + a
			} else {
				arg = path.Join(o.Dir, a)
			}
		}
		t, err := env.Mounts.Resolve(ctx, arg)
		if err != nil {
			return err
		}
		prefix := path.Base(t.Path) // the name given, also for "link/"
		if t, err = slashDir(ctx, t, true); err != nil {
			return err
		}
		if relative {
			prefix = path.Clean(a)
		}
		ents, err := walk(ctx, t, vnfs.AttrStat, true)
		if err != nil {
			return err
		}
		ents = self.drop(env, t, ents)
		if err := tarTree(ctx, env, tw, t, prefix, ents, names, inodes); err != nil {
			return err
		}
	}
	return tw.Close()
}

func tarTree(ctx context.Context, env *Env, tw *tar.Writer, t vnfs.Target, prefix string, ents []entry, names *idNames, inodes map[uint64]string) error {
	p := env.progress("tar", len(ents))
	var arena []byte
	// Headers are written in entry order; file contents are fetched a
	// batch ahead.
	for start := 0; start < len(ents); {
		// The batch: entries up to tarBudget bytes of regular files.
		end, bytes := start, 0
		var ios []vnfs.IO
		var idx []int
		for end < len(ents) {
			e := ents[end]
			if e.attr.Type == vnfs.TypeRegular && !isLink(e, inodes, prefix) {
				if bytes > 0 && bytes+int(e.attr.Size) > tarBudget {
					break
				}
				if e.attr.Size <= tarBudget {
					ios = append(ios, vnfs.IO{File: vnfs.P(path.Join(t.Path, e.rel))})
					idx = append(idx, end)
				}
				bytes += int(e.attr.Size)
			}
			end++
		}
		// The batch's contents share one buffer, reused by the next
		// batch (its data is written out before).
		need := 0
		for _, i := range idx {
			need += int(ents[i].attr.Size)
		}
		if cap(arena) < need {
			arena = make([]byte, need)
		}
		off := 0
		for j, i := range idx {
			n := int(ents[i].attr.Size)
			ios[j].Data = arena[off : off+n : off+n]
			off += n
		}
		if len(ios) > 0 {
			if _, err := t.FS.VRead(ctx, ios); err != nil {
				return wrap(t, err)
			}
		}
		data := map[int][]byte{}
		for j, i := range idx {
			if ios[j].N != len(ios[j].Data) {
				return &pathError{path: display(t, ios[j].File.Path), err: fmt.Errorf("file shrank while being archived")}
			}
			data[i] = ios[j].Data
		}
		for i := start; i < end; i++ {
			e := ents[i]
			h, err := tarHeader(e, prefix, names, inodes)
			if err != nil {
				fmt.Fprintf(env.Stderr, "tar: %s: %v\n", display(t, path.Join(t.Path, e.rel)), err)
				continue
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag == tar.TypeReg && h.Size > 0 {
				if d, ok := data[i]; ok {
					if _, err := tw.Write(d); err != nil {
						return err
					}
				} else if err := streamFile(ctx, t, path.Join(t.Path, e.rel), h.Size, tw); err != nil {
					return err
				}
			}
			p.add(1, h.Size)
		}
		start = end
	}
	p.done()
	return nil
}

// isLink reports whether e is a second name of an archived inode (without
// recording it).
func isLink(e entry, inodes map[uint64]string, prefix string) bool {
	if e.attr.Nlink < 2 {
		return false
	}
	_, ok := inodes[e.attr.Ino]
	return ok
}

// streamFile copies a large file into w in tarBudget pieces.
func streamFile(ctx context.Context, t vnfs.Target, p string, size int64, w io.Writer) error {
	buf := make([]byte, min(size, tarBudget))
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		ios := []vnfs.IO{{File: vnfs.P(p), Offset: uint64(off), Data: buf[:n]}}
		if _, err := t.FS.VRead(ctx, ios); err != nil {
			return wrap(t, err)
		}
		if int64(ios[0].N) != n {
			return &pathError{path: display(t, p), err: fmt.Errorf("file shrank while being archived")}
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

func tarHeader(e entry, prefix string, names *idNames, inodes map[uint64]string) (*tar.Header, error) {
	a := e.attr
	// Member names are relative, as GNU tar makes them ("Removing
	// leading '/'"): the archive of a server's root or of an absolute
	// PATH with -C holds no absolute names.
	name := strings.TrimLeft(path.Join(prefix, e.rel), "/")
	if name == "" {
		name = "."
	}
	h := &tar.Header{
		Name: name, Mode: int64(a.Mode & 0o7777), Uid: int(a.Uid), Gid: int(a.Gid),
		Uname: names.user(a.Uid), Gname: names.group(a.Gid), ModTime: a.Mtime,
	}
	switch a.Type {
	case vnfs.TypeDir:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case vnfs.TypeRegular:
		if a.Nlink > 1 {
			if first, ok := inodes[a.Ino]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return h, nil
			}
			inodes[a.Ino] = name
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(a.Size)
	case vnfs.TypeSymlink:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
	case vnfs.TypeFIFO:
		h.Typeflag = tar.TypeFifo
	case vnfs.TypeChar, vnfs.TypeBlock:
		h.Typeflag = tar.TypeChar
		if a.Type == vnfs.TypeBlock {
			h.Typeflag = tar.TypeBlock
		}
		h.Devmajor, h.Devminor = int64(a.Rdev[0]), int64(a.Rdev[1])
	default:
		return nil, fmt.Errorf("socket ignored")
	}
	return h, nil
}

type idNames struct {
	users, groups map[uint32]string
}

func (n *idNames) user(id uint32) string {
	if s, ok := n.users[id]; ok {
		return s
	}
	s := ""
	if u, err := user.LookupId(strconv.Itoa(int(id))); err == nil {
		s = u.Username
	}
	n.users[id] = s
	return s
}

func (n *idNames) group(id uint32) string {
	if s, ok := n.groups[id]; ok {
		return s
	}
	s := ""
	if g, err := user.LookupGroupId(strconv.Itoa(int(id))); err == nil {
		s = g.Name
	}
	n.groups[id] = s
	return s
}

// UntarOptions configure Untar.
type UntarOptions struct {
	// Archive is a local path, an nfs:// URL or "-" for stdin.
	Archive string
	// Dir is where to extract (tar -C); default ".".
	Dir string
	// Stdin is read when Archive is "-".
	Stdin io.Reader
}

// Untar extracts a tar archive. Entries are applied in batches: one
// VMkdir for the batch's directories, one VWrite for its files, one
// VSymlink and one VHardlink; modes, owners (as root) and times are set at
// the end with one VSetAttrs, directories last.
func Untar(ctx context.Context, env *Env, o UntarOptions) error {
	in, closeIn, err := openArchiveReader(ctx, env, o)
	if err != nil {
		return err
	}
	defer closeIn()
	dir := o.Dir
	if dir == "" {
		dir = "."
	}
	t, err := env.Mounts.Resolve(ctx, dir)
	if err != nil {
		return err
	}
	// Like GNU tar -C, the directory must exist: a mistyped one is not
	// created (with the whole archive below it).
	t.Slash = true
	if t, err = slashDir(ctx, t, true); err != nil {
		return err
	}
	if _, err := vnfs.Stat(ctx, t.FS, t.Path); err != nil {
		return wrap(t, err)
	}
	x := &extractor{ctx: ctx, env: env, t: t, root: os.Geteuid() == 0, p: env.progress("untar", 0), symlinks: map[string]bool{}}
	name := o.Archive
	if name == "" || name == "-" {
		name = "standard input"
	}
	tr := tar.NewReader(in)
	// A damaged archive (truncated, a bad header) ends the extraction
	// like GNU tar's: the members read before it are extracted, then
	// the error is returned.
	var bad error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			bad = fmt.Errorf("%s: %w", name, err)
			break
		}
		if err := x.add(h, tr); err != nil {
			if errors.Is(err, errArchive) {
				bad = fmt.Errorf("%s: %s: %w", name, h.Name, err)
				break
			}
			return err
		}
	}
	if err := x.flush(); err != nil {
		return err
	}
	x.p.done()
	if err := x.finish(); err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	if x.skipped > 0 {
		if x.skipped == 1 {
			return errors.New("1 archive member not extracted (see above)")
		}
		return fmt.Errorf("%d archive members not extracted (see above)", x.skipped)
	}
	return nil
}

// errArchive marks a failure to read the archive itself.
var errArchive = errors.New("damaged archive")

type extractor struct {
	ctx  context.Context
	env  *Env
	t    vnfs.Target
	root bool
	p    *progress

	mk      []vnfs.MkdirItem
	files   []vnfs.IO
	links   []vnfs.SymlinkItem
	hard    []vnfs.LinkItem
	pending int

	fileAttrs, dirAttrs []vnfs.AttrItem

	// symlinks holds the symbolic links this archive created (relative
	// to the destination): no member is extracted through one.
	symlinks map[string]bool
	// skipped counts the members not extracted (the exit status).
	skipped int
}

// skip reports a member that is not extracted.
func (x *extractor) skip(format string, args ...any) {
	fmt.Fprintf(x.env.Stderr, "untar: "+format+"\n", args...)
	x.skipped++
}

// viaSymlink returns the symbolic link created by this archive that p
// (a destination path) lies below, or "". Like GNU tar, untar refuses to
// follow them: an archive holding "evil -> /etc" and then "evil/passwd"
// would otherwise write outside the destination.
func (x *extractor) viaSymlink(p string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(p, x.t.Path), "/")
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && x.symlinks[rel[:i]] {
			return rel[:i]
		}
	}
	return ""
}

// clean returns the destination path of an archive name, refusing names
// that would escape the destination.
func (x *extractor) clean(name string) (string, error) {
	n := strings.TrimLeft(name, "/")
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", fmt.Errorf("%s: refusing a path with '..'", name)
		}
	}
	n = path.Clean(n)
	if n == "." {
		return "", nil
	}
	return path.Join(x.t.Path, n), nil
}

func (x *extractor) add(h *tar.Header, r io.Reader) error {
	p, err := x.clean(h.Name)
	if err != nil {
		x.skip("%v", err)
		return nil
	}
	if p == "" {
		return nil
	}
	if l := x.viaSymlink(p); l != "" {
		x.skip("%s: refusing to extract through the symbolic link %s of the archive", h.Name, l)
		return nil
	}
	attr := vnfs.AttrItem{File: vnfs.P(p), Mask: vnfs.AttrMode | vnfs.AttrMtime | vnfs.AttrAtime,
		Attr: vnfs.Attr{Mode: uint32(h.Mode) & 0o7777, Mtime: h.ModTime, Atime: h.ModTime}}
	if !h.AccessTime.IsZero() {
		attr.Attr.Atime = h.AccessTime
	}
	if x.root {
		attr.Mask |= vnfs.AttrUid | vnfs.AttrGid
		attr.Attr.Uid, attr.Attr.Gid = uint32(h.Uid), uint32(h.Gid)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		x.mk = append(x.mk, vnfs.MkdirItem{Path: p, Mode: 0o700 | uint32(h.Mode)&0o777})
		x.dirAttrs = append(x.dirAttrs, attr)
	case tar.TypeReg, tar.TypeRegA:
		if h.Size > tarBudget {
			if err := x.flush(); err != nil {
				return err
			}
			if err := x.bigFile(p, h, r); err != nil {
				return err
			}
		} else {
			data, err := io.ReadAll(r)
			if err != nil {
				return fmt.Errorf("%w: %v", errArchive, err)
			}
			x.files = append(x.files, vnfs.IO{File: vnfs.P(p), Data: data, Flags: vnfs.Create | vnfs.Truncate | vnfs.Stable, Mode: 0o600})
			x.pending += len(data)
		}
		x.fileAttrs = append(x.fileAttrs, attr)
	case tar.TypeSymlink:
		x.links = append(x.links, vnfs.SymlinkItem{Path: p, Target: h.Linkname})
		x.symlinks[strings.TrimPrefix(strings.TrimPrefix(p, x.t.Path), "/")] = true
		attr.Mask &^= vnfs.AttrMode
		x.fileAttrs = append(x.fileAttrs, attr)
	case tar.TypeLink:
		target, err := x.clean(h.Linkname)
		if err != nil || target == "" {
			x.skip("%s: bad hard link target %q", h.Name, h.Linkname)
			return nil
		}
		if l := x.viaSymlink(target); l != "" {
			x.skip("%s: refusing a hard link through the symbolic link %s of the archive", h.Name, l)
			return nil
		}
		x.hard = append(x.hard, vnfs.LinkItem{Old: target, New: p})
	case tar.TypeXGlobalHeader:
		return nil
	default:
		x.skip("%s: cannot extract a member of type %s", h.Name, tarType(h.Typeflag))
		return nil
	}
	if x.pending > tarBudget || len(x.mk)+len(x.files)+len(x.links)+len(x.hard) >= batchFiles {
		return x.flush()
	}
	return nil
}

func (x *extractor) bigFile(p string, h *tar.Header, r io.Reader) error {
	buf := make([]byte, tarBudget)
	for off := int64(0); off < h.Size; {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), h.Size-off)])
		if err != nil {
			return fmt.Errorf("%w: %v", errArchive, err)
		}
		flags := vnfs.Stable
		if off == 0 {
			flags |= vnfs.Create | vnfs.Truncate
		}
		if _, err := x.t.FS.VWrite(x.ctx, []vnfs.IO{{File: vnfs.P(p), Offset: uint64(off), Data: buf[:n], Flags: flags, Mode: 0o600}}); err != nil {
			return wrap(x.t, err)
		}
		off += int64(n)
		x.p.add(0, int64(n))
	}
	x.p.add(1, 0)
	return nil
}

// flush applies the pending batch: directories, files, symlinks, links.
func (x *extractor) flush() error {
	fs_ := x.t.FS
	if len(x.mk) > 0 {
		// Existing directories are fine (an archive may repeat one, or
		// the destination may hold it already).
		for items := x.mk; len(items) > 0; {
			k, err := fs_.VMkdir(x.ctx, items)
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrExist) {
				return wrap(x.t, err)
			}
			a, serr := vnfs.Stat(x.ctx, fs_, items[k].Path)
			if serr != nil || a.Type != vnfs.TypeDir {
				return wrap(x.t, err)
			}
			items = items[k+1:]
		}
	}
	if len(x.files) > 0 {
		// Files are independent: pipelined, in any order.
		if _, err := vnfs.Unordered(fs_).VWrite(x.ctx, x.files); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// A file whose directory the archive does not list.
				if err := x.parents(); err != nil {
					return err
				}
				_, err = vnfs.Unordered(fs_).VWrite(x.ctx, x.files)
			}
			if err != nil {
				return wrap(x.t, err)
			}
		}
	}
	if len(x.links) > 0 {
		if _, err := fs_.VSymlink(x.ctx, x.links); err != nil {
			return wrap(x.t, err)
		}
	}
	if len(x.hard) > 0 {
		if k, err := fs_.VHardlink(x.ctx, x.hard); err != nil {
			if k < len(x.hard) {
				// Name both: a missing target is the usual cause.
				l := x.hard[k]
				return fmt.Errorf("%s: cannot hard link to %s: %s", display(x.t, l.New), display(x.t, l.Old), Reason(err))
			}
			return wrap(x.t, err)
		}
	}
	x.p.add(len(x.mk)+len(x.files)+len(x.links)+len(x.hard), int64(x.pending))
	x.mk, x.files, x.links, x.hard, x.pending = x.mk[:0], x.files[:0], x.links[:0], x.hard[:0], 0
	return nil
}

// parents creates the missing parent directories of pending files.
func (x *extractor) parents() error {
	seen := map[string]bool{}
	for _, f := range x.files {
		d := path.Dir(f.File.Path)
		if !seen[d] {
			seen[d] = true
			if err := vnfs.EnsureDirectory(x.ctx, x.t.FS, d, 0o755); err != nil {
				return wrap(x.t, err)
			}
		}
	}
	return nil
}

// finish sets attributes: files and links first, then directories
// deepest first.
func (x *extractor) finish() error {
	attrs := x.fileAttrs
	for i := len(x.dirAttrs) - 1; i >= 0; i-- {
		attrs = append(attrs, x.dirAttrs[i])
	}
	if len(attrs) == 0 {
		return nil
	}
	if _, err := vnfs.Unordered(x.t.FS).VSetAttrs(x.ctx, attrs); err != nil {
		if x.t.Server == "" && errors.Is(err, syscall.EPERM) {
			return nil
		}
		return wrap(x.t, err)
	}
	return nil
}

// tarType names a member type for messages.
func tarType(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "FIFO"
	case tar.TypeCont:
		return "contiguous file"
	case tar.TypeGNUSparse:
		return "GNU sparse file"
	}
	return fmt.Sprintf("%q", t)
}

// archive identifies the archive being written, so that a tree holding
// it does not archive it (GNU tar: "file is the archive; not dumped").
type archive struct {
	server string
	ino    uint64
	fi     os.FileInfo // local archives: the device too
	ok     bool
}

func archiveIdentity(ctx context.Context, env *Env, a string, out io.Writer) (archive, error) {
	switch {
	case a == "" || a == "-":
		return archive{}, nil
	case vnfs.IsNFS(a):
		w, ok := out.(*nfsWriter)
		if !ok {
			return archive{}, nil
		}
		if err := w.flush(); err != nil { // creates it
			return archive{}, err
		}
		at, err := vnfs.Stat(ctx, w.t.FS, w.t.Path)
		if err != nil {
			return archive{}, wrap(w.t, err)
		}
		return archive{server: w.t.Server, ino: at.Ino, ok: true}, nil
	default:
		fi, err := os.Stat(a)
		if err != nil {
			return archive{}, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return archive{}, nil
		}
		return archive{ino: uint64(st.Ino), fi: fi, ok: true}, nil
	}
}

// drop removes the archive from a listed tree, with a note.
func (self archive) drop(env *Env, t vnfs.Target, ents []entry) []entry {
	if !self.ok || t.Server != self.server {
		return ents
	}
	out := ents[:0]
	for _, e := range ents {
		if e.attr.Type == vnfs.TypeRegular && e.attr.Ino == self.ino {
			p := path.Join(t.Path, e.rel)
			same := true
			if self.fi != nil {
				fi, err := os.Lstat(p)
				same = err == nil && os.SameFile(fi, self.fi)
			}
			if same {
				fmt.Fprintf(env.Stderr, "tar: %s: file is the archive; not dumped\n", display(t, p))
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// openArchiveWriter opens the archive for writing.
func openArchiveWriter(ctx context.Context, env *Env, a string) (io.Writer, func() error, error) {
	switch {
	case a == "" || a == "-":
		return env.Stdout, func() error { return nil }, nil
	case vnfs.IsNFS(a):
		t, err := env.Mounts.Resolve(ctx, a)
		if err != nil {
			return nil, nil, err
		}
		w := &nfsWriter{ctx: ctx, t: t, buf: make([]byte, 0, 4<<20)}
		return w, w.Close, nil
	default:
		f, err := os.Create(a)
		if err != nil {
			return nil, nil, err
		}
		// Buffered like tar's records (GNU tar writes 10 KiB blocks):
		// archive/tar writes each header, file body and padding
		// separately, three system calls per file unbuffered.
		w := bufio.NewWriterSize(f, 1<<20)
		return w, func() error {
			err := w.Flush()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}, nil
	}
}

// openArchiveReader opens the archive for reading.
func openArchiveReader(ctx context.Context, env *Env, o UntarOptions) (io.Reader, func() error, error) {
	switch {
	case o.Archive == "" || o.Archive == "-":
		if o.Stdin == nil {
			return os.Stdin, func() error { return nil }, nil
		}
		return o.Stdin, func() error { return nil }, nil
	case vnfs.IsNFS(o.Archive):
		t, err := env.Mounts.Resolve(ctx, o.Archive)
		if err != nil {
			return nil, nil, err
		}
		return &nfsReader{ctx: ctx, t: t}, func() error { return nil }, nil
	default:
		f, err := os.Open(o.Archive)
		if err != nil {
			return nil, nil, err
		}
		return f, f.Close, nil
	}
}

// nfsWriter writes a stream to an NFS file in 4 MiB vectors (four 1 MiB
// WRITEs per VWrite, split into COMPOUNDs by vnfs).
type nfsWriter struct {
	ctx     context.Context
	t       vnfs.Target
	buf     []byte
	off     uint64
	started bool
}

func (w *nfsWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		c := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:c]...)
		p = p[c:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *nfsWriter) flush() error {
	flags := vnfs.Stable
	if !w.started {
		flags |= vnfs.Create | vnfs.Truncate
	}
	if _, err := w.t.FS.VWrite(w.ctx, []vnfs.IO{{File: vnfs.P(w.t.Path), Offset: w.off, Data: w.buf, Flags: flags}}); err != nil {
		return wrap(w.t, err)
	}
	w.started = true
	w.off += uint64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

func (w *nfsWriter) Close() error {
	if len(w.buf) > 0 || !w.started {
		return w.flush()
	}
	return nil
}

// nfsReader reads an NFS file sequentially in 4 MiB vectors.
type nfsReader struct {
	ctx  context.Context
	t    vnfs.Target
	buf  []byte
	pos  int
	off  uint64
	eof  bool
	last time.Time
}

func (r *nfsReader) Read(p []byte) (int, error) {
	if r.pos == len(r.buf) {
		if r.eof {
			return 0, io.EOF
		}
		if r.buf == nil {
			r.buf = make([]byte, 4<<20)
		}
		ios := []vnfs.IO{{File: vnfs.P(r.t.Path), Offset: r.off, Data: r.buf[:cap(r.buf)]}}
		if _, err := r.t.FS.VRead(r.ctx, ios); err != nil {
			return 0, wrap(r.t, err)
		}
		r.buf, r.pos = r.buf[:ios[0].N], 0
		r.off += uint64(ios[0].N)
		r.eof = ios[0].EOF || ios[0].N == 0
		if ios[0].N == 0 {
			return 0, io.EOF
		}
	}
	n := copy(p, r.buf[r.pos:])
	r.pos += n
	return n, nil
}
