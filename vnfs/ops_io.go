package vnfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

var errBadReply = errors.New("vnfs: unexpected reply from server")

// open adds OPEN of name in the current directory (or of the current file
// when name is ""). The open is recorded as dangling until its CLOSE
// succeeds, so that a failure in between does not leak open state.
func (b *batch) open(task int, name string, a client.OpenArgs, owner []byte, onSid func(nfsv4.Stateid4, []byte)) {
	a.Name = name
	b.cp.Open(b.n.c.ClientID(), owner, a)
	full := b.cur.path
	if name != "" {
		full = path.Join(b.cur.path, name)
	}
	b.track(task, respOpen, func(res nfsv4.NfsResop4) error {
		ok, isOK := res.(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK)
		if !isOK {
			return errBadReply
		}
		sid := ok.Resok4.Stateid
		b.opens = append(b.opens, openRec{task: task, path: full, sid: sid})
		if onSid != nil {
			onSid(sid, nil)
		}
		return nil
	})
	b.cur = pos{path: full, valid: b.cur.valid}
}

// closeCur adds CLOSE of the current stateid.
func (b *batch) closeCur(task int) {
	b.cp.Close(client.CurrentStateid)
	b.track(task, respClose, func(nfsv4.NfsResop4) error {
		b.forgetOpen(task)
		return nil
	})
}

// forgetOpen drops the most recent dangling open of task.
func (b *batch) forgetOpen(task int) {
	for i := len(b.opens) - 1; i >= 0; i-- {
		if b.opens[i].task == task {
			b.opens = append(b.opens[:i], b.opens[i+1:]...)
			return
		}
	}
}

var truncAttrs = func() nfsv4.Fattr4 {
	s := client.SetAttrs{SetSize: true}
	return s.Encode()
}()

// createTruncAttrs are the createattrs of an OPEN that creates or
// truncates: mode (default 0644) and size 0.
func createTruncAttrs(mode uint32) nfsv4.Fattr4 {
	if mode == 0 {
		mode = 0o644
	}
	s := client.SetAttrs{SetSize: true, SetMode: true, Mode: mode}
	return s.Encode()
}

// ioTask is one IO of VRead or VWrite.
type ioTask struct {
	n         *nfsFS
	io        *IO
	write     bool
	dir, name string
	fd        *fdEntry
	base      uint64 // file offset of io.Data[0]
	appendExt bool   // write at AppendOffset
	done      int    // bytes of io.Data already sent
	started   bool
	// fill: the data read is for the cache; every COMPOUND of the item
	// takes its attributes before its READs (cache.go).
	fill      bool
	fillFH    []byte       // GETFH after the OPEN (path reads)
	fillAttrs []cacheAttrs // one GETATTR per COMPOUND of the item
	fillBad   bool         // an attribute was missing
}

func (t *ioTask) navDir() (string, bool) {
	if t.fd != nil {
		return "", false
	}
	return t.dir, true
}

