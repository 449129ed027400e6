package vnfs

import (
	"context"
	"fmt"
	"path"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// fnTask is a task that emits all its operations at once.
type fnTask struct {
	dir string
	nav bool
	fn  func(b *batch, ti int)
}

func (t *fnTask) navDir() (string, bool) { return t.dir, t.nav }

func (t *fnTask) emit(b *batch, ti int) emitResult {
	m := b.mark()
	t.fn(b, ti)
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	return emitDone
}

// target resolves a File for a metadata operation: the task navigates to
// it (with cd + LOOKUP, or PUTFH for a descriptor).
type target struct {
	fd        *fdEntry
	p         string // cleaned path
	dir, name string
}

func (n *nfsFS) target(f File) (target, error) {
	if f.FD != 0 {
		e, ok := n.fd(f.FD)
		if !ok {
			return target{}, ErrBadFD
		}
		return target{fd: e, p: e.path}, nil
	}
	p, err := cleanPath(f.Path)
	if err != nil {
		return target{}, err
	}
	d, nm := splitPath(p)
	return target{p: p, dir: d, name: nm}, nil
}

func (t target) nav() (string, bool) {
	if t.fd != nil {
		return "", false
	}
	if t.p == "" {
		return "", true
	}
	return t.dir, true
}

// goTo makes the current file handle the target object.
func (b *batch) goTo(ti int, t target) {
	switch {
	case t.fd != nil:
		b.putFH(ti, t.fd.fh, t.fd.path)
	case t.p == "":
		b.cd(ti, "")
	case b.cur.valid && b.cur.path == t.p:
		// already there
	default:
		b.cd(ti, t.dir)
		b.keepDir(ti, t.dir)
		b.lookup(ti, t.name)
	}
}

// VGetAttrs implements FS.
func (n *nfsFS) VGetAttrs(ctx context.Context, items []AttrItem) (int, error) {
	return n.getattrs(ctx, items, n.txn)
}

func (n *nfsFS) getattrs(ctx context.Context, items []AttrItem, txn bool) (int, error) {
	tasks := make([]task, len(items))
	for i := range items {
		it := &items[i]
		tg, err := n.target(it.File)
		if err != nil {
			return 0, &Error{Op: "getattr", Index: i, Path: it.File.String(), Err: err}
		}
		mask := bitmap(it.Mask)
		d, ok := tg.nav()
		tasks[i] = &fnTask{dir: d, nav: ok, fn: func(b *batch, ti int) {
			b.goTo(ti, tg)
			b.cp.GetAttr(mask)
			b.track(ti, respAttr, func(res nfsv4.NfsResop4) error {
				a, err := getattrRes(res)
				if err != nil {
					return err
				}
				it.Attr = fromNFS(&a)
				return nil
			})
		}}
	}
	return n.run(ctx, runOpts{op: "getattr", names: func(i int) string { return items[i].File.String() }, txn: txn,
		readOnly: true, reset: func(i int) { items[i].Attr = Attr{} }}, tasks)
}

// VSetAttrs implements FS.
func (n *nfsFS) VSetAttrs(ctx context.Context, items []AttrItem) (int, error) {
	if n.sh.cache != nil {
		defer func() {
			for i := range items {
				n.dropFiles(items[i].File)
			}
		}()
	}
	tasks := make([]task, len(items))
	for i := range items {
		it := &items[i]
		tg, err := n.target(it.File)
		if err == nil && it.Mask&^attrSettable != 0 {
			err = fmt.Errorf("attributes %#x cannot be set: %w", it.Mask&^attrSettable, syscall.EINVAL)
		}
		if err != nil {
			return 0, &Error{Op: "setattr", Index: i, Path: it.File.String(), Err: err}
		}
		sa := setAttrs(it.Mask, &it.Attr)
		fattr := sa.Encode()
		d, ok := tg.nav()
		tasks[i] = &fnTask{dir: d, nav: ok, fn: func(b *batch, ti int) {
			switch {
			case tg.fd != nil:
				b.putFH(ti, tg.fd.fh, tg.fd.path)
				sid := tg.fd.sid
				sid.Seqid = 0
				b.cp.SetAttr(sid, fattr)
				b.track(ti, respSmall+16, nil)
			case sa.SetSize && tg.p != "":
				// A size change needs an open stateid.
				b.cd(ti, tg.dir)
				b.keepDir(ti, tg.dir)
				b.open(ti, tg.name, client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE}, b.openOwner(), nil)
				b.cp.SetAttr(client.CurrentStateid, fattr)
				b.track(ti, respSmall+16, nil)
				b.closeCur(ti)
			default:
				b.goTo(ti, tg)
				b.cp.SetAttr(client.AnonymousStateid, fattr)
				b.track(ti, respSmall+16, nil)
			}
		}}
	}
	return n.run(ctx, runOpts{op: "setattr", names: func(i int) string { return items[i].File.String() }, txn: n.txn}, tasks)
}

