package vnfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Local returns the FS of the local directory root, implemented with
// ordinary system calls (the vNFS library's POSIX fallback): the same
// program works on local paths and on NFS. Vector calls run item by item
// and stop at the first failure.
func Local(root string) FS {
	return &localFS{root: root, fds: map[FD]*os.File{}}
}

type localFS struct {
	root string
	mu   sync.Mutex
	fds  map[FD]*os.File
	next FD
}

var _ FS = (*localFS)(nil)

func (l *localFS) abs(p string) (string, error) {
	c, err := cleanPath(p)
	if err != nil {
		return "", err
	}
	return filepath.Join(l.root, filepath.FromSlash(c)), nil
}

// each runs fn for items 0..n-1, stopping at the first error.
func each(ctx context.Context, op string, n int, name func(int) string, fn func(i int) error) (int, error) {
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return i, &Error{Op: op, Index: i, Path: name(i), Err: err}
		}
		if err := fn(i); err != nil {
			var ve *Error
			if errors.As(err, &ve) {
				// fn named another path (a copy's unreadable source).
				ve.Index = i
				return i, ve
			}
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			var le *os.LinkError
			if errors.As(err, &le) {
				err = le.Err
			}
			return i, &Error{Op: op, Index: i, Path: name(i), Err: err}
		}
	}
	return n, nil
}

func (l *localFS) file(f File, flag int, perm os.FileMode) (*os.File, bool, error) {
	if f.FD != 0 {
		l.mu.Lock()
		h, ok := l.fds[f.FD]
		l.mu.Unlock()
		if !ok {
			return nil, false, ErrBadFD
		}
		return h, false, nil
	}
	p, err := l.abs(f.Path)
	if err != nil {
		return nil, false, err
	}
	h, err := os.OpenFile(p, flag|syscall.O_NOFOLLOW, perm)
	return h, true, err
}

// VOpen implements FS.
func (l *localFS) VOpen(ctx context.Context, items []OpenItem) (int, error) {
	return each(ctx, "open", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		it := &items[i]
		flag := os.O_RDONLY
		switch {
		case it.Flags&OpenRead != 0 && it.Flags&OpenWrite != 0:
			flag = os.O_RDWR
		case it.Flags&OpenWrite != 0:
			flag = os.O_WRONLY
		}
		if it.Flags&OpenCreate != 0 {
			flag |= os.O_CREATE
		}
		if it.Flags&OpenExclusive != 0 {
			flag |= os.O_EXCL
		}
		if it.Flags&OpenTruncate != 0 {
			flag |= os.O_TRUNC
		}
		h, _, err := l.file(P(it.Path), flag, perm(it.Mode, 0o644))
		if err != nil {
			return err
		}
		l.mu.Lock()
		l.next++
		l.fds[l.next] = h
		it.FD = l.next
		l.mu.Unlock()
		return nil
	})
}

func perm(m, def uint32) os.FileMode {
	if m == 0 {
		m = def
	}
	return os.FileMode(m & 0o777)
}

// VClose implements FS.
func (l *localFS) VClose(ctx context.Context, fds []FD) (int, error) {
	return each(ctx, "close", len(fds), func(i int) string { return D(fds[i]).String() }, func(i int) error {
		l.mu.Lock()
		h, ok := l.fds[fds[i]]
		delete(l.fds, fds[i])
		l.mu.Unlock()
		if !ok {
			return ErrBadFD
		}
		return h.Close()
	})
}