func (t *ioTask) emit(b *batch, ti int) emitResult {
	io := t.io
	total := len(io.Data)
	if t.started && t.done >= total {
		return emitDone
	}
	m := b.mark()
	var sid nfsv4.Stateid4
	truncated := false // by the OPEN
	if t.fd != nil {
		b.putFH(ti, t.fd.fh, t.fd.path)
		sid = t.fd.sid
		sid.Seqid = 0 // the latest seqid (RFC 8881 §8.2.2)
	} else {
		b.cd(ti, t.dir)
		b.keepDir(ti, t.dir)
		a := client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_READ}
		if t.write {
			a.Access = nfsv4.OPEN4_SHARE_ACCESS_WRITE
			if !t.started && io.Flags&Create != 0 {
				a.Create, a.Exclusive = true, io.Flags&Exclusive != 0
				if !a.Exclusive && io.Flags&Truncate != 0 {
					// An UNCHECKED4 create with size 0 truncates an
					// existing file (RFC 8881 §18.16.3): one
					// operation less than OPEN + SETATTR.
					a.CreateAttrs = createTruncAttrs(io.Mode)
					truncated = true
				} else {
					a.CreateAttrs = modeAttrs(io.Mode, 0o644)
				}
			}
		}
		b.open(ti, t.name, a, b.openOwner(), nil)
		sid = client.CurrentStateid
		if t.fill && !t.started {
			b.cp.GetFH()
			b.track(ti, respFH, func(res nfsv4.NfsResop4) error {
				ok, isOK := res.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK)
				if !isOK {
					return errBadReply
				}
				t.fillFH = ok.Resok4.Object
				return nil
			})
		}
	}
	if t.fill {
		b.cp.GetAttr(cacheAttrMask)
		b.track(ti, respAttr, t.recordAttrs)
	}
	if t.write && !t.started && io.Flags&Truncate != 0 && !truncated {
		b.cp.SetAttr(sid, truncAttrs)
		b.track(ti, respSmall+16, nil)
	}
	planned := t.done
	for planned < total && b.roomOps() >= 2 {
		rest := total - planned
		var chunk int
		if t.write {
			chunk = min(rest, t.n.maxWrite, b.roomReq()-writeHdr-64) // room for CLOSE
		} else {
			chunk = min(rest, t.n.maxRead, b.roomResp()-respReadHdr-respClose)
		}
		if chunk <= 0 || chunk < min(rest, 4096) {
			break
		}
		off := planned
		if t.write {
			o := t.base + uint64(off)
			if t.appendExt {
				o = AppendOffset
			}
			b.cp.Write(sid, o, io.Data[off:off+chunk], io.Flags&Stable != 0)
			b.track(ti, respWrite, func(res nfsv4.NfsResop4) error {
				ok, isOK := res.(*nfsv4.NfsResop4_OP_WRITE).Opwrite.(*nfsv4.Write4res_NFS4_OK)
				if !isOK {
					return errBadReply
				}
				if io.N == off {
					io.N += min(int(ok.Resok4.Count), chunk)
				}
				return nil
			})
		} else {
			b.cp.Read(sid, t.base+uint64(off), uint32(chunk))
			b.track(ti, respReadHdr+chunk, func(res nfsv4.NfsResop4) error {
				ok, isOK := res.(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK)
				if !isOK {
					return errBadReply
				}
				if io.N == off && !io.EOF {
					c := copy(io.Data[off:off+chunk], ok.Resok4.Data)
					io.N += c
					io.EOF = ok.Resok4.Eof
				}
				return nil
			})
		}
		planned += chunk
	}
	if planned == t.done && total > 0 {
		b.rollback(m)
		return emitFull
	}
	if t.fd == nil {
		b.closeCur(ti)
	}
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	t.done, t.started = planned, true
	if planned < total {
		return emitMore
	}
	return emitDone
}

// ioTasks builds the tasks of a read or write vector.
func (n *nfsFS) ioTasks(ios []IO, write bool) ([]task, error) {

	tasks := make([]task, len(ios))
	for i := range ios {
		io := &ios[i]
		io.N, io.EOF = 0, false
		t := &ioTask{n: n, io: io, write: write, base: io.Offset}
		if io.File.FD != 0 {
			e, ok := n.fd(io.File.FD)
			if !ok {
				return tasks[:i], &Error{Op: opName(write), Index: i, Path: io.File.String(), Err: ErrBadFD}
			}
			t.fd = e
		} else {
			p, err := cleanPath(io.File.Path)
			if err != nil {
				return tasks[:i], &Error{Op: opName(write), Index: i, Path: io.File.Path, Err: err}
			}
			if p == "" {
				return tasks[:i], &Error{Op: opName(write), Index: i, Path: io.File.Path, Err: syscall.EISDIR}
			}
			t.dir, t.name = splitPath(p)
		}
		if write && io.Offset == AppendOffset {
			t.appendExt = true
		}
		tasks[i] = t
	}
	return tasks, nil
}

