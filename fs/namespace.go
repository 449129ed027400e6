package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// firstCookie is the first readdir cookie (NFSv4 reserves 0, 1 and 2).
const firstCookie = 3

func toAttr(ino Ino, n *meta.Inode) Attr {
	a := Attr{Ino: ino, Gen: n.Gen, Type: FileType(n.Type), Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid,
		Size: n.Size, Rdev: n.Rdev, Change: n.Change, Atime: meta.Time(n.Atime), Mtime: meta.Time(n.Mtime),
		Ctime: meta.Time(n.Ctime), Btime: meta.Time(n.Btime)}
	switch a.Type {
	case TypeRegular:
		// The bytes its visible data extents cover, each rounded up to
		// 4 KiB, so holes and punched ranges do not count (fuse
		// ENGINE-REQUESTS 4); every change of a span record updates it
		// (spans.go).
		a.Used = n.Used
	case TypeSymlink:
		a.Used = (n.Size + 4095) &^ 4095
	case TypeDirectory:
		a.Used = 4096
	}
	return a
}

// touch records a change to n's data and attributes at now.
func touch(n *meta.Inode, now int64) {
	n.Mtime, n.Ctime = now, now
	n.Change++
}

// changed records a change to n's attributes only.
func changed(n *meta.Inode, now int64) {
	n.Ctime = now
	n.Change++
}

// loadDir loads a directory inode.
func (t *Txn) loadDir(ctx context.Context, dir Ino) (*meta.Inode, error) {
	d, err := t.loadInode(ctx, dir)
	if err != nil {
		return nil, err
	}
	if d.Type != uint8(TypeDirectory) {
		return nil, fmt.Errorf("%w: inode %d", ErrNotDir, dir)
	}
	return d, nil
}

func (t *Txn) lookupEntry(ctx context.Context, dir Ino, name string) (*meta.Dirent, error) {
	b, err := t.getRaw(ctx, meta.DirentKey(uint64(dir), name))
	if err != nil {
		if errors.Is(err, ErrNotExist) {
			return nil, fmt.Errorf("%w: %q in directory %d", ErrNotExist, name, dir)
		}
		return nil, err
	}
	return decodeEntry(dir, name, b)
}

// decodeEntry decodes the entry record b of name in dir.
func decodeEntry(dir Ino, name string, b []byte) (*meta.Dirent, error) {
	var de meta.Dirent
	if err := meta.Unmarshal(b, &de); err != nil {
		return nil, fmt.Errorf("%w: entry %q of directory %d: %v", ErrCorrupt, name, dir, err)
	}
	return &de, nil
}

// addEntry links name in dir (whose record d the caller stores) to inode
// ino, whose record is n: the entry record and the cookie index value
// (which also names the inode: meta.CookieEntry).
func (t *Txn) addEntry(ctx context.Context, dir Ino, d *meta.Inode, name string, ino Ino, n *meta.Inode) error {
	typ := n.Type
	if d.NextCookie < firstCookie {
		d.NextCookie = firstCookie
	}
	cookie := d.NextCookie
	d.NextCookie++
	b, err := meta.Marshal(&meta.Dirent{Ino: uint64(ino), Type: typ, Cookie: cookie})
	if err != nil {
		return err
	}
	if err := t.setRaw(ctx, meta.DirentKey(uint64(dir), name), b); err != nil {
		return err
	}
	return t.setRaw(ctx, meta.CookieKey(uint64(dir), cookie),
		meta.CookieValue(meta.CookieEntry{Name: name, Ino: uint64(ino), Type: typ, Gen: n.Gen}))
}

func (t *Txn) removeEntry(ctx context.Context, dir Ino, name string, de *meta.Dirent) error {
	if err := t.deleteRaw(ctx, meta.DirentKey(uint64(dir), name)); err != nil {
		return err
	}
	return t.deleteRaw(ctx, meta.CookieKey(uint64(dir), de.Cookie))
}

// dropLink removes one link of n; at zero links the inode is deleted, or
// kept as an orphan while it is pinned (open).
func (t *Txn) dropLink(ctx context.Context, ino Ino, n *meta.Inode, now int64) error {
	// An inode with links has no orphan record (those are written with
	// Nlink 0, and a link to a tmpfile deletes its record; Check reports
	// an orphan with links), so its deletion need not delete one.
	linked := n.Nlink > 0
	if n.Type == uint8(TypeDirectory) {
		n.Nlink = 0
	} else if n.Nlink > 0 {
		n.Nlink--
	}
	changed(n, now)
	if n.Nlink > 0 {
		t.putInode(ino, n)
		return nil
	}
	if t.fs.pinned(ino) {
		t.putInode(ino, n)
		t.orphaned = append(t.orphaned, ino)
		return t.setRaw(ctx, meta.OrphanKey(uint64(ino)), nil)
	}
	t.dropped = append(t.dropped, ino)
	return t.deleteInode(ctx, ino, !linked)
}