// pathTask builds a task on the parent directory of p.
func (n *nfsFS) parentOf(op string, i int, p string) (dir, name string, err error) {
	c, err := cleanPath(p)
	if err == nil && c == "" {
		err = syscall.EEXIST
		if op == "remove" || op == "rename" {
			err = syscall.EBUSY
		}
	}
	if err != nil {
		return "", "", &Error{Op: op, Index: i, Path: p, Err: err}
	}
	dir, name = splitPath(c)
	return dir, name, nil
}

// VMkdir implements FS.
func (n *nfsFS) VMkdir(ctx context.Context, items []MkdirItem) (int, error) {
	tasks := make([]task, len(items))
	for i := range items {
		dir, name, err := n.parentOf("mkdir", i, items[i].Path)
		if err != nil {
			return 0, err
		}
		attrs := modeAttrs(items[i].Mode, 0o755)
		dh := n.dirs()
		tasks[i] = &fnTask{dir: dir, nav: true, fn: func(b *batch, ti int) {
			b.cd(ti, dir)
			b.cp.Mkdir(name, attrs)
			b.track(ti, respCreate, nil)
			p := joinPath(dir, name)
			b.cur = pos{path: p, valid: true, dir: true}
			if dh != nil {
				// The new directory's handle, for the files that
				// will be created in it.
				b.cp.GetFH()
				b.track(ti, respFH, func(res nfsv4.NfsResop4) error {
					if ok, isOK := res.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK); isOK {
						dh.put(p, ok.Resok4.Object)
					}
					return nil
				})
			}
		}}
	}
	return n.run(ctx, runOpts{op: "mkdir", names: func(i int) string { return items[i].Path }, txn: n.txn, retryDelay: true}, tasks)
}

// VRemove implements FS.
func (n *nfsFS) VRemove(ctx context.Context, paths []string) (int, error) {
	defer n.dropPaths(paths...)
	defer n.dropDirs(paths...)
	tasks := make([]task, len(paths))
	for i, p := range paths {
		dir, name, err := n.parentOf("remove", i, p)
		if err != nil {
			return 0, err
		}
		tasks[i] = &fnTask{dir: dir, nav: true, fn: func(b *batch, ti int) {
			b.cd(ti, dir)
			b.cp.Remove(name)
			b.track(ti, respCreate, nil)
			b.invalidate(path.Join(dir, name))
		}}
	}
	return n.run(ctx, runOpts{op: "remove", names: func(i int) string { return paths[i] }, txn: n.txn, retryDelay: true}, tasks)
}

