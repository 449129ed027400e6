package vnfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// scalarFS is the baseline client of the benchmarks: it executes vector
// calls one POSIX call at a time, each POSIX call with the COMPOUNDs the
// Linux kernel client sends for it (vNFS Figure 1):
//
//	stat     PUTFH dir; LOOKUP name; GETFH; GETATTR     (cached per path)
//	open     PUTFH dir; OPEN name; GETFH; GETATTR
//	read     PUTFH fh; READ            (one per rsize)
//	write    PUTFH fh; WRITE           (one per wsize)
//	close    PUTFH fh; [COMMIT;] CLOSE (COMMIT after unstable writes)
//	mkdir    PUTFH dir; CREATE; GETFH; GETATTR
//	unlink   [PUTFH dir; LOOKUP name; GETFH; GETATTR;] PUTFH dir; REMOVE
//	         (the LOOKUP when this client changed dir since it listed it)
//	rename   PUTFH src; SAVEFH; PUTFH dst; RENAME
//	chmod... PUTFH fh; SETATTR; GETATTR (one per attribute kind)
//	readdir  PUTFH dir; READDIR (with attributes, like READDIRPLUS)
//
// Like the kernel's dentry cache it remembers the file handles of the
// directories it has looked up, and of the entries READDIR returned
// (READDIR asks for FATTR4_FILEHANDLE: the kernel primes its dentry cache
// from READDIR replies), so path walks cost one LOOKUP per new directory.
// And like the kernel, which revalidates a directory's dentries with a
// LOOKUP once the directory's change attribute moved (its own REMOVE
// moves it: nfs_force_lookup_revalidate), an unlink in a directory this
// client changed since it listed it looks the name up first: rm -r costs
// READDIR per directory and LOOKUP + REMOVE per file but the first of
// each directory. It is not meant for anything but comparisons.
type scalarFS struct {
	n    *nfsFS
	mu   sync.Mutex
	dirs map[string][]byte
	// changed holds the directories this client modified (REMOVE)
	// since it last listed them; guarded by mu.
	changed map[string]bool

	// With Config.ScalarCache, file data by file handle, like the
	// kernel's page cache: valid while the change attribute seen at OPEN
	// is the one the data was read under (close-to-open).
	cache bool
	pages map[string]*cachedFile // guarded by mu
}

// cachedFile is the cached prefix of a file: data[0:len(data)] at change;
// eof says the file ends there.
type cachedFile struct {
	change uint64
	data   []byte
	eof    bool
}

