package vnfs

import (
	"context"
	"errors"
	"fmt"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// copyTask is one COPY or CLONE: the source becomes the saved file
// handle, the destination (opened, and created if asked) the current one.
type copyTask struct {
	it       *CopyItem
	clone    bool
	src, dst target
	srcSize  uint64
}

func (t *copyTask) navDir() (string, bool) { return t.src.nav() }

func (t *copyTask) emit(b *batch, ti int) emitResult {
	m := b.mark()
	it := t.it
	srcSid := client.AnonymousStateid
	if t.src.fd != nil {
		srcSid = t.src.fd.sid
		srcSid.Seqid = 0
	}
	b.goTo(ti, t.src)
	toEnd := it.Length == CopyToEnd
	if toEnd && t.clone {
		b.cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SIZE))
		b.track(ti, respAttr, func(res nfsv4.NfsResop4) error {
			a, err := getattrRes(res)
			t.srcSize = a.Size
			return err
		})
	}
	b.cp.SaveFH()
	b.track(ti, respSmall, nil)
	b.saved = b.cur
	var dstSid nfsv4.Stateid4
	if t.dst.fd != nil {
		b.putFH(ti, t.dst.fd.fh, t.dst.fd.path)
		dstSid = t.dst.fd.sid
		dstSid.Seqid = 0
	} else {
		b.cd(ti, t.dst.dir)
		a := client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE}
		if it.Flags&Create != 0 {
			a.Create, a.Exclusive = true, it.Flags&Exclusive != 0
			a.CreateAttrs = modeAttrs(it.Mode, 0o644)
		}
		b.open(ti, t.dst.name, a, b.openOwner(), nil)
		dstSid = client.CurrentStateid
	}
	if it.Flags&Truncate != 0 {
		b.cp.SetAttr(dstSid, truncAttrs)
		b.track(ti, respSmall+16, nil)
	}
	count := it.Length
	if toEnd {
		count = 0 // RFC 7862: to the end of the source
	}
	if t.clone {
		b.cp.Clone(srcSid, dstSid, it.SrcOffset, it.DstOffset, count)
		b.track(ti, respSmall, func(nfsv4.NfsResop4) error {
			if toEnd {
				it.N = t.srcSize - min(t.srcSize, it.SrcOffset)
			} else {
				it.N = it.Length
			}
			return nil
		})
	} else {
		b.cp.Copy(srcSid, dstSid, it.SrcOffset, it.DstOffset, count)
		b.track(ti, respCopy, func(res nfsv4.NfsResop4) error {
			ok, isOK := res.(*nfsv4.NfsResop4_OP_COPY).Opcopy.(*nfsv4.Copy4res_NFS4_OK)
			if !isOK {
				return errBadReply
			}
			if len(ok.CrResok4.CrResponse.WrCallbackId) > 0 {
				return fmt.Errorf("server made a synchronous COPY asynchronous: %w", ErrNotSupported)
			}
			it.N = ok.CrResok4.CrResponse.WrCount
			return nil
		})
	}
	if t.dst.fd == nil {
		b.closeCur(ti)
	}
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	return emitDone
}

func (n *nfsFS) copyTasks(op string, items []CopyItem, clone bool) ([]task, error) {
	tasks := make([]task, len(items))
	for i := range items {
		it := &items[i]
		it.N = 0
		src, err := n.target(it.Src)
		if err == nil && src.p == "" {
			err = errIsDir
		}
		if err != nil {
			return nil, &Error{Op: op, Index: i, Path: it.Src.String(), Err: err}
		}
		dst, err := n.target(it.Dst)
		if err == nil && dst.p == "" {
			err = errIsDir
		}
		if err != nil {
			return nil, &Error{Op: op, Index: i, Path: it.Dst.String(), Err: err}
		}
		tasks[i] = &copyTask{it: it, clone: clone, src: src, dst: dst}
	}
	return tasks, nil
}

// unsupported reports whether err says the server lacks the operation.
func unsupported(err error, op nfsv4.NfsOpnum4) bool {
	var se *client.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Status {
	case nfsv4.NFS4ERR_NOTSUPP, nfsv4.NFS4ERR_OP_ILLEGAL, nfsv4.NFS4ERR_OFFLOAD_NO_REQS:
		return se.Op == op || se.Op == nfsv4.OP_ILLEGAL
	}
	return false
}

func copyNames(items []CopyItem) func(int) string {
	return func(i int) string { return items[i].Dst.String() }
}

// VSCopy implements FS.
func (n *nfsFS) VSCopy(ctx context.Context, items []CopyItem) (int, error) {
	defer n.dropCopyDsts(items)
	if n.sh.copyOK.Load() == 2 {
		if n.txn {
			return 0, fmt.Errorf("vnfs: scopy: %w", ErrNotSupported)
		}
		return n.VCopy(ctx, items)
	}
	tasks, err := n.copyTasks("scopy", items, false)
	if err != nil {
		return 0, err
	}
	k, err := n.run(ctx, runOpts{op: "scopy", names: copyNames(items), txn: n.txn}, tasks)
	if err != nil && unsupported(err, nfsv4.OP_COPY) && !n.txn {
		n.sh.copyOK.Store(2)
		j, err := n.VCopy(ctx, items[k:])
		return k + j, shift(err, k)
	}
	if err == nil {
		n.sh.copyOK.Store(1)
	}
	return k, err
}