func opName(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

func ioNames(ios []IO) func(int) string {
	return func(i int) string { return ios[i].File.String() }
}

// VRead implements FS.
func (n *nfsFS) VRead(ctx context.Context, ios []IO) (int, error) {
	if n.sh.cache != nil && !n.txn && n.join.IsZero() {
		return n.cachedRead(ctx, ios)
	}
	tasks, err := n.ioTasks(ios, false)
	if err != nil {
		return 0, err
	}
	return n.readTasks(ctx, ios, tasks, nil)
}

// readTasks runs the tasks of a read vector and completes short reads.
// afterRun, if not nil, is called with the number of items done by the
// first pass, before short reads are completed.
func (n *nfsFS) readTasks(ctx context.Context, ios []IO, tasks []task, afterRun func(done int)) (int, error) {
	done, err := n.run(ctx, runOpts{op: "read", names: ioNames(ios), txn: n.txn, readOnly: true,
		reset: func(i int) { ios[i].N, ios[i].EOF = 0, false }}, tasks)
	if afterRun != nil {
		afterRun(done)
	}
	if err != nil || n.txn {
		return done, err
	}
	// A server may return fewer bytes than asked without reaching the end
	// of the file; read the rest.
	for round := 0; round < 64; round++ {
		var more []IO
		var idx []int
		for i := range ios {
			io := &ios[i]
			if _, cached := tasks[i].(*cacheTask); cached {
				continue // served from the cache, or left to cachedRead
			}
			if !io.EOF && io.N < len(io.Data) {
				more = append(more, IO{File: io.File, Offset: io.Offset + uint64(io.N), Data: io.Data[io.N:]})
				idx = append(idx, i)
			}
		}
		if len(more) == 0 {
			return len(ios), nil
		}
		tasks, _ := n.ioTasks(more, false)
		k, err := n.run(ctx, runOpts{op: "read", names: ioNames(more), readOnly: true}, tasks)
		progress := false
		for j, i := range idx {
			ios[i].N += more[j].N
			ios[i].EOF = more[j].EOF
			progress = progress || more[j].N > 0 || more[j].EOF
		}
		if err != nil {
			return reindex(err, idx, k)
		}
		if !progress {
			return len(ios), nil
		}
	}
	return len(ios), nil
}

// reindex maps the failure of a sub-vector back to the original indices.
func reindex(err error, idx []int, k int) (int, error) {
	var e *Error
	if errors.As(err, &e) && e.Index < len(idx) {
		e.Index = idx[e.Index]
		return e.Index, e
	}
	if k < len(idx) {
		return idx[k], err
	}
	return 0, err
}

// VWrite implements FS.
func (n *nfsFS) VWrite(ctx context.Context, ios []IO) (int, error) {
	if n.sh.cache != nil {
		defer func() {
			for i := range ios {
				n.dropFiles(ios[i].File)
			}
		}()
	}
	tasks, err := n.ioTasks(ios, true)
	if err != nil {
		return 0, err
	}
	if err := n.prepareAppends(ctx, ios, tasks); err != nil {
		return 0, err
	}
	done, err := n.run(ctx, runOpts{op: "write", names: ioNames(ios), txn: n.txn}, tasks)
	if err != nil && n.sh.appendOK.Load() == 0 && n.appendRejected(err, ios) {
		// The server rejected the append offset: it lacks the extension.
		// Nothing of the failed item beyond its OPEN ran; emulate from it.
		n.sh.appendOK.Store(2)
		var e *Error
		errors.As(err, &e)
		rest := ios[e.Index:]
		k, err := n.VWrite(ctx, rest)
		return e.Index + k, shift(err, e.Index)
	}
	if err != nil || n.txn {
		return done, err
	}
	for round := 0; round < 64; round++ {
		var more []IO
		var idx []int
		for i := range ios {
			io := &ios[i]
			if io.N < len(io.Data) {
				t := tasks[i].(*ioTask)
				off := t.base + uint64(io.N)
				if t.appendExt {
					off = AppendOffset
				}
				more = append(more, IO{File: io.File, Offset: off, Data: io.Data[io.N:], Flags: io.Flags &^ (Create | Truncate | Exclusive)})
				idx = append(idx, i)
			}
		}
		if len(more) == 0 {
			return len(ios), nil
		}
		tasks, _ := n.ioTasks(more, true)
		k, err := n.run(ctx, runOpts{op: "write", names: ioNames(more)}, tasks)
		progress := false
		for j, i := range idx {
			ios[i].N += more[j].N
			progress = progress || more[j].N > 0
		}
		if err != nil {
			return reindex(err, idx, k)
		}
		if !progress {
			return reindex(&Error{Op: "write", Index: 0, Path: more[0].File.String(), Err: syscall.EIO}, idx, 0)
		}
	}
	return len(ios), nil
}

func shift(err error, by int) error {
	var e *Error
	if errors.As(err, &e) {
		e.Index += by
	}
	return err
}

// appendRejected reports whether err is a WRITE at the append offset
// rejected by a server without the extension.
func (n *nfsFS) appendRejected(err error, ios []IO) bool {
	var e *Error
	if !errors.As(err, &e) || ios[e.Index].Offset != AppendOffset {
		return false
	}
	var se *client.StatusError
	if !errors.As(err, &se) || se.Op != nfsv4.OP_WRITE {
		return false
	}
	return se.Status == nfsv4.NFS4ERR_INVAL || se.Status == nfsv4.NFS4ERR_FBIG || se.Status == nfsv4.NFS4ERR_NOTSUPP
}

// prepareAppends turns appends into writes at the current size when the
// server lacks the append extension (not atomic: another client appending
// at the same time may interleave).
func (n *nfsFS) prepareAppends(ctx context.Context, ios []IO, tasks []task) error {
	if n.sh.appendOK.Load() != 2 {
		return nil
	}
	var items []AttrItem
	var idx []int
	for i := range ios {
		if ios[i].Offset == AppendOffset {
			items = append(items, AttrItem{File: ios[i].File, Mask: AttrSize})
			idx = append(idx, i)
		}
	}
	if len(items) == 0 {
		return nil
	}
	if n.txn {
		return fmt.Errorf("vnfs: write: %w (the server lacks the append extension)", ErrTxnUnsupported)
	}
	// Files to be created may not exist yet: stat one by one after the
	// first failure.
	for start := 0; start < len(items); {
		k, err := n.getattrs(ctx, items[start:], false)
		start += k
		if err == nil {
			break
		}
		i := idx[start]
		if errors.Is(err, syscall.ENOENT) && ios[i].Flags&Create != 0 {
			items[start].Attr.Size = 0
			start++
			continue
		}
		_, err = reindex(shift(err, start), idx, start)
		return err
	}
	// Appends to the same file in one vector follow each other.
	next := map[File]uint64{}
	for j, i := range idx {
		t := tasks[i].(*ioTask)
		t.appendExt = false
		key := ios[i].File
		if key.FD == 0 {
			key.Path, _ = cleanPath(key.Path)
		}
		off, ok := next[key]
		if !ok {
			off = items[j].Attr.Size
		}
		t.base = off
		next[key] = off + uint64(len(ios[i].Data))
	}
	return nil
}

// VOpen implements FS.
func (n *nfsFS) VOpen(ctx context.Context, items []OpenItem) (int, error) {
	if n.sh.cache != nil {
		defer func() {
			for i := range items {
				if items[i].Flags&(OpenWrite|OpenTruncate|OpenCreate) != 0 {
					n.dropPaths(items[i].Path)
				}
			}
		}()
	}
	tasks := make([]task, len(items))
	for i := range items {
		p, err := cleanPath(items[i].Path)
		if err != nil || p == "" {
			if err == nil {
				err = syscall.EISDIR
			}
			return 0, &Error{Op: "open", Index: i, Path: items[i].Path, Err: err}
		}
		dir, name := splitPath(p)
		tasks[i] = &openTask{n: n, it: &items[i], dir: dir, name: name, owner: n.owner()}
	}
	k, err := n.run(ctx, runOpts{op: "open", names: func(i int) string { return items[i].Path }, txn: n.txn}, tasks)
	if err != nil && n.txn {
		for i := range items {
			if items[i].FD != 0 {
				n.forgetFD(items[i].FD)
				items[i].FD = 0
			}
		}
	}
	return k, err
}

type openTask struct {
	n         *nfsFS
	it        *OpenItem
	dir, name string
	owner     []byte
	sid       nfsv4.Stateid4
}

func (t *openTask) navDir() (string, bool) { return t.dir, true }

func (t *openTask) emit(b *batch, ti int) emitResult {
	m := b.mark()
	b.cd(ti, t.dir)
	b.keepDir(ti, t.dir)
	f := t.it.Flags
	a := client.OpenArgs{}
	if f&OpenRead != 0 || f&(OpenRead|OpenWrite) == 0 {
		a.Access |= nfsv4.OPEN4_SHARE_ACCESS_READ
	}
	if f&OpenWrite != 0 {
		a.Access |= nfsv4.OPEN4_SHARE_ACCESS_WRITE
	}
	if f&OpenCreate != 0 {
		a.Create, a.Exclusive = true, f&OpenExclusive != 0
		a.CreateAttrs = modeAttrs(t.it.Mode, 0o644)
	}
	b.open(ti, t.name, a, t.owner, func(sid nfsv4.Stateid4, _ []byte) { t.sid = sid })
	if f&OpenTruncate != 0 {
		b.cp.SetAttr(client.CurrentStateid, truncAttrs)
		b.track(ti, respSmall+16, nil)
	}
	full := b.cur.path
	b.cp.GetFH()
	b.track(ti, respFH, func(res nfsv4.NfsResop4) error {
		ok, isOK := res.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK)
		if !isOK {
			return errBadReply
		}
		b.forgetOpen(ti)
		t.it.FD = t.n.addFD(&fdEntry{path: full, fh: ok.Resok4.Object, sid: t.sid, owner: t.owner, flags: f})
		return nil
	})
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	return emitDone
}