// VRead implements FS.
func (l *localFS) VRead(ctx context.Context, ios []IO) (int, error) {
	return each(ctx, "read", len(ios), ioNames(ios), func(i int) error {
		io_ := &ios[i]
		io_.N, io_.EOF = 0, false
		h, own, err := l.file(io_.File, os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		if own {
			defer h.Close()
		}
		n, err := h.ReadAt(io_.Data, int64(io_.Offset))
		io_.N = n
		if err == io.EOF {
			io_.EOF, err = true, nil
		}
		if err == nil && n == len(io_.Data) && own {
			// Tell EOF like an NFS READ reaching the end does.
			if fi, e := h.Stat(); e == nil && io_.Offset+uint64(n) >= uint64(fi.Size()) {
				io_.EOF = true
			}
		}
		return err
	})
}

// VWrite implements FS.
func (l *localFS) VWrite(ctx context.Context, ios []IO) (int, error) {
	return each(ctx, "write", len(ios), ioNames(ios), func(i int) error {
		io_ := &ios[i]
		io_.N = 0
		flag := os.O_WRONLY
		if io_.Flags&Create != 0 {
			flag |= os.O_CREATE
		}
		if io_.Flags&Exclusive != 0 {
			flag |= os.O_EXCL
		}
		if io_.Flags&Truncate != 0 {
			flag |= os.O_TRUNC
		}
		if io_.Offset == AppendOffset {
			flag |= os.O_APPEND
		}
		h, own, err := l.file(io_.File, flag, perm(io_.Mode, 0o644))
		if err != nil {
			return err
		}
		if own {
			defer h.Close()
		} else if io_.Flags&Truncate != 0 {
			if err := h.Truncate(0); err != nil {
				return err
			}
		}
		var n int
		if io_.Offset == AppendOffset {
			if !own {
				// A descriptor opened without O_APPEND: append at the size.
				var fi os.FileInfo
				if fi, err = h.Stat(); err == nil {
					n, err = h.WriteAt(io_.Data, fi.Size())
				}
			} else {
				n, err = h.Write(io_.Data)
			}
		} else {
			n, err = h.WriteAt(io_.Data, int64(io_.Offset))
		}
		io_.N = n
		if err == nil && io_.Flags&Stable != 0 {
			err = h.Sync()
		}
		return err
	})
}

func localAttr(fi os.FileInfo) Attr {
	st, _ := fi.Sys().(*syscall.Stat_t)
	var a Attr
	switch fi.Mode().Type() {
	case 0:
		a.Type = TypeRegular
	case os.ModeDir:
		a.Type = TypeDir
	case os.ModeSymlink:
		a.Type = TypeSymlink
	case os.ModeDevice:
		a.Type = TypeBlock
	case os.ModeDevice | os.ModeCharDevice:
		a.Type = TypeChar
	case os.ModeNamedPipe:
		a.Type = TypeFIFO
	case os.ModeSocket:
		a.Type = TypeSocket
	}
	a.Size = uint64(fi.Size())
	a.Mtime = fi.ModTime()
	if st != nil {
		a.Mode = uint32(st.Mode) & 0o7777
		a.Nlink = uint32(st.Nlink)
		a.Uid, a.Gid = st.Uid, st.Gid
		a.Ino = st.Ino
		a.Space = uint64(st.Blocks) * 512
		a.Rdev = [2]uint32{unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))}
		a.Atime, a.Ctime = statTimes(st)
	}
	return a
}

// VGetAttrs implements FS.
func (l *localFS) VGetAttrs(ctx context.Context, items []AttrItem) (int, error) {
	return each(ctx, "getattr", len(items), func(i int) string { return items[i].File.String() }, func(i int) error {
		it := &items[i]
		var fi os.FileInfo
		var err error
		if it.File.FD != 0 {
			h, _, e := l.file(it.File, 0, 0)
			if e != nil {
				return e
			}
			fi, err = h.Stat()
		} else {
			var p string
			if p, err = l.abs(it.File.Path); err == nil {
				fi, err = os.Lstat(p)
			}
		}
		if err != nil {
			return err
		}
		it.Attr = localAttr(fi)
		return nil
	})
}