// deleteInode removes an inode with all its span records and attributes. The
// attributes are not scanned for while the store has none (FS.xattrs):
// the deletion then reads the inode record instead (unlink has it cached
// already), and SetXattr reads and rewrites that record after setting
// FS.xattrs, so of a deletion that skipped the scan and a concurrent
// SetXattr on the inode, the later commit conflicts and re-runs (the
// deletion then scans, the SetXattr finds no inode). orphan says that
// ino may have an orphan record, which is deleted too (a blind delete
// otherwise costs a tombstone per removed file).
func (t *Txn) deleteInode(ctx context.Context, ino Ino, orphan bool) error {
	n, err := t.loadInode(ctx, ino)
	if err != nil && !errors.Is(err, ErrNotExist) {
		return err
	}
	if n != nil {
		t.garbage += n.Used // its data becomes garbage (gcpace.go)
	}
	if err := t.deleteSpans(ctx, ino, n); err != nil {
		return err
	}
	if t.fs.xattrs.Load() {
		if err := t.deletePrefix(ctx, meta.XattrPrefix(uint64(ino))); err != nil {
			return err
		}
	}
	t.putInode(ino, nil)
	if !orphan {
		return nil
	}
	return t.deleteRaw(ctx, meta.OrphanKey(uint64(ino)))
}

// Lookup finds name in directory dir. The caller needs search (execute)
// permission on dir.
func (t *Txn) Lookup(ctx context.Context, dir Ino, name string) (Attr, error) {
	res, err := t.do(ctx, "lookup", func(ctx context.Context) (any, error) {
		return t.lookup(ctx, dir, name)
	})
	return attrResult(res, err)
}

func (t *Txn) lookup(ctx context.Context, dir Ino, name string) (Attr, error) {
	d, err := t.loadDir(ctx, dir)
	if err != nil {
		return Attr{}, err
	}
	if err := checkAccess(t.cred, d, AccessExecute); err != nil {
		return Attr{}, err
	}
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	de, err := t.lookupEntry(ctx, dir, name)
	if err != nil {
		return Attr{}, err
	}
	n, err := t.loadInode(ctx, Ino(de.Ino))
	if err != nil {
		if errors.Is(err, ErrNotExist) {
			return Attr{}, fmt.Errorf("%w: entry %q of directory %d names missing inode %d", ErrCorrupt, name, dir, de.Ino)
		}
		return Attr{}, err
	}
	return toAttr(Ino(de.Ino), n), nil
}

// LookupPath resolves a slash-separated path from the root, without
// following symlinks ("." and ".." are honoured). It is one operation: only
// the final attributes are its result, so a concurrent change to an
// ancestor does not make a transaction's replay differ.
func (t *Txn) LookupPath(ctx context.Context, path string) (Attr, error) {
	res, err := t.do(ctx, "lookuppath", func(ctx context.Context) (any, error) {
		root, err := t.loadInode(ctx, RootIno)
		if err != nil {
			return nil, err
		}
		cur := toAttr(RootIno, root)
		for _, name := range strings.Split(path, "/") {
			switch name {
			case "", ".":
				continue
			case "..":
				cur, err = t.parent(ctx, cur.Ino)
			default:
				cur, err = t.lookup(ctx, cur.Ino, name)
			}
			if err != nil {
				return nil, err
			}
		}
		return cur, nil
	})
	return attrResult(res, err)
}

// Parent returns the attributes of directory dir's parent (the root's
// parent is the root).
func (t *Txn) Parent(ctx context.Context, dir Ino) (Attr, error) {
	res, err := t.do(ctx, "parent", func(ctx context.Context) (any, error) {
		return t.parent(ctx, dir)
	})
	return attrResult(res, err)
}

func (t *Txn) parent(ctx context.Context, dir Ino) (Attr, error) {
	d, err := t.loadDir(ctx, dir)
	if err != nil {
		return Attr{}, err
	}
	if err := checkAccess(t.cred, d, AccessExecute); err != nil {
		return Attr{}, err
	}
	p := Ino(d.Parent)
	if p == 0 {
		p = RootIno
	}
	n, err := t.loadInode(ctx, p)
	if err != nil {
		return Attr{}, err
	}
	return toAttr(p, n), nil
}

// GetAttr returns the attributes of ino.
func (t *Txn) GetAttr(ctx context.Context, ino Ino) (Attr, error) {
	res, err := t.do(ctx, "getattr", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		return toAttr(ino, n), nil
	})
	return attrResult(res, err)
}