// cached serves io from the cache if the file handle's cached data was read
// under change and covers the request. Any change to the file, by this
// client or another, changes its change attribute, so stale data is never
// served after an OPEN.
func (s *scalarFS) cached(fh []byte, change uint64, io *IO) bool {
	if !s.cache {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.pages[string(fh)]
	if c == nil || c.change != change {
		return false
	}
	end := io.Offset + uint64(len(io.Data))
	if end > uint64(len(c.data)) && !c.eof {
		return false
	}
	io.N, io.EOF = 0, false
	if io.Offset < uint64(len(c.data)) {
		io.N = copy(io.Data, c.data[io.Offset:])
	}
	io.EOF = c.eof && end >= uint64(len(c.data)) && len(io.Data) > 0
	return true
}

// fill caches what a read from offset 0 returned.
func (s *scalarFS) fill(fh []byte, change uint64, io *IO) {
	if !s.cache || io.Offset != 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pages[string(fh)] = &cachedFile{change: change, data: append([]byte(nil), io.Data[:io.N]...), eof: io.EOF}
}

var _ FS = (*scalarFS)(nil)

func (s *scalarFS) Stats() Stats          { return s.n.Stats() }
func (s *scalarFS) Limits() client.Limits { return s.n.Limits() }
func (s *scalarFS) Txn() FS               { return noTxn{s} }
func (s *scalarFS) Close() error          { return s.n.Close() }
func (s *scalarFS) owner() []byte         { return s.n.owner() }
func (s *scalarFS) clientID() uint64      { return s.n.c.ClientID() }
func (s *scalarFS) do(ctx context.Context, cp *client.Compound) (*client.Reply, error) {
	rep, err := s.n.c.Do(ctx, cp)
	if err != nil {
		return nil, err
	}
	return rep, rep.Err()
}

func fhOf(res nfsv4.NfsResop4) []byte {
	return res.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
}

// dirFH walks to dir, one LOOKUP RPC per uncached component.
func (s *scalarFS) dirFH(ctx context.Context, dir string) ([]byte, error) {
	if dir == "" {
		return s.n.rootFH, nil
	}
	s.mu.Lock()
	fh, ok := s.dirs[dir]
	s.mu.Unlock()
	if ok {
		return fh, nil
	}
	pd, name := splitPath(dir)
	pfh, err := s.dirFH(ctx, pd)
	if err != nil {
		return nil, err
	}
	fh, _, err = s.lookup(ctx, pfh, name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.dirs[dir] = fh
	s.mu.Unlock()
	return fh, nil
}

// lookup is one LOOKUP RPC (stat).
func (s *scalarFS) lookup(ctx context.Context, dirfh []byte, name string) ([]byte, client.Attrs, error) {
	var cp client.Compound
	cp.PutFH(dirfh)
	cp.Lookup(name)
	cp.GetFH()
	cp.GetAttr(client.StatMask)
	rep, err := s.do(ctx, &cp)
	if err != nil {
		return nil, client.Attrs{}, err
	}
	a, err := getattrRes(rep.Results[3])
	return fhOf(rep.Results[2]), a, err
}

// resolve returns the file handle of p (stat).
func (s *scalarFS) resolve(ctx context.Context, f File) ([]byte, client.Attrs, error) {
	if f.FD != 0 {
		e, ok := s.n.fd(f.FD)
		if !ok {
			return nil, client.Attrs{}, ErrBadFD
		}
		return e.fh, client.Attrs{}, nil
	}
	p, err := cleanPath(f.Path)
	if err != nil {
		return nil, client.Attrs{}, err
	}
	if p == "" {
		var cp client.Compound
		cp.PutFH(s.n.rootFH)
		cp.GetAttr(client.StatMask)
		rep, err := s.do(ctx, &cp)
		if err != nil {
			return nil, client.Attrs{}, err
		}
		a, err := getattrRes(rep.Results[1])
		return s.n.rootFH, a, err
	}
	d, name := splitPath(p)
	dfh, err := s.dirFH(ctx, d)
	if err != nil {
		return nil, client.Attrs{}, err
	}
	return s.lookup(ctx, dfh, name)
}

// resolveFH returns the file handle of f from the handle cache (the
// kernel's dentry cache) or with a LOOKUP.
func (s *scalarFS) resolveFH(ctx context.Context, f File) ([]byte, error) {
	if f.FD == 0 {
		if p, err := cleanPath(f.Path); err == nil {
			s.mu.Lock()
			fh, ok := s.dirs[p]
			s.mu.Unlock()
			if ok {
				return fh, nil
			}
		}
	}
	fh, _, err := s.resolve(ctx, f)
	return fh, err
}

func (s *scalarFS) remember(p string, fh []byte) {
	s.mu.Lock()
	s.dirs[p] = fh
	s.mu.Unlock()
}

type scalarOpen struct {
	fh     []byte
	sid    nfsv4.Stateid4
	dirty  bool   // unstable writes to COMMIT on close
	change uint64 // change attribute at OPEN (cache revalidation)
}

// open is one OPEN RPC.
func (s *scalarFS) open(ctx context.Context, p string, a client.OpenArgs, owner []byte) (*scalarOpen, error) {
	c, err := cleanPath(p)
	if err != nil {
		return nil, err
	}
	if c == "" {
		return nil, syscall.EISDIR
	}
	d, name := splitPath(c)
	dfh, err := s.dirFH(ctx, d)
	if err != nil {
		return nil, err
	}
	var cp client.Compound
	cp.PutFH(dfh)
	a.Name = name
	cp.Open(s.clientID(), owner, a)
	cp.GetFH()
	cp.GetAttr(client.StatMask)
	rep, err := s.do(ctx, &cp)
	if err != nil {
		return nil, err
	}
	sid := rep.Results[1].(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid
	fh := fhOf(rep.Results[2])
	attrs, err := getattrRes(rep.Results[3])
	if err != nil {
		return nil, err
	}
	s.remember(c, fh)
	return &scalarOpen{fh: fh, sid: sid, change: attrs.Change}, nil
}

func (s *scalarFS) close(ctx context.Context, o *scalarOpen) error {
	var cp client.Compound
	cp.PutFH(o.fh)
	if o.dirty {
		cp.Commit()
	}
	cp.Close(o.sid)
	_, err := s.do(ctx, &cp)
	return err
}

// scalarWindow is how many READs or WRITEs of one file the baseline keeps
// in flight, like the kernel's readahead and writeback.
const scalarWindow = 8

// chunks runs fn for each rsize/wsize piece of [0, n), up to scalarWindow
// at a time, and returns the first error.
func chunks(n, size int, fn func(off, len int) error) error {
	if n <= size {
		return fn(0, n)
	}
	sem := make(chan struct{}, scalarWindow)
	errs := make(chan error, (n+size-1)/size)
	count := 0
	for off := 0; off < n; off += size {
		sem <- struct{}{}
		count++
		go func(off int) {
			defer func() { <-sem }()
			errs <- fn(off, min(size, n-off))
		}(off)
	}
	var first error
	for i := 0; i < count; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *scalarFS) read(ctx context.Context, fh []byte, sid nfsv4.Stateid4, io *IO) error {
	type piece struct {
		n   int
		eof bool
	}
	var mu sync.Mutex
	got := map[int]piece{}
	err := chunks(len(io.Data), s.n.maxRead, func(off, n int) error {
		var cp client.Compound
		cp.PutFH(fh)
		cp.Read(sid, io.Offset+uint64(off), uint32(n))
		rep, err := s.do(ctx, &cp)
		if err != nil {
			return err
		}
		r := rep.Results[1].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4
		if len(r.Data) > n { // more than asked: a broken server, not data to count
			return fmt.Errorf("%w: READ of %d bytes answered with %d", syscall.EIO, n, len(r.Data))
		}
		copy(io.Data[off:off+n], r.Data)
		mu.Lock()
		got[off] = piece{len(r.Data), r.Eof}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	for off := 0; off < len(io.Data); off += s.n.maxRead {
		p := got[off]
		io.N += p.n
		if p.eof || p.n < min(s.n.maxRead, len(io.Data)-off) {
			io.EOF = p.eof
			break
		}
	}
	if len(io.Data) == 0 {
		io.EOF = false
	}
	return nil
}

func (s *scalarFS) write(ctx context.Context, o *scalarOpen, sid nfsv4.Stateid4, io *IO, off uint64) error {
	var mu sync.Mutex
	err := chunks(len(io.Data), s.n.maxWrite, func(at, n int) error {
		if n == 0 {
			return nil
		}
		var cp client.Compound
		cp.PutFH(o.fh)
		cp.Write(sid, off+uint64(at), io.Data[at:at+n], io.Flags&Stable != 0)
		rep, err := s.do(ctx, &cp)
		if err != nil {
			return err
		}
		w := rep.Results[1].(*nfsv4.NfsResop4_OP_WRITE).Opwrite.(*nfsv4.Write4res_NFS4_OK).Resok4
		if int(w.Count) != n {
			return syscall.EIO
		}
		mu.Lock()
		io.N += n
		if w.Committed == nfsv4.UNSTABLE4 {
			o.dirty = true
		}
		mu.Unlock()
		return nil
	})
	return err
}

func scalarErr(op string, i int, name string, err error) error {
	return &Error{Op: op, Index: i, Path: name, Err: err}
}

func (s *scalarFS) loop(ctx context.Context, op string, n int, name func(int) string, fn func(i int) error) (int, error) {
	for i := 0; i < n; i++ {
		if err := fn(i); err != nil {
			return i, scalarErr(op, i, name(i), err)
		}
	}
	return n, nil
}

// VRead implements FS: open, read, close per file.
func (s *scalarFS) VRead(ctx context.Context, ios []IO) (int, error) {
	owner := s.owner()
	return s.loop(ctx, "read", len(ios), ioNames(ios), func(i int) error {
		io := &ios[i]
		io.N, io.EOF = 0, false
		if io.File.FD != 0 {
			e, ok := s.n.fd(io.File.FD)
			if !ok {
				return ErrBadFD
			}
			sid := e.sid
			sid.Seqid = 0
			return s.read(ctx, e.fh, sid, io)
		}
		o, err := s.open(ctx, io.File.Path, client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_READ}, owner)
		if err != nil {
			return err
		}
		if !s.cached(o.fh, o.change, io) {
			if err = s.read(ctx, o.fh, o.sid, io); err == nil {
				s.fill(o.fh, o.change, io)
			}
		}
		if cerr := s.close(ctx, o); err == nil {
			err = cerr
		}
		return err
	})
}

// VWrite implements FS: open (creating), write, close per file. Appends
// use the size from a GETATTR, like the kernel client.
func (s *scalarFS) VWrite(ctx context.Context, ios []IO) (int, error) {
	owner := s.owner()
	return s.loop(ctx, "write", len(ios), ioNames(ios), func(i int) error {
		io := &ios[i]
		io.N = 0
		var o *scalarOpen
		var sid nfsv4.Stateid4
		if io.File.FD != 0 {
			e, ok := s.n.fd(io.File.FD)
			if !ok {
				return ErrBadFD
			}
			o = &scalarOpen{fh: e.fh}
			sid = e.sid
			sid.Seqid = 0
		} else {
			a := client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE}
			if io.Flags&Create != 0 {
				a.Create, a.Exclusive = true, io.Flags&Exclusive != 0
				a.CreateAttrs = modeAttrs(io.Mode, 0o644)
			}
			var err error
			if o, err = s.open(ctx, io.File.Path, a, owner); err != nil {
				return err
			}
			sid = o.sid
			defer func() { s.close(ctx, o) }()
		}
		if io.Flags&Truncate != 0 {
			if err := s.setattr(ctx, o.fh, sid, client.SetAttrs{SetSize: true}); err != nil {
				return err
			}
		}
		off := io.Offset
		if off == AppendOffset {
			var cp client.Compound
			cp.PutFH(o.fh)
			cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SIZE))
			rep, err := s.do(ctx, &cp)
			if err != nil {
				return err
			}
			a, err := getattrRes(rep.Results[1])
			if err != nil {
				return err
			}
			off = a.Size
		}
		return s.write(ctx, o, sid, io, off)
	})
}

func (s *scalarFS) setattr(ctx context.Context, fh []byte, sid nfsv4.Stateid4, sa client.SetAttrs) error {
	var cp client.Compound
	cp.PutFH(fh)
	cp.SetAttr(sid, sa.Encode())
	cp.GetAttr(client.StatMask)
	_, err := s.do(ctx, &cp)
	return err
}

// VOpen implements FS.
func (s *scalarFS) VOpen(ctx context.Context, items []OpenItem) (int, error) {
	return s.loop(ctx, "open", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		it := &items[i]
		a := client.OpenArgs{}
		if it.Flags&OpenRead != 0 || it.Flags&(OpenRead|OpenWrite) == 0 {
			a.Access |= nfsv4.OPEN4_SHARE_ACCESS_READ
		}
		if it.Flags&OpenWrite != 0 {
			a.Access |= nfsv4.OPEN4_SHARE_ACCESS_WRITE
		}
		if it.Flags&OpenCreate != 0 {
			a.Create, a.Exclusive = true, it.Flags&OpenExclusive != 0
			a.CreateAttrs = modeAttrs(it.Mode, 0o644)
		}
		owner := s.owner()
		o, err := s.open(ctx, it.Path, a, owner)
		if err != nil {
			return err
		}
		if it.Flags&OpenTruncate != 0 {
			if err := s.setattr(ctx, o.fh, o.sid, client.SetAttrs{SetSize: true}); err != nil {
				return err
			}
		}
		it.FD = s.n.addFD(&fdEntry{path: it.Path, fh: o.fh, sid: o.sid, owner: owner, flags: it.Flags})
		return nil
	})
}