// VClone implements FS.
func (n *nfsFS) VClone(ctx context.Context, items []CopyItem) (int, error) {
	defer n.dropCopyDsts(items)
	if n.sh.cloneOK.Load() == 2 {
		return 0, &Error{Op: "clone", Index: 0, Path: items[0].Dst.String(), Err: ErrNotSupported}
	}
	tasks, err := n.copyTasks("clone", items, true)
	if err != nil {
		return 0, err
	}
	k, err := n.run(ctx, runOpts{op: "clone", names: copyNames(items), txn: n.txn}, tasks)
	if err != nil && unsupported(err, nfsv4.OP_CLONE) {
		n.sh.cloneOK.Store(2)
		var e *Error
		if errors.As(err, &e) {
			e.Err = fmt.Errorf("%w (%v)", ErrNotSupported, e.Err)
		}
	}
	return k, err
}

// copyBudget bounds the bytes VCopy holds in memory at once.
const copyBudget = 64 << 20

// VCopy implements FS: sizes (VGetAttrs, for items copying to the end),
// then VRead of the sources and VWrite of the destinations, a group of
// items at a time.
func (n *nfsFS) VCopy(ctx context.Context, items []CopyItem) (int, error) {
	defer n.dropCopyDsts(items)
	if n.txn {
		// Reads and writes in one multi-compound transaction.
		tx, err := n.begin(ctx)
		if err != nil {
			return 0, fmt.Errorf("vnfs: copy: %w", err)
		}
		defer tx.Close()
		if _, err := Transfer(ctx, tx, tx, items); err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("vnfs: copy: %w", err)
		}
		return len(items), nil
	}
	return Transfer(ctx, n, n, items)
}

// Transfer copies ranges from files of src to files of dst (which may be
// different file systems, e.g. local and NFS) by vectorized reads and
// writes: a VGetAttrs for the lengths of items copying to the end, then,
// for groups of items holding at most 64 MiB, one VRead and one VWrite.
// Items larger than a group are copied in pieces. Results and failure
// semantics are those of a vector call; on failure the failed item may be
// partly written.
func Transfer(ctx context.Context, src, dst FS, items []CopyItem) (int, error) {
	return vcopy(ctx, src, dst, items)
}

func vcopy(ctx context.Context, f, g FS, items []CopyItem) (int, error) {
	for i := range items {
		items[i].N = 0
	}
	// Lengths.
	var st []AttrItem
	var stIdx []int
	for i := range items {
		if items[i].Length == CopyToEnd {
			st = append(st, AttrItem{File: items[i].Src, Mask: AttrSize})
			stIdx = append(stIdx, i)
		}
	}
	length := make([]uint64, len(items))
	for i := range items {
		length[i] = items[i].Length
	}
	limit := len(items)
	var stErr error
	if len(st) > 0 {
		k, err := f.VGetAttrs(ctx, st)
		if err != nil {
			j, e := reindex(shift(err, 0), stIdx, k)
			limit, stErr = j, e
		}
		for j := 0; j < k; j++ {
			it := &items[stIdx[j]]
			length[stIdx[j]] = st[j].Attr.Size - min(st[j].Attr.Size, it.SrcOffset)
		}
	}
	// Pieces of at most copyBudget bytes, grouped up to copyBudget.
	type piece struct {
		item   int
		srcOff uint64
		dstOff uint64
		n      int
		first  bool
	}
	var group []piece
	var groupBytes int
	flush := func() (int, error) {
		if len(group) == 0 {
			return -1, nil
		}
		ios := make([]IO, len(group))
		for j, p := range group {
			ios[j] = IO{File: items[p.item].Src, Offset: p.srcOff, Data: make([]byte, p.n)}
		}
		k, rerr := f.VRead(ctx, ios)
		wios := make([]IO, k)
		for j := 0; j < k; j++ {
			p := group[j]
			it := &items[p.item]
			var flags IOFlags
			if p.first {
				flags = it.Flags & (Create | Exclusive | Truncate)
			}
			wios[j] = IO{File: it.Dst, Offset: p.dstOff, Data: ios[j].Data[:ios[j].N], Flags: flags | it.Flags&Stable, Mode: it.Mode}
		}
		w, werr := g.VWrite(ctx, wios)
		for j := 0; j < w; j++ {
			items[group[j].item].N += uint64(wios[j].N)
		}
		fail := func(err error) (int, error) {
			j := 0
			var e *Error
			if errors.As(err, &e) {
				j = min(e.Index, len(group)-1)
				e.Op, e.Index = "copy", group[j].item
			}
			return group[j].item, err
		}
		if werr != nil {
			return fail(werr)
		}
		if rerr != nil {
			return fail(rerr)
		}
		group, groupBytes = group[:0], 0
		return -1, nil
	}
	for i := 0; i < limit; i++ {
		it := &items[i]
		rest := length[i]
		off := uint64(0)
		first := true
		for first || rest > 0 {
			c := int(min(rest, copyBudget))
			if groupBytes+c > copyBudget {
				if k, err := flush(); err != nil {
					return k, err
				}
			}
			group = append(group, piece{item: i, srcOff: it.SrcOffset + off, dstOff: it.DstOffset + off, n: c, first: first})
			groupBytes += c
			rest -= uint64(c)
			off += uint64(c)
			first = false
		}
	}
	if k, err := flush(); err != nil {
		return k, err
	}
	if stErr != nil {
		return limit, stErr
	}
	return len(items), nil
}

// dropCopyDsts forgets the cached data of the destinations of a copy.
func (n *nfsFS) dropCopyDsts(items []CopyItem) {
	if n.sh.cache == nil {
		return
	}
	for i := range items {
		n.dropFiles(items[i].Dst)
	}
}