// GetAttrMask returns the attributes of ino selected by mask (the others
// are zero; Ino, Gen and Type are always set). Only the selected
// attributes are logged for replay, so a transaction that asked for, say,
// the size does not conflict with a concurrent change of the mtime alone
// (an NFS GETATTR of a few attributes in a transactional compound).
func (t *Txn) GetAttrMask(ctx context.Context, ino Ino, mask AttrMask) (Attr, error) {
	res, err := t.do(ctx, "getattr-mask", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		return toAttr(ino, n).Mask(mask), nil
	})
	return attrResult(res, err)
}

// ChangeMark stores inode ino's change attribute at this point of the
// transaction into *dst. The value is not compared on replay: when the
// commit replays the transaction, *dst is overwritten with the value of the
// execution that committed, so read it after Commit returns. For NFS
// change_info4: marks before and after a CREATE/REMOVE/RENAME report the
// atomic change without making concurrent creators in one directory
// conflict (nfs4 ENGINE-REQUESTS 6). Only a failure (e.g. ErrNotExist) is
// compared.
func (t *Txn) ChangeMark(ctx context.Context, ino Ino, dst *uint64) error {
	if t.done {
		return ErrTxnDone
	}
	// The logged result is nil, so replay compares only the error; each
	// execution overwrites *dst.
	_, err := t.do(ctx, "change-mark", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		*dst = n.Change
		return nil, nil
	})
	return err
}

// Access reports which of the access bits in mask the caller has on ino.
func (t *Txn) Access(ctx context.Context, ino Ino, mask uint32) (uint32, error) {
	res, err := t.do(ctx, "access", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		return allowed(t.cred, n, mask&7), nil
	})
	if err != nil {
		return 0, err
	}
	return res.(uint32), nil
}

func attrResult(res any, err error) (Attr, error) {
	if err != nil {
		return Attr{}, err
	}
	return res.(Attr), nil
}

type createResult struct {
	Attr    Attr
	Created bool
}

// tmpfileMark is the orphan-key value of a file made by CreateOrphan: such
// an orphan may be given a name by Link (linkat of an O_TMPFILE file).
var tmpfileMark = []byte("t")

// CreateOrphan makes a regular file with no name in directory dir (which
// needs write and search permission), already an orphan: when the
// transaction commits, the file is pinned once for the caller, who must
// Unpin it (at close); it is reclaimed at its last Unpin unless Link gave
// it a name meanwhile (O_TMPFILE and linkat; fuse ENGINE-REQUESTS 5). If
// the transaction aborts, nothing remains.
func (t *Txn) CreateOrphan(ctx context.Context, dir Ino, mode uint32) (Attr, error) {
	now := t.fs.now().UnixNano()
	gen := randUint64()
	var ino Ino
	res, err := t.do(ctx, "create-orphan", func(ctx context.Context) (any, error) {
		d, err := t.loadDir(ctx, dir)
		if err != nil {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessWrite|AccessExecute); err != nil {
			return nil, err
		}
		if ino == 0 {
			if ino, err = t.fs.inos.alloc(ctx); err != nil {
				return nil, err
			}
		}
		n := &meta.Inode{Type: uint8(TypeRegular), Mode: mode & ModePerm, Uid: t.cred.Uid, Gid: t.cred.Gid,
			Atime: now, Mtime: now, Ctime: now, Btime: now, Change: 1, Gen: gen, Spans: 1}
		if d.Mode&ModeSetgid != 0 {
			n.Gid = d.Gid
		}
		if n.Mode&ModeSetgid != 0 && n.Mode&0o010 != 0 && !t.cred.isRoot() && !t.cred.inGroup(n.Gid) {
			n.Mode &^= ModeSetgid
		}
		t.putInode(ino, n)
		t.markFresh(ino)
		t.orphaned = append(t.orphaned, ino)
		t.tmpfiles = append(t.tmpfiles, ino)
		if err := t.setRaw(ctx, meta.OrphanKey(uint64(ino)), tmpfileMark); err != nil {
			return nil, err
		}
		return toAttr(ino, n), nil
	})
	return attrResult(res, err)
}

