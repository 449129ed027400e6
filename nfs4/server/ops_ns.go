package server

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
)

// cinfo builds change_info4 from a directory's change attribute before and
// after an operation; it is atomic because both were read in the same
// engine transaction. In a transactional compound the directory is not
// read (see dirAttr) and change_info is reported as not atomic, with
// before = after = 0 (docs/protocol.md §1).
func (c *compound) cinfo(before, after uint64) nfsv4.ChangeInfo4 {
	if c.userTxn {
		return nfsv4.ChangeInfo4{}
	}
	return nfsv4.ChangeInfo4{Atomic: true, Before: before, After: after}
}

// mark reads a directory's change attribute for change_info into *dst
// with Txn.ChangeMark: the value is not compared when the engine replays
// the transaction at commit, but overwritten with the value of the
// execution that committed, so concurrent creators in one directory do
// not conflict over it (setCinfo fills the result in after the commit).
// In a transactional compound it reads nothing (change_info is reported
// as not atomic, docs/protocol.md §1).
func (c *compound) mark(t *fs.Txn, dir fs.Ino, dst *uint64) error {
	if c.userTxn {
		return nil
	}
	return t.ChangeMark(c.ctx, dir, dst)
}

// setCinfo sets *ci from the marks before and after, now and — inside a
// grouped run, whose commit may replay the operation — again after the
// commit (runGroup), when the marks hold the committed execution's
// values.
func (c *compound) setCinfo(ci *nfsv4.ChangeInfo4, before, after *uint64) {
	set := func() { *ci = c.cinfo(*before, *after) }
	set()
	if c.txn != nil && !c.userTxn {
		c.cinfoFix = append(c.cinfoFix, set)
	}
}

func (c *compound) create(a *nfsv4.Create4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_CREATE, st), st
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := checkName(a.Objname); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	na, st := decodeSetAttrs(&a.Createattrs, c.minor)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if na.set.Size != nil {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	req := fs.CreateRequest{Exclusive: true, Mode: 0o644}
	switch t := a.Objtype.(type) {
	case *nfsv4.Createtype4_NF4LNK:
		req.Type, req.Target, req.Mode = fs.TypeSymlink, string(t.Linkdata), 0o777
		if len(t.Linkdata) == 0 {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
		if len(t.Linkdata) > fs.MaxSymlink {
			return fail(nfsv4.NFS4ERR_NAMETOOLONG)
		}
	case *nfsv4.Createtype4_NF4BLK:
		req.Type, req.Rdev = fs.TypeBlock, uint64(t.Devdata.Specdata1)<<32|uint64(t.Devdata.Specdata2)
	case *nfsv4.Createtype4_NF4CHR:
		req.Type, req.Rdev = fs.TypeChar, uint64(t.Devdata.Specdata1)<<32|uint64(t.Devdata.Specdata2)
	case *nfsv4.Createtype4_NF4SOCK:
		req.Type = fs.TypeSocket
	case *nfsv4.Createtype4_NF4FIFO:
		req.Type = fs.TypeFIFO
	case *nfsv4.Createtype4_NF4DIR:
		req.Type, req.Mode = fs.TypeDirectory, 0o755
	default:
		return fail(nfsv4.NFS4ERR_BADTYPE)
	}
	if na.set.Mode != nil {
		req.Mode = *na.set.Mode
		na.set.Mode = nil
	}
	if !c.lockDir(c.cur.ino) {
		return fail(nfsv4.NFS4ERR_DELAY)
	}
	before, after := new(uint64), new(uint64)
	var obj fs.Attr
	err := c.update(func(t *fs.Txn) (err error) {
		if err = c.mark(t, c.cur.ino, before); err != nil {
			return err
		}
		if obj, _, err = t.Create(c.ctx, c.cur.ino, a.Objname, req); err != nil {
			return err
		}
		if na.set.Uid != nil || na.set.Gid != nil || na.set.Atime != nil || na.set.Mtime != nil {
			if obj, err = t.SetAttr(c.ctx, obj.Ino, na.set); err != nil {
				return err
			}
		}
		return c.mark(t, c.cur.ino, after)
	})
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "CREATE", err, aboutName))
	}
	c.setCur(&obj)
	ok := &nfsv4.Create4res_NFS4_OK{Resok4: nfsv4.Create4resok{Attrset: na.mask}}
	c.setCinfo(&ok.Resok4.Cinfo, before, after)
	return &nfsv4.NfsResop4_OP_CREATE{Opcreate: ok}, nfsv4.NFS4_OK
}