func (n *nfsFS) addFD(e *fdEntry) FD {
	n.sh.mu.Lock()
	defer n.sh.mu.Unlock()
	n.sh.nextFD++
	n.sh.fds[n.sh.nextFD] = e
	return n.sh.nextFD
}

func (n *nfsFS) forgetFD(fd FD) {
	n.sh.mu.Lock()
	defer n.sh.mu.Unlock()
	delete(n.sh.fds, fd)
}

// VClose implements FS.
func (n *nfsFS) VClose(ctx context.Context, fds []FD) (int, error) {
	tasks := make([]task, len(fds))
	for i, fd := range fds {
		e, ok := n.fd(fd)
		if !ok {
			return 0, &Error{Op: "close", Index: i, Path: File{FD: fd}.String(), Err: ErrBadFD}
		}
		tasks[i] = &closeTask{n: n, fd: fd, e: e}
	}
	// Descriptors are released even if the server fails the CLOSE (its
	// state is then gone or will expire with the lease).
	defer func() {
		for _, fd := range fds {
			n.forgetFD(fd)
		}
	}()
	return n.run(ctx, runOpts{op: "close", names: func(i int) string { return File{FD: fds[i]}.String() }, txn: n.txn}, tasks)
}

type closeTask struct {
	n  *nfsFS
	fd FD
	e  *fdEntry
}

func (t *closeTask) navDir() (string, bool) { return "", false }

func (t *closeTask) emit(b *batch, ti int) emitResult {
	m := b.mark()
	b.putFH(ti, t.e.fh, t.e.path)
	sid := t.e.sid
	sid.Seqid = 0
	b.cp.Close(sid)
	b.track(ti, respClose, nil)
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	return emitDone
}