// Create makes a new inode named name in dir; see CreateRequest.
func (t *Txn) Create(ctx context.Context, dir Ino, name string, req CreateRequest) (Attr, bool, error) {
	if err := t.fs.space.admit(ctx, recordGrowth); err != nil {
		return Attr{}, false, err
	}
	now := t.fs.now().UnixNano()
	gen := randUint64()
	var ino Ino
	res, err := t.do(ctx, "create", func(ctx context.Context) (any, error) {
		if err := checkName(name); err != nil {
			return nil, err
		}
		if req.Type < TypeRegular || req.Type > TypeBlock {
			return nil, fmt.Errorf("%w: file type %d", ErrInvalid, req.Type)
		}
		if req.Type == TypeSymlink && (req.Target == "" || len(req.Target) > MaxSymlink) {
			if req.Target == "" {
				return nil, fmt.Errorf("%w: empty symlink target", ErrInvalid)
			}
			return nil, ErrNameTooLong
		}
		d, err := t.loadDir(ctx, dir)
		if err != nil {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessExecute); err != nil {
			return nil, err
		}
		de, err := t.lookupEntry(ctx, dir, name)
		if err == nil {
			if req.Exclusive || req.Type != TypeRegular {
				return nil, fmt.Errorf("%w: %q", ErrExist, name)
			}
			n, err := t.loadInode(ctx, Ino(de.Ino))
			if err != nil {
				return nil, err
			}
			if n.Type == uint8(TypeDirectory) {
				return nil, fmt.Errorf("%w: %q", ErrIsDir, name)
			}
			if n.Type != uint8(TypeRegular) {
				return nil, fmt.Errorf("%w: %q", ErrExist, name)
			}
			return createResult{toAttr(Ino(de.Ino), n), false}, nil
		} else if !errors.Is(err, ErrNotExist) {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessWrite); err != nil {
			return nil, err
		}
		if req.Type == TypeDirectory && d.Nlink >= MaxLinks {
			return nil, ErrTooManyLinks
		}
		if ino == 0 {
			if ino, err = t.fs.inos.alloc(ctx); err != nil {
				return nil, err
			}
		}
		n := &meta.Inode{Type: uint8(req.Type), Mode: req.Mode & ModePerm, Nlink: 1, Uid: t.cred.Uid, Gid: t.cred.Gid,
			Atime: now, Mtime: now, Ctime: now, Btime: now, Change: 1, Gen: gen, Spans: 1}
		if d.Mode&ModeSetgid != 0 {
			n.Gid = d.Gid
			if req.Type == TypeDirectory {
				n.Mode |= ModeSetgid
			}
		}
		if req.Type != TypeDirectory && n.Mode&ModeSetgid != 0 && n.Mode&0o010 != 0 && !t.cred.isRoot() && !t.cred.inGroup(n.Gid) {
			n.Mode &^= ModeSetgid
		}
		switch req.Type {
		case TypeDirectory:
			n.Nlink = 2
			n.Parent = uint64(dir)
			n.NextCookie = firstCookie
			d.Nlink++
		case TypeSymlink:
			n.Target = req.Target
			n.Size = uint64(len(req.Target))
		case TypeChar, TypeBlock:
			n.Rdev = req.Rdev
		}
		if err := t.addEntry(ctx, dir, d, name, ino, n); err != nil {
			return nil, err
		}
		touch(d, now)
		t.putInode(dir, d)
		t.putInode(ino, n)
		t.markFresh(ino)
		return createResult{toAttr(ino, n), true}, nil
	})
	if err != nil {
		return Attr{}, false, err
	}
	r := res.(createResult)
	return r.Attr, r.Created, nil
}

// Link adds a hard link named name in dir to ino (not a directory).
func (t *Txn) Link(ctx context.Context, ino, dir Ino, name string) (Attr, error) {
	return t.link(ctx, ino, dir, name, true)
}

// LinkOnly is Link without the attributes: it logs only the error for
// replay, so a concurrent change of the file's attributes does not make
// the transaction conflict (NFS LINK does not return them).
func (t *Txn) LinkOnly(ctx context.Context, ino, dir Ino, name string) error {
	_, err := t.link(ctx, ino, dir, name, false)
	return err
}

func (t *Txn) link(ctx context.Context, ino, dir Ino, name string, withAttr bool) (Attr, error) {
	if err := t.fs.space.admit(ctx, recordGrowth); err != nil {
		return Attr{}, err
	}
	now := t.fs.now().UnixNano()
	res, err := t.do(ctx, "link", func(ctx context.Context) (any, error) {
		if err := checkName(name); err != nil {
			return nil, err
		}
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		d, err := t.loadDir(ctx, dir)
		if err != nil {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessWrite|AccessExecute); err != nil {
			return nil, err
		}
		if n.Type == uint8(TypeDirectory) {
			return nil, fmt.Errorf("%w: hard link to a directory", ErrPerm)
		}
		if _, err := t.lookupEntry(ctx, dir, name); err == nil {
			return nil, fmt.Errorf("%w: %q", ErrExist, name)
		} else if !errors.Is(err, ErrNotExist) {
			return nil, err
		}
		tmpfile := false
		if n.Nlink == 0 {
			// Only a file made by CreateOrphan may get a name back.
			v, err := t.getRaw(ctx, meta.OrphanKey(uint64(ino)))
			if err != nil && !errors.Is(err, ErrNotExist) {
				return nil, err
			}
			if err != nil || !bytes.Equal(v, tmpfileMark) {
				return nil, fmt.Errorf("%w: inode %d has been removed", ErrNotExist, ino)
			}
			tmpfile = true
		}
		if n.Nlink >= MaxLinks {
			return nil, ErrTooManyLinks
		}
		if err := t.addEntry(ctx, dir, d, name, ino, n); err != nil {
			return nil, err
		}
		n.Nlink++
		changed(n, now)
		touch(d, now)
		t.putInode(dir, d)
		t.putInode(ino, n)
		if tmpfile {
			if err := t.deleteRaw(ctx, meta.OrphanKey(uint64(ino))); err != nil {
				return nil, err
			}
		}
		if !withAttr {
			return Attr{}, nil
		}
		return toAttr(ino, n), nil
	})
	return attrResult(res, err)
}