func (c *compound) link(name string) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_LINK, st), st
	}
	if !c.saved.set {
		return fail(nfsv4.NFS4ERR_NOFILEHANDLE)
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if c.saved.typ == fs.TypeDirectory {
		return fail(nfsv4.NFS4ERR_ISDIR)
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if !c.lockDir(c.cur.ino) {
		return fail(nfsv4.NFS4ERR_DELAY)
	}
	before, after := new(uint64), new(uint64)
	err := c.update(func(t *fs.Txn) (err error) {
		if err = c.mark(t, c.cur.ino, before); err != nil {
			return err
		}
		if err = t.LinkOnly(c.ctx, c.saved.ino, c.cur.ino, name); err != nil {
			return err
		}
		return c.mark(t, c.cur.ino, after)
	})
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "LINK", err, aboutName))
	}
	ok := &nfsv4.Link4res_NFS4_OK{}
	c.setCinfo(&ok.Resok4.Cinfo, before, after)
	return &nfsv4.NfsResop4_OP_LINK{Oplink: ok}, nfsv4.NFS4_OK
}

func (c *compound) remove(name string) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_REMOVE, st), st
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if !c.lockDir(c.cur.ino) {
		return fail(nfsv4.NFS4ERR_DELAY)
	}
	before, after := new(uint64), new(uint64)
	err := c.update(func(t *fs.Txn) (err error) {
		if err = c.mark(t, c.cur.ino, before); err != nil {
			return err
		}
		if err = t.Remove(c.ctx, c.cur.ino, name); err != nil {
			return err
		}
		return c.mark(t, c.cur.ino, after)
	})
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "REMOVE", err, aboutName))
	}
	ok := &nfsv4.Remove4res_NFS4_OK{}
	c.setCinfo(&ok.Resok4.Cinfo, before, after)
	return &nfsv4.NfsResop4_OP_REMOVE{Opremove: ok}, nfsv4.NFS4_OK
}

func (c *compound) rename(oldName, newName string) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_RENAME, st), st
	}
	if !c.saved.set {
		return fail(nfsv4.NFS4ERR_NOFILEHANDLE)
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if c.saved.typ != fs.TypeDirectory {
		return fail(nfsv4.NFS4ERR_NOTDIR)
	}
	if st := checkName(oldName); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := checkName(newName); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if !c.lockDir(c.saved.ino) || !c.lockDir(c.cur.ino) {
		return fail(nfsv4.NFS4ERR_DELAY)
	}
	sb, sa, db, da := new(uint64), new(uint64), new(uint64), new(uint64)
	err := c.update(func(t *fs.Txn) (err error) {
		if err = c.mark(t, c.saved.ino, sb); err != nil {
			return err
		}
		if err = c.mark(t, c.cur.ino, db); err != nil {
			return err
		}
		if err = t.Rename(c.ctx, c.saved.ino, oldName, c.cur.ino, newName, fs.RenameFlags{}); err != nil {
			return err
		}
		if err = c.mark(t, c.saved.ino, sa); err != nil {
			return err
		}
		return c.mark(t, c.cur.ino, da)
	})
	if err != nil {
		return fail(c.s.toStatus(c.ctx, "RENAME", err, aboutName))
	}
	ok := &nfsv4.Rename4res_NFS4_OK{}
	c.setCinfo(&ok.Resok4.SourceCinfo, sb, sa)
	c.setCinfo(&ok.Resok4.TargetCinfo, db, da)
	return &nfsv4.NfsResop4_OP_RENAME{Oprename: ok}, nfsv4.NFS4_OK
}

func (c *compound) readlink() (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if st := c.needCur(); st != nfsv4.NFS4_OK {
		return errRes(nfsv4.OP_READLINK, st), st
	}
	if c.cur.typ != fs.TypeSymlink {
		st := nfsv4.NFS4ERR_INVAL
		if c.minor > 0 && c.cur.typ != fs.TypeDirectory {
			st = nfsv4.NFS4ERR_WRONG_TYPE
		}
		if c.cur.typ == fs.TypeDirectory {
			st = nfsv4.NFS4ERR_ISDIR
		}
		return errRes(nfsv4.OP_READLINK, st), st
	}
	var target string
	err := c.view(func(t *fs.Txn) (err error) {
		target, err = t.Readlink(c.ctx, c.cur.ino)
		return err
	})
	if err != nil {
		st := c.s.toStatus(c.ctx, "READLINK", err, aboutHandle)
		return errRes(nfsv4.OP_READLINK, st), st
	}
	return &nfsv4.NfsResop4_OP_READLINK{Opreadlink: &nfsv4.Readlink4res_NFS4_OK{
		Resok4: nfsv4.Readlink4resok{Link: []byte(target)}}}, nfsv4.NFS4_OK
}