// VSetAttrs implements FS.
func (l *localFS) VSetAttrs(ctx context.Context, items []AttrItem) (int, error) {
	return each(ctx, "setattr", len(items), func(i int) string { return items[i].File.String() }, func(i int) error {
		it := &items[i]
		if it.Mask&^attrSettable != 0 {
			return syscall.EINVAL
		}
		p := ""
		if it.File.FD != 0 {
			h, _, err := l.file(it.File, 0, 0)
			if err != nil {
				return err
			}
			p = h.Name()
		} else {
			var err error
			if p, err = l.abs(it.File.Path); err != nil {
				return err
			}
		}
		a := &it.Attr
		if it.Mask&(AttrUid|AttrGid) != 0 {
			uid, gid := -1, -1
			if it.Mask&AttrUid != 0 {
				uid = int(a.Uid)
			}
			if it.Mask&AttrGid != 0 {
				gid = int(a.Gid)
			}
			if err := os.Lchown(p, uid, gid); err != nil {
				return err
			}
		}
		if it.Mask&AttrMode != 0 {
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			if fi.Mode()&os.ModeSymlink == 0 { // Linux cannot chmod a symlink
				if err := unix.Fchmodat(unix.AT_FDCWD, p, a.Mode&0o7777, 0); err != nil {
					return err
				}
			}
		}
		if it.Mask&AttrSize != 0 {
			if err := os.Truncate(p, int64(a.Size)); err != nil {
				return err
			}
		}
		if it.Mask&(AttrAtime|AttrMtime) != 0 {
			ts := []unix.Timespec{{Nsec: utimeOmit}, {Nsec: utimeOmit}}
			set := func(k int, t time.Time) {
				if t.IsZero() {
					ts[k] = unix.Timespec{Nsec: utimeNow}
				} else {
					ts[k] = unix.NsecToTimespec(t.UnixNano())
				}
			}
			if it.Mask&AttrAtime != 0 {
				set(0, a.Atime)
			}
			if it.Mask&AttrMtime != 0 {
				set(1, a.Mtime)
			}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		return nil
	})
}

// VCopy implements FS (the kernel copies with copy_file_range).
func (l *localFS) VCopy(ctx context.Context, items []CopyItem) (int, error) {
	return l.copy(ctx, "copy", items, false)
}

// VSCopy implements FS (same as VCopy locally).
func (l *localFS) VSCopy(ctx context.Context, items []CopyItem) (int, error) {
	return l.copy(ctx, "scopy", items, false)
}

// VClone implements FS with FICLONERANGE (reflinks); file systems without
// it fail with ErrNotSupported.
func (l *localFS) VClone(ctx context.Context, items []CopyItem) (int, error) {
	return l.copy(ctx, "clone", items, true)
}

func (l *localFS) copy(ctx context.Context, op string, items []CopyItem, clone bool) (int, error) {
	return each(ctx, op, len(items), func(i int) string { return items[i].Dst.String() }, func(i int) error {
		it := &items[i]
		it.N = 0
		src, own, err := l.file(it.Src, os.O_RDONLY, 0)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return &Error{Op: "read", Path: it.Src.String(), Err: err}
		}
		if own {
			defer src.Close()
		}
		flag := os.O_WRONLY
		if it.Flags&Create != 0 {
			flag |= os.O_CREATE
		}
		if it.Flags&Exclusive != 0 {
			flag |= os.O_EXCL
		}
		if it.Flags&Truncate != 0 {
			flag |= os.O_TRUNC
		}
		dst, own2, err := l.file(it.Dst, flag, perm(it.Mode, 0o644))
		if err != nil {
			return err
		}
		if own2 {
			defer dst.Close()
		}
		n := it.Length
		if n == CopyToEnd {
			fi, err := src.Stat()
			if err != nil {
				return err
			}
			n = uint64(fi.Size()) - min(uint64(fi.Size()), it.SrcOffset)
		}
		if clone {
			if err := cloneRange(dst, src, it.SrcOffset, n, it.DstOffset); err != nil {
				if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
					return fmt.Errorf("%w (%v)", ErrNotSupported, err)
				}
				return err
			}
			it.N = n
			return nil
		}
		if _, err := dst.Seek(int64(it.DstOffset), io.SeekStart); err != nil {
			return err
		}
		c, err := io.Copy(dst, io.NewSectionReader(src, int64(it.SrcOffset), int64(n)))
		it.N = uint64(c)
		if err == nil && it.Flags&Stable != 0 {
			err = dst.Sync()
		}
		return err
	})
}

// VMkdir implements FS.
func (l *localFS) VMkdir(ctx context.Context, items []MkdirItem) (int, error) {
	return each(ctx, "mkdir", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		p, err := l.abs(items[i].Path)
		if err != nil {
			return err
		}
		return os.Mkdir(p, perm(items[i].Mode, 0o755)|os.FileMode(items[i].Mode)&(os.ModeSticky))
	})
}

// VListDir implements FS.
func (l *localFS) VListDir(ctx context.Context, dirs []string, opts ListOptions, fn func(DirEntry) error) error {
	type dir struct{ abs, shown string }
	level := make([]dir, len(dirs))
	for i, d := range dirs {
		p, err := l.abs(d)
		if err != nil {
			return &Error{Op: "listdir", Index: i, Path: d, Err: err}
		}
		level[i] = dir{p, d}
	}
	for depth := 0; len(level) > 0; depth++ {
		var next []dir
		for i, d := range level {
			if err := ctx.Err(); err != nil {
				return err
			}
			ents, err := os.ReadDir(d.abs)
			if err != nil {
				var pe *os.PathError
				if errors.As(err, &pe) {
					err = pe.Err
				}
				return &Error{Op: "listdir", Index: i, Path: d.shown, Err: err}
			}
			for _, e := range ents {
				de := DirEntry{Dir: d.shown, Name: e.Name(), Depth: depth}
				if opts.Mask&^AttrType != 0 {
					fi, err := e.Info()
					if err != nil {
						continue // removed meanwhile
					}
					de.Attr = localAttr(fi)
				} else {
					de.Attr.Type = localAttr(fakeInfo{e}).Type
				}
				if opts.Recursive && de.Attr.Type == TypeDir {
					next = append(next, dir{filepath.Join(d.abs, e.Name()), path.Join(d.shown, e.Name())})
				}
				if fn != nil {
					if err := fn(de); err != nil {
						return err
					}
				}
			}
		}
		level = next
	}
	return nil
}