type removeKind int

const (
	removeAny removeKind = iota
	removeNonDir
	removeDir
)

// Unlink removes the non-directory entry name from dir.
func (t *Txn) Unlink(ctx context.Context, dir Ino, name string) error {
	return t.remove(ctx, "unlink", dir, name, removeNonDir)
}

// Rmdir removes the empty directory name from dir.
func (t *Txn) Rmdir(ctx context.Context, dir Ino, name string) error {
	return t.remove(ctx, "rmdir", dir, name, removeDir)
}

// Remove removes name from dir, whether a file or an empty directory.
func (t *Txn) Remove(ctx context.Context, dir Ino, name string) error {
	return t.remove(ctx, "remove", dir, name, removeAny)
}

func (t *Txn) remove(ctx context.Context, op string, dir Ino, name string, kind removeKind) error {
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, op, func(ctx context.Context) (any, error) {
		if kind == removeDir && name == "." {
			return nil, fmt.Errorf("%w: rmdir of \".\"", ErrInvalid)
		}
		if kind == removeDir && name == ".." {
			return nil, fmt.Errorf("%w: rmdir of \"..\"", ErrNotEmpty)
		}
		if err := checkName(name); err != nil {
			return nil, err
		}
		d, err := t.loadDir(ctx, dir)
		if err != nil {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessExecute); err != nil {
			return nil, err
		}
		de, err := t.lookupEntry(ctx, dir, name)
		if err != nil {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessWrite); err != nil {
			return nil, err
		}
		ino := Ino(de.Ino)
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		isDir := n.Type == uint8(TypeDirectory)
		switch {
		case kind == removeNonDir && isDir:
			return nil, fmt.Errorf("%w: %q", ErrIsDir, name)
		case kind == removeDir && !isDir:
			return nil, fmt.Errorf("%w: %q", ErrNotDir, name)
		}
		if err := checkSticky(t.cred, d, n); err != nil {
			return nil, err
		}
		if isDir {
			if err := t.checkEmpty(ctx, ino); err != nil {
				return nil, err
			}
			d.Nlink--
		}
		if err := t.removeEntry(ctx, dir, name, de); err != nil {
			return nil, err
		}
		touch(d, now)
		t.putInode(dir, d)
		return nil, t.dropLink(ctx, ino, n, now)
	})
	return err
}

func (t *Txn) checkEmpty(ctx context.Context, dir Ino) error {
	p := meta.DirentPrefix(uint64(dir))
	pairs, err := t.scanRaw(ctx, p, kv.PrefixEnd(p), 1)
	if err != nil {
		return err
	}
	if len(pairs) > 0 {
		return fmt.Errorf("%w: directory %d", ErrNotEmpty, dir)
	}
	return nil
}

// Rename moves srcName in srcDir to dstName in dstDir, replacing a
// compatible destination (a file by a non-directory, an empty directory by
// a directory). Moving a directory into its own subtree is ErrInvalid.
func (t *Txn) Rename(ctx context.Context, srcDir Ino, srcName string, dstDir Ino, dstName string, flags RenameFlags) error {
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, "rename", func(ctx context.Context) (any, error) {
		return nil, t.rename(ctx, srcDir, srcName, dstDir, dstName, flags, now)
	})
	return err
}