// VClose implements FS.
func (s *scalarFS) VClose(ctx context.Context, fds []FD) (int, error) {
	return s.loop(ctx, "close", len(fds), func(i int) string { return D(fds[i]).String() }, func(i int) error {
		e, ok := s.n.fd(fds[i])
		if !ok {
			return ErrBadFD
		}
		s.n.forgetFD(fds[i])
		return s.close(ctx, &scalarOpen{fh: e.fh, sid: e.sid})
	})
}

// VGetAttrs implements FS: one stat per item.
func (s *scalarFS) VGetAttrs(ctx context.Context, items []AttrItem) (int, error) {
	return s.loop(ctx, "getattr", len(items), func(i int) string { return items[i].File.String() }, func(i int) error {
		fh, a, err := s.resolve(ctx, items[i].File)
		if err != nil {
			return err
		}
		if items[i].File.FD != 0 {
			var cp client.Compound
			cp.PutFH(fh)
			cp.GetAttr(client.StatMask)
			rep, err := s.do(ctx, &cp)
			if err != nil {
				return err
			}
			if a, err = getattrRes(rep.Results[1]); err != nil {
				return err
			}
		}
		items[i].Attr = fromNFS(&a)
		return nil
	})
}

// VSetAttrs implements FS: stat, then one SETATTR per attribute kind
// (chmod, chown, truncate, utimes are separate system calls).
func (s *scalarFS) VSetAttrs(ctx context.Context, items []AttrItem) (int, error) {
	owner := s.owner()
	return s.loop(ctx, "setattr", len(items), func(i int) string { return items[i].File.String() }, func(i int) error {
		it := &items[i]
		fh, err := s.resolveFH(ctx, it.File)
		if err != nil {
			return err
		}
		sa := setAttrs(it.Mask, &it.Attr)
		// truncate, chown, chmod, then utimes (last, as tar does, so
		// that the other calls do not change the times).
		if sa.SetSize {
			o, err := s.open(ctx, it.File.Path, client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE}, owner)
			if err != nil {
				return err
			}
			err = s.setattr(ctx, o.fh, o.sid, client.SetAttrs{SetSize: true, Size: sa.Size})
			if cerr := s.close(ctx, o); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		parts := []client.SetAttrs{
			{SetUid: sa.SetUid, Uid: sa.Uid, SetGid: sa.SetGid, Gid: sa.Gid},
			{SetMode: sa.SetMode, Mode: sa.Mode},
			{SetAtime: sa.SetAtime, Atime: sa.Atime, SetMtime: sa.SetMtime, Mtime: sa.Mtime},
		}
		for _, p := range parts {
			if !p.Empty() {
				if err := s.setattr(ctx, fh, client.AnonymousStateid, p); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// VCopy implements FS: stat, open, read, open, write, close, close.
func (s *scalarFS) VCopy(ctx context.Context, items []CopyItem) (int, error) {
	return s.loop(ctx, "copy", len(items), copyNames(items), func(i int) error {
		it := &items[i]
		_, a, err := s.resolve(ctx, it.Src)
		if err != nil {
			return err
		}
		n := it.Length
		if n == CopyToEnd {
			n = a.Size - min(a.Size, it.SrcOffset)
		}
		buf := make([]byte, n)
		rd := []IO{{File: it.Src, Offset: it.SrcOffset, Data: buf}}
		if _, err := s.VRead(ctx, rd); err != nil {
			return errors.Unwrap(err)
		}
		wr := []IO{{File: it.Dst, Offset: it.DstOffset, Data: buf[:rd[0].N], Flags: it.Flags, Mode: it.Mode}}
		if _, err := s.VWrite(ctx, wr); err != nil {
			return errors.Unwrap(err)
		}
		it.N = uint64(wr[0].N)
		return nil
	})
}

// VSCopy implements FS: the kernel client has no server-side copy for cp.
func (s *scalarFS) VSCopy(ctx context.Context, items []CopyItem) (int, error) {
	return s.VCopy(ctx, items)
}

// VClone implements FS: open, open, CLONE, close, close.
func (s *scalarFS) VClone(ctx context.Context, items []CopyItem) (int, error) {
	return s.n.VClone(ctx, items)
}

// VMkdir implements FS.
func (s *scalarFS) VMkdir(ctx context.Context, items []MkdirItem) (int, error) {
	return s.loop(ctx, "mkdir", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		c, err := cleanPath(items[i].Path)
		if err != nil {
			return err
		}
		if c == "" {
			return syscall.EEXIST
		}
		d, name := splitPath(c)
		dfh, err := s.dirFH(ctx, d)
		if err != nil {
			return err
		}
		var cp client.Compound
		cp.PutFH(dfh)
		cp.Mkdir(name, modeAttrs(items[i].Mode, 0o755))
		cp.GetFH()
		cp.GetAttr(client.StatMask)
		rep, err := s.do(ctx, &cp)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.dirs[c] = fhOf(rep.Results[2])
		s.mu.Unlock()
		return nil
	})
}

func (s *scalarFS) parent(p string) ([]byte, string, string, error) {
	c, err := cleanPath(p)
	if err != nil {
		return nil, "", "", err
	}
	if c == "" {
		return nil, "", "", syscall.EBUSY
	}
	d, name := splitPath(c)
	return nil, d, name, nil
}

// VRemove implements FS.
func (s *scalarFS) VRemove(ctx context.Context, paths []string) (int, error) {
	return s.loop(ctx, "remove", len(paths), func(i int) string { return paths[i] }, func(i int) error {
		_, d, name, err := s.parent(paths[i])
		if err != nil {
			return err
		}
		dfh, err := s.dirFH(ctx, d)
		if err != nil {
			return err
		}
		s.mu.Lock()
		reval := s.changed[d]
		s.mu.Unlock()
		if reval {
			// The dentry's directory changed: revalidate it.
			if _, _, err := s.lookup(ctx, dfh, name); err != nil {
				return err
			}
		}
		var cp client.Compound
		cp.PutFH(dfh)
		cp.Remove(name)
		_, err = s.do(ctx, &cp)
		s.forget(path.Join(d, name))
		s.mu.Lock()
		s.changed[d] = true
		s.mu.Unlock()
		return err
	})
}

func (s *scalarFS) forget(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.dirs {
		if k == p || len(k) > len(p) && k[:len(p)+1] == p+"/" {
			delete(s.dirs, k)
		}
	}
}

// VRename implements FS.
func (s *scalarFS) VRename(ctx context.Context, items []RenameItem) (int, error) {
	return s.loop(ctx, "rename", len(items), func(i int) string { return items[i].Old }, func(i int) error {
		_, sd, sn, err := s.parent(items[i].Old)
		if err != nil {
			return err
		}
		_, dd, dn, err := s.parent(items[i].New)
		if err != nil {
			return err
		}
		sfh, err := s.dirFH(ctx, sd)
		if err != nil {
			return err
		}
		dfh, err := s.dirFH(ctx, dd)
		if err != nil {
			return err
		}
		var cp client.Compound
		cp.PutFH(sfh)
		cp.SaveFH()
		cp.PutFH(dfh)
		cp.Rename(sn, dn)
		_, err = s.do(ctx, &cp)
		s.forget(path.Join(sd, sn))
		return err
	})
}

// VHardlink implements FS.
func (s *scalarFS) VHardlink(ctx context.Context, items []LinkItem) (int, error) {
	return s.loop(ctx, "link", len(items), func(i int) string { return items[i].New }, func(i int) error {
		fh, _, err := s.resolve(ctx, P(items[i].Old))
		if err != nil {
			return err
		}
		_, dd, dn, err := s.parent(items[i].New)
		if err != nil {
			return err
		}
		dfh, err := s.dirFH(ctx, dd)
		if err != nil {
			return err
		}
		var cp client.Compound
		cp.PutFH(fh)
		cp.SaveFH()
		cp.PutFH(dfh)
		cp.Link(dn)
		_, err = s.do(ctx, &cp)
		return err
	})
}

// VSymlink implements FS.
func (s *scalarFS) VSymlink(ctx context.Context, items []SymlinkItem) (int, error) {
	return s.loop(ctx, "symlink", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		_, d, name, err := s.parent(items[i].Path)
		if err != nil {
			return err
		}
		dfh, err := s.dirFH(ctx, d)
		if err != nil {
			return err
		}
		var cp client.Compound
		cp.PutFH(dfh)
		cp.Symlink(name, items[i].Target, modeAttrs(0o777, 0o777))
		cp.GetFH()
		cp.GetAttr(client.StatMask)
		rep, err := s.do(ctx, &cp)
		if err != nil {
			return err
		}
		s.remember(path.Join(d, name), fhOf(rep.Results[2]))
		return nil
	})
}

// VReadlink implements FS: stat, then READLINK.
func (s *scalarFS) VReadlink(ctx context.Context, items []ReadlinkItem) (int, error) {
	return s.loop(ctx, "readlink", len(items), func(i int) string { return items[i].Path }, func(i int) error {
		fh, _, err := s.resolve(ctx, P(items[i].Path))
		if err != nil {
			return err
		}
		var cp client.Compound
		cp.PutFH(fh)
		cp.Readlink()
		rep, err := s.do(ctx, &cp)
		if err != nil {
			return err
		}
		items[i].Target = string(rep.Results[1].(*nfsv4.NfsResop4_OP_READLINK).Opreadlink.(*nfsv4.Readlink4res_NFS4_OK).Resok4.Link)
		return nil
	})
}

// VListDir implements FS: opendir (lookup), then READDIR RPCs with
// attributes, one directory at a time.
func (s *scalarFS) VListDir(ctx context.Context, dirs []string, opts ListOptions, fn func(DirEntry) error) error {
	mask := bitmap(opts.Mask | AttrType).With(nfsv4.FATTR4_FILEHANDLE)
	type dir struct{ p, shown string }
	level := make([]dir, len(dirs))
	for i, d := range dirs {
		c, err := cleanPath(d)
		if err != nil {
			return scalarErr("listdir", i, d, err)
		}
		level[i] = dir{c, d}
	}
	for depth := 0; len(level) > 0; depth++ {
		var next []dir
		for i, d := range level {
			fh, err := s.dirFH(ctx, d.p)
			if err != nil {
				return scalarErr("listdir", i, d.shown, err)
			}
			s.mu.Lock()
			delete(s.changed, d.p)
			s.mu.Unlock()
			var cookie uint64
			var verf [8]byte
			for {
				var cp client.Compound
				cp.PutFH(fh)
				cp.Readdir(cookie, verf, 32<<10, 64<<10, mask)
				rep, err := s.do(ctx, &cp)
				if err != nil {
					return scalarErr("listdir", i, d.shown, err)
				}
				ok := rep.Results[1].(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK)
				verf = ok.Resok4.Cookieverf
				for e := ok.Resok4.Reply.Entries; e != nil; e = e.Nextentry {
					cookie = e.Cookie
					a, err := client.DecodeAttrs(e.Attrs)
					if err != nil {
						return scalarErr("listdir", i, d.shown, fmt.Errorf("entry %q: %w", e.Name, err))
					}
					de := DirEntry{Dir: d.shown, Name: e.Name, Attr: fromNFS(&a), Depth: depth}
					if len(a.Handle) > 0 {
						s.remember(path.Join(d.p, e.Name), a.Handle)
					}
					if opts.Recursive && de.Attr.Type == TypeDir {
						next = append(next, dir{path.Join(d.p, e.Name), path.Join(d.shown, e.Name)})
					}
					if fn != nil {
						if err := fn(de); err != nil {
							return err
						}
					}
				}
				if ok.Resok4.Reply.Eof || ok.Resok4.Reply.Entries == nil {
					break
				}
			}
		}
		level = next
	}
	return nil
}