// fakeInfo adapts a DirEntry's type for localAttr.
type fakeInfo struct{ e os.DirEntry }

func (f fakeInfo) Name() string       { return f.e.Name() }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() os.FileMode  { return f.e.Type() }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.e.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

// VSymlink implements FS.
func (l *localFS) VSymlink(ctx context.Context, items []SymlinkItem) (int, error) {
	return each(ctx, "symlink", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		p, err := l.abs(items[i].Path)
		if err != nil {
			return err
		}
		return os.Symlink(items[i].Target, p)
	})
}

// VReadlink implements FS.
func (l *localFS) VReadlink(ctx context.Context, items []ReadlinkItem) (int, error) {
	return each(ctx, "readlink", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		p, err := l.abs(items[i].Path)
		if err != nil {
			return err
		}
		items[i].Target, err = os.Readlink(p)
		return err
	})
}

// VHardlink implements FS.
func (l *localFS) VHardlink(ctx context.Context, items []LinkItem) (int, error) {
	return each(ctx, "link", len(items), func(i int) string { return items[i].New }, func(i int) error {
		o, err := l.abs(items[i].Old)
		if err != nil {
			return err
		}
		n, err := l.abs(items[i].New)
		if err != nil {
			return err
		}
		return os.Link(o, n)
	})
}

// VRemove implements FS.
func (l *localFS) VRemove(ctx context.Context, paths []string) (int, error) {
	return each(ctx, "remove", len(paths), func(i int) string { return paths[i] }, func(i int) error {
		p, err := l.abs(paths[i])
		if err != nil {
			return err
		}
		err = unix.Unlink(p)
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
			if e := unix.Rmdir(p); e == nil || !errors.Is(e, unix.ENOTDIR) {
				return e
			}
		}
		return err
	})
}

// VRename implements FS.
func (l *localFS) VRename(ctx context.Context, items []RenameItem) (int, error) {
	return each(ctx, "rename", len(items), func(i int) string { return items[i].Old }, func(i int) error {
		o, err := l.abs(items[i].Old)
		if err != nil {
			return err
		}
		n, err := l.abs(items[i].New)
		if err != nil {
			return err
		}
		return os.Rename(o, n)
	})
}

// Txn implements FS: local file systems have no transactions.
func (l *localFS) Txn() FS { return noTxn{l} }

// Close implements FS.
func (l *localFS) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for fd, h := range l.fds {
		h.Close()
		delete(l.fds, fd)
	}
	return nil
}

// noTxn is the Txn view of an FS without transactions: every call fails
// with ErrTxnUnsupported before doing anything.
type noTxn struct{ FS }

func (noTxn) fail(op string) error { return fmt.Errorf("vnfs: %s: %w", op, ErrTxnUnsupported) }

func (t noTxn) VOpen(context.Context, []OpenItem) (int, error)     { return 0, t.fail("open") }
func (t noTxn) VClose(context.Context, []FD) (int, error)          { return 0, t.fail("close") }
func (t noTxn) VRead(context.Context, []IO) (int, error)           { return 0, t.fail("read") }
func (t noTxn) VWrite(context.Context, []IO) (int, error)          { return 0, t.fail("write") }
func (t noTxn) VGetAttrs(context.Context, []AttrItem) (int, error) { return 0, t.fail("getattr") }
func (t noTxn) VSetAttrs(context.Context, []AttrItem) (int, error) { return 0, t.fail("setattr") }
func (t noTxn) VCopy(context.Context, []CopyItem) (int, error)     { return 0, t.fail("copy") }
func (t noTxn) VSCopy(context.Context, []CopyItem) (int, error)    { return 0, t.fail("scopy") }
func (t noTxn) VClone(context.Context, []CopyItem) (int, error)    { return 0, t.fail("clone") }
func (t noTxn) VMkdir(context.Context, []MkdirItem) (int, error)   { return 0, t.fail("mkdir") }
func (t noTxn) VListDir(context.Context, []string, ListOptions, func(DirEntry) error) error {
	return t.fail("listdir")
}
func (t noTxn) VSymlink(context.Context, []SymlinkItem) (int, error)   { return 0, t.fail("symlink") }
func (t noTxn) VReadlink(context.Context, []ReadlinkItem) (int, error) { return 0, t.fail("readlink") }
func (t noTxn) VHardlink(context.Context, []LinkItem) (int, error)     { return 0, t.fail("link") }
func (t noTxn) VRemove(context.Context, []string) (int, error)         { return 0, t.fail("remove") }
func (t noTxn) VRename(context.Context, []RenameItem) (int, error)     { return 0, t.fail("rename") }
func (t noTxn) Txn() FS                                                { return t }
func (t noTxn) Close() error                                           { return nil }