func (t *Txn) rename(ctx context.Context, srcDir Ino, srcName string, dstDir Ino, dstName string, flags RenameFlags, now int64) error {
	if flags.NoReplace && flags.Exchange {
		return fmt.Errorf("%w: NoReplace with Exchange", ErrInvalid)
	}
	if err := checkName(srcName); err != nil {
		return err
	}
	if err := checkName(dstName); err != nil {
		return err
	}
	sd, err := t.loadDir(ctx, srcDir)
	if err != nil {
		return err
	}
	dd := sd
	if dstDir != srcDir {
		if dd, err = t.loadDir(ctx, dstDir); err != nil {
			return err
		}
	}
	if err := checkAccess(t.cred, sd, AccessExecute); err != nil {
		return err
	}
	if err := checkAccess(t.cred, dd, AccessExecute); err != nil {
		return err
	}
	se, err := t.lookupEntry(ctx, srcDir, srcName)
	if err != nil {
		return err
	}
	de, err := t.lookupEntry(ctx, dstDir, dstName)
	if err != nil && !errors.Is(err, ErrNotExist) {
		return err
	}
	if err := checkAccess(t.cred, sd, AccessWrite); err != nil {
		return err
	}
	if err := checkAccess(t.cred, dd, AccessWrite); err != nil {
		return err
	}
	if de != nil && flags.NoReplace {
		return fmt.Errorf("%w: %q", ErrExist, dstName)
	}
	if de == nil && flags.Exchange {
		return fmt.Errorf("%w: %q", ErrNotExist, dstName)
	}
	if de != nil && de.Ino == se.Ino {
		return nil // both names link to the same inode: nothing to do
	}
	sino := Ino(se.Ino)
	src, err := t.loadInode(ctx, sino)
	if err != nil {
		return err
	}
	if err := checkSticky(t.cred, sd, src); err != nil {
		return err
	}
	srcIsDir := src.Type == uint8(TypeDirectory)
	if srcIsDir && srcDir != dstDir {
		if err := checkAccess(t.cred, src, AccessWrite); err != nil {
			return err
		}
		if err := t.checkNotAncestor(ctx, sino, dstDir); err != nil {
			return err
		}
	}
	var dino Ino
	var dst *meta.Inode
	if de != nil {
		dino = Ino(de.Ino)
		if dst, err = t.loadInode(ctx, dino); err != nil {
			return err
		}
		if err := checkSticky(t.cred, dd, dst); err != nil {
			return err
		}
		dstIsDir := dst.Type == uint8(TypeDirectory)
		if flags.Exchange {
			if dstIsDir && srcDir != dstDir {
				if err := checkAccess(t.cred, dst, AccessWrite); err != nil {
					return err
				}
				if err := t.checkNotAncestor(ctx, dino, srcDir); err != nil {
					return err
				}
			}
		} else {
			switch {
			case srcIsDir && !dstIsDir:
				return fmt.Errorf("%w: %q", ErrNotDir, dstName)
			case !srcIsDir && dstIsDir:
				return fmt.Errorf("%w: %q", ErrIsDir, dstName)
			case dstIsDir:
				if err := t.checkEmpty(ctx, dino); err != nil {
					return err
				}
			}
		}
	}

	// All checks passed; from here on only I/O can fail.
	if err := t.removeEntry(ctx, srcDir, srcName, se); err != nil {
		return err
	}
	if de != nil {
		if err := t.removeEntry(ctx, dstDir, dstName, de); err != nil {
			return err
		}
	}
	if err := t.addEntry(ctx, dstDir, dd, dstName, sino, src); err != nil {
		return err
	}
	move := func(ino Ino, n *meta.Inode, from *meta.Inode, to *meta.Inode, toIno Ino) {
		if n.Type == uint8(TypeDirectory) && from != to {
			from.Nlink--
			to.Nlink++
			n.Parent = uint64(toIno)
		}
		changed(n, now)
	}
	move(sino, src, sd, dd, dstDir)
	if de != nil && flags.Exchange {
		if err := t.addEntry(ctx, srcDir, sd, srcName, dino, dst); err != nil {
			return err
		}
		move(dino, dst, dd, sd, srcDir)
		t.putInode(dino, dst)
	}
	touch(sd, now)
	touch(dd, now)
	t.putInode(srcDir, sd)
	if dd != sd {
		t.putInode(dstDir, dd)
	}
	t.putInode(sino, src)
	if de != nil && !flags.Exchange {
		if dst.Type == uint8(TypeDirectory) {
			dd.Nlink--
			t.putInode(dstDir, dd)
		}
		return t.dropLink(ctx, dino, dst, now)
	}
	return nil
}

// checkNotAncestor fails with ErrInvalid if dir is ino or lies below ino.
func (t *Txn) checkNotAncestor(ctx context.Context, ino, dir Ino) error {
	for cur, depth := dir, 0; ; depth++ {
		if cur == ino {
			return fmt.Errorf("%w: cannot move directory %d into itself", ErrInvalid, ino)
		}
		if cur == RootIno {
			return nil
		}
		if depth > 1<<16 {
			return fmt.Errorf("%w: directory parent chain too long at %d", ErrCorrupt, cur)
		}
		n, err := t.loadInode(ctx, cur)
		if err != nil {
			return err
		}
		cur = Ino(n.Parent)
		if cur == 0 {
			return fmt.Errorf("%w: directory %d has no parent", ErrCorrupt, dir)
		}
	}
}