// VRename implements FS.
func (n *nfsFS) VRename(ctx context.Context, items []RenameItem) (int, error) {
	if n.sh.dirs != nil {
		defer func() {
			for i := range items {
				n.dropDirs(items[i].Old, items[i].New)
			}
		}()
	}
	if n.sh.cache != nil {
		defer func() {
			for i := range items {
				n.dropPaths(items[i].Old, items[i].New)
			}
		}()
	}
	tasks := make([]task, len(items))
	for i := range items {
		sdir, sname, err := n.parentOf("rename", i, items[i].Old)
		if err != nil {
			return 0, err
		}
		ddir, dname, err := n.parentOf("rename", i, items[i].New)
		if err != nil {
			return 0, err
		}
		tasks[i] = &fnTask{dir: sdir, nav: true, fn: func(b *batch, ti int) {
			// RENAME: saved FH = source directory, current = target.
			if !(b.saved.valid && b.saved.path == sdir && b.cur.valid && b.cur.path == ddir) {
				b.cd(ti, sdir)
				b.cp.SaveFH()
				b.track(ti, respSmall, nil)
				b.saved = pos{path: sdir, valid: true, dir: true}
				b.cd(ti, ddir)
			}
			b.cp.Rename(sname, dname)
			b.track(ti, respRename, nil)
			b.invalidate(path.Join(sdir, sname))
			b.invalidate(path.Join(ddir, dname))
		}}
	}
	return n.run(ctx, runOpts{op: "rename", names: func(i int) string { return items[i].Old }, txn: n.txn, retryDelay: true}, tasks)
}

// VHardlink implements FS.
func (n *nfsFS) VHardlink(ctx context.Context, items []LinkItem) (int, error) {
	tasks := make([]task, len(items))
	for i := range items {
		src, err := n.target(File{Path: items[i].Old})
		if err != nil {
			return 0, &Error{Op: "link", Index: i, Path: items[i].Old, Err: err}
		}
		ddir, dname, err := n.parentOf("link", i, items[i].New)
		if err != nil {
			return 0, err
		}
		d, ok := src.nav()
		tasks[i] = &fnTask{dir: d, nav: ok, fn: func(b *batch, ti int) {
			// LINK: saved FH = source object, current = target directory.
			b.goTo(ti, src)
			b.cp.SaveFH()
			b.track(ti, respSmall, nil)
			b.saved = b.cur
			b.cd(ti, ddir)
			b.cp.Link(dname)
			b.track(ti, respCreate, nil)
		}}
	}
	return n.run(ctx, runOpts{op: "link", names: func(i int) string { return items[i].New }, txn: n.txn}, tasks)
}

// VSymlink implements FS.
func (n *nfsFS) VSymlink(ctx context.Context, items []SymlinkItem) (int, error) {
	tasks := make([]task, len(items))
	for i := range items {
		dir, name, err := n.parentOf("symlink", i, items[i].Path)
		if err != nil {
			return 0, err
		}
		target := items[i].Target
		attrs := modeAttrs(0o777, 0o777)
		tasks[i] = &fnTask{dir: dir, nav: true, fn: func(b *batch, ti int) {
			b.cd(ti, dir)
			b.keepDir(ti, dir)
			b.cp.Symlink(name, target, attrs)
			b.track(ti, respCreate, nil)
			b.cur = pos{path: path.Join(dir, name), valid: true}
		}}
	}
	return n.run(ctx, runOpts{op: "symlink", names: func(i int) string { return items[i].Path }, txn: n.txn, retryDelay: true}, tasks)
}

// VReadlink implements FS.
func (n *nfsFS) VReadlink(ctx context.Context, items []ReadlinkItem) (int, error) {
	tasks := make([]task, len(items))
	for i := range items {
		it := &items[i]
		tg, err := n.target(File{Path: it.Path})
		if err == nil && tg.p == "" {
			err = syscall.EINVAL
		}
		if err != nil {
			return 0, &Error{Op: "readlink", Index: i, Path: it.Path, Err: err}
		}
		tasks[i] = &fnTask{dir: tg.dir, nav: true, fn: func(b *batch, ti int) {
			b.goTo(ti, tg)
			b.cp.Readlink()
			b.track(ti, respLink+4096, func(res nfsv4.NfsResop4) error {
				ok, isOK := res.(*nfsv4.NfsResop4_OP_READLINK).Opreadlink.(*nfsv4.Readlink4res_NFS4_OK)
				if !isOK {
					return errBadReply
				}
				it.Target = string(ok.Resok4.Link)
				return nil
			})
		}}
	}
	return n.run(ctx, runOpts{op: "readlink", names: func(i int) string { return items[i].Path }, txn: n.txn,
		readOnly: true, reset: func(i int) { items[i].Target = "" }}, tasks)
}