// readdir implements READDIR (RFC 8881 §18.23). Cookies are the engine's
// stable entry cookies, so the cookie verifier is constant (zero) and any
// cookie a client saw stays valid.
func (c *compound) readdir(a *nfsv4.Readdir4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return errRes(nfsv4.OP_READDIR, st), st
	}
	if st := c.needDir(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if a.Cookie == 1 || a.Cookie == 2 {
		return fail(nfsv4.NFS4ERR_BAD_COOKIE)
	}
	if bmHas(a.AttrRequest, nfsv4.FATTR4_TIME_ACCESS_SET) || bmHas(a.AttrRequest, nfsv4.FATTR4_TIME_MODIFY_SET) {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	// The reply so far: verifier (8) + entries + value_follows (4) + eof (4)
	// inside the op result (status 4 + opcode 4).
	maxcount := int(min(a.Maxcount, c.s.cfg.MaxIO+64<<10))
	used := 8 + 8 + 8
	if maxcount < used+32 {
		return fail(nfsv4.NFS4ERR_TOOSMALL)
	}
	dircount := int(a.Dircount)
	if dircount == 0 {
		dircount = maxcount
	}
	// Inode number, type and (for the file handle) generation come with
	// the entry (fs.DirEntry): the engine reads no inode for them.
	withAttr := false
	forEachBit(a.AttrRequest, func(bit uint32) bool {
		switch bit {
		case nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MOUNTED_ON_FILEID, nfsv4.FATTR4_RDATTR_ERROR, nfsv4.FATTR4_TYPE,
			nfsv4.FATTR4_FILEHANDLE:
			return true
		}
		withAttr = true
		return false
	})
	withGen := bmHas(a.AttrRequest, nfsv4.FATTR4_FILEHANDLE)
	var sfs *fs.StatFS
	if needsStatFS(a.AttrRequest) {
		st, err := c.s.fs.StatFS(c.ctx)
		if err != nil {
			return fail(c.s.toStatus(c.ctx, "READDIR", err, aboutHandle))
		}
		sfs = &st
	}
	var head *nfsv4.Entry4
	tail := &head
	cookie := a.Cookie
	eof := false
	names := 0
	full := false
	for !full && !eof {
		batch := min(max(maxcount/64, 16), 1024)
		var ents []fs.DirEntry
		err := c.view(func(t *fs.Txn) (err error) {
			ents, eof, err = t.ReadDir(c.ctx, c.cur.ino, fs.ReadDirRequest{Cookie: cookie, Limit: batch, WithAttr: withAttr, WithGen: withGen})
			return err
		})
		if err != nil {
			return fail(c.s.toStatus(c.ctx, "READDIR", err, aboutHandle))
		}
		for i := range ents {
			e := &ents[i]
			attr := fs.Attr{Ino: e.Ino, Type: e.Type, Gen: e.Gen}
			if e.Attr != nil {
				attr = *e.Attr
			}
			var h []byte
			if bmHas(a.AttrRequest, nfsv4.FATTR4_FILEHANDLE) {
				h = c.handle(fhState{ino: attr.Ino, gen: attr.Gen})
			}
			f := c.s.encodeAttrs(a.AttrRequest, &attr, &attrContext{minor: c.minor, handle: h, statfs: sfs})
			ent := &nfsv4.Entry4{Cookie: e.Cookie, Name: e.Name, Attrs: f}
			size := 4 + ent.GetEncodedSizeBytes() - 4 // value_follows + entry without its nextentry pointer
			nameSize := 8 + 4 + (len(e.Name)+3)&^3
			if used+size > maxcount || (names > 0 && names+nameSize > dircount) {
				if head == nil {
					return fail(nfsv4.NFS4ERR_TOOSMALL)
				}
				full = true
				eof = false
				break
			}
			used += size
			names += nameSize
			*tail = ent
			tail = &ent.Nextentry
			cookie = e.Cookie
		}
		if len(ents) == 0 {
			break
		}
	}
	return &nfsv4.NfsResop4_OP_READDIR{Opreaddir: &nfsv4.Readdir4res_NFS4_OK{Resok4: nfsv4.Readdir4resok{
		Reply: nfsv4.Dirlist4{Entries: head, Eof: eof}}}}, nfsv4.NFS4_OK
}