type readDirResult struct {
	Entries []DirEntry
	EOF     bool
}

// wholeDirScanMin is the fewest entries for which ReadDir reads a whole
// directory's entry records with one scan.
const wholeDirScanMin = 4

// ReadDir lists directory entries after req.Cookie in creation order.
func (t *Txn) ReadDir(ctx context.Context, dir Ino, req ReadDirRequest) ([]DirEntry, bool, error) {
	res, err := t.do(ctx, "readdir", func(ctx context.Context) (any, error) {
		d, err := t.loadDir(ctx, dir)
		if err != nil {
			return nil, err
		}
		if err := checkAccess(t.cred, d, AccessRead); err != nil {
			return nil, err
		}
		start := meta.CookieKey(uint64(dir), max(req.Cookie+1, firstCookie))
		end := kv.PrefixEnd(meta.CookiePrefix(uint64(dir)))
		limit := req.Limit
		if limit > 0 {
			limit++ // one more to learn whether this is the end
		}
		pairs, err := t.scanRaw(ctx, start, end, limit)
		if err != nil {
			return nil, err
		}
		r := readDirResult{EOF: req.Limit <= 0 || len(pairs) < limit}
		if !r.EOF {
			pairs = pairs[:req.Limit]
		}
		// Layout-4 cookie values name the entry (meta.CookieEntry): no
		// entry record is read. Older values hold the name only: a page
		// holding the whole directory then reads the entry records with
		// one scan (in name order) instead of one point read per name
		// (in cookie order): a scan step costs a fraction of a pebble
		// Get. (Neither read changes the read set's meaning: entries
		// and their cookies change together.)
		ces := make([]meta.CookieEntry, len(pairs))
		old := 0
		for i, p := range pairs {
			if ces[i], err = meta.ParseCookieValue(p.Value); err != nil {
				return nil, fmt.Errorf("%w: directory %d: %v", ErrCorrupt, dir, err)
			}
			if !ces[i].Full {
				old++
			}
		}
		var byName map[string][]byte
		if old > 0 && req.Cookie == 0 && r.EOF && len(pairs) >= wholeDirScanMin {
			p := meta.DirentPrefix(uint64(dir))
			ents, err := t.scanRaw(ctx, p, kv.PrefixEnd(p), len(pairs)+1)
			if err != nil {
				return nil, err
			}
			if len(ents) == len(pairs) { // else: point reads find the odd one
				byName = make(map[string][]byte, len(ents))
				for _, e := range ents {
					byName[string(e.Key[len(p):])] = e.Value
				}
			}
		}
		r.Entries = make([]DirEntry, 0, len(pairs))
		var n meta.Inode
		for i, p := range pairs {
			_, cookie, err := meta.ParseCookieKey(p.Key)
			if err != nil {
				return nil, err
			}
			ce := ces[i]
			name := ce.Name
			e := DirEntry{Name: name, Ino: Ino(ce.Ino), Type: FileType(ce.Type), Gen: ce.Gen, Cookie: cookie}
			if !ce.Full {
				var de *meta.Dirent
				if b, ok := byName[name]; ok {
					de, err = decodeEntry(dir, name, b)
				} else {
					de, err = t.lookupEntry(ctx, dir, name)
				}
				if errors.Is(err, ErrNotExist) {
					return nil, fmt.Errorf("%w: cookie %d of directory %d names missing entry %q", ErrCorrupt, cookie, dir, name)
				} else if err != nil {
					return nil, err
				}
				e.Ino, e.Type = Ino(de.Ino), FileType(de.Type)
			}
			if req.WithAttr || (req.WithGen && !ce.Full) {
				if err := t.readInode(ctx, e.Ino, &n); err != nil {
					return nil, err
				}
				e.Gen = n.Gen
				if req.WithAttr {
					a := toAttr(e.Ino, &n)
					e.Attr = &a
				}
			}
			r.Entries = append(r.Entries, e)
		}
		return r, nil
	})
	if err != nil {
		return nil, false, err
	}
	r := res.(readDirResult)
	return r.Entries, r.EOF, nil
}

// Readlink returns a symlink's target.
func (t *Txn) Readlink(ctx context.Context, ino Ino) (string, error) {
	res, err := t.do(ctx, "readlink", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		if n.Type != uint8(TypeSymlink) {
			return nil, fmt.Errorf("%w: readlink of inode %d", ErrWrongType, ino)
		}
		return n.Target, nil
	})
	if err != nil {
		return "", err
	}
	return res.(string), nil
}

// SetAttr changes attributes with the POSIX permission rules: only the
// owner (or root) changes mode and times-to-a-value; only root changes the
// owner; the owner may change the group to one of its groups; size needs
// write permission. Changing owner or group clears setuid/setgid.
func (t *Txn) SetAttr(ctx context.Context, ino Ino, sa SetAttr) (Attr, error) {
	now := t.fs.now()
	res, err := t.do(ctx, "setattr", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		if err := t.setAttr(ctx, ino, n, sa, now); err != nil {
			return nil, err
		}
		return toAttr(ino, n), nil
	})
	return attrResult(res, err)
}

// SetAttrOnly is SetAttr for callers that do not use the resulting
// attributes: only the outcome is logged, so in a long transaction a
// concurrent change to other attributes of the file (a write changing its
// size and change counter) does not make the replay differ.
func (t *Txn) SetAttrOnly(ctx context.Context, ino Ino, sa SetAttr) error {
	now := t.fs.now()
	_, err := t.do(ctx, "setattr-only", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		return nil, t.setAttr(ctx, ino, n, sa, now)
	})
	return err
}

func (t *Txn) setAttr(ctx context.Context, ino Ino, n *meta.Inode, sa SetAttr, now time.Time) error {
	c := t.cred
	owner := c.isRoot() || c.Uid == n.Uid
	if sa.Mode != nil {
		if !owner {
			return ErrPerm
		}
		if *sa.Mode&^ModePerm != 0 {
			return fmt.Errorf("%w: mode %o", ErrInvalid, *sa.Mode)
		}
	}
	newUid, newGid := n.Uid, n.Gid
	if sa.Uid != nil {
		newUid = *sa.Uid
	}
	if sa.Gid != nil {
		newGid = *sa.Gid
	}
	if (sa.Uid != nil || sa.Gid != nil) && !c.isRoot() {
		if c.Uid != n.Uid || newUid != n.Uid || (newGid != n.Gid && !c.inGroup(newGid)) {
			return ErrPerm
		}
	}
	if sa.Size != nil {
		if n.Type == uint8(TypeDirectory) {
			return fmt.Errorf("%w: truncate of a directory", ErrIsDir)
		}
		if n.Type != uint8(TypeRegular) {
			return fmt.Errorf("%w: truncate of a %v", ErrInvalid, FileType(n.Type))
		}
		if !sa.OpenForWrite {
			if err := checkAccess(c, n, AccessWrite); err != nil {
				return err
			}
		}
		if *sa.Size > MaxFileSize {
			return ErrFileTooBig
		}
	}
	for _, st := range []*SetTime{sa.Atime, sa.Mtime} {
		if st == nil {
			continue
		}
		if !owner && (!st.Now || checkAccess(c, n, AccessWrite) != nil) {
			if st.Now {
				return ErrAccess
			}
			return ErrPerm
		}
	}

	// Checks done; apply.
	nowNs := now.UnixNano()
	if sa.Size != nil {
		if *sa.Size != n.Size {
			if err := t.truncate(ctx, ino, n, *sa.Size); err != nil {
				return err
			}
		}
		n.Mtime = nowNs
		t.clearSetid(n)
	}
	if sa.Mode != nil {
		mode := *sa.Mode
		if !c.isRoot() && n.Type != uint8(TypeDirectory) && mode&ModeSetgid != 0 && !c.inGroup(n.Gid) {
			mode &^= ModeSetgid
		}
		n.Mode = mode
	}
	if sa.Uid != nil || sa.Gid != nil {
		n.Uid, n.Gid = newUid, newGid
		if n.Type != uint8(TypeDirectory) {
			n.Mode &^= ModeSetuid
			if n.Mode&0o010 != 0 {
				n.Mode &^= ModeSetgid
			}
		}
	}
	if sa.Atime != nil {
		n.Atime = pickTime(sa.Atime, nowNs)
	}
	if sa.Mtime != nil {
		n.Mtime = pickTime(sa.Mtime, nowNs)
	}
	changed(n, nowNs)
	t.putInode(ino, n)
	return nil
}

// clearSetid drops setuid (and setgid when group-executable) after a write
// or truncate by someone other than root, as Linux does.
func (t *Txn) clearSetid(n *meta.Inode) {
	if t.cred.isRoot() {
		return
	}
	n.Mode &^= ModeSetuid
	if n.Mode&0o010 != 0 {
		n.Mode &^= ModeSetgid
	}
}

func pickTime(st *SetTime, now int64) int64 {
	if st.Now {
		return now
	}
	return st.Time.UnixNano()
}
