package vnfs

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// READDIR reply budgets. A level of a listing is one round: its
// directories' READDIRs are packed into COMPOUNDs by their maxcount and
// the COMPOUNDs pipelined (Config.Window in flight). The first READDIR of
// a directory asks for the level's share of what one round can carry
// (window × maximum reply, 3/4 of it to leave room for packing), at least
// firstMaxcount (vNFS measured 3.8 KB per READDIR on the Linux tree) and
// at most moreMaxcount, so that a level of a few hundred directories fits
// in one round with a typical large directory (~200 entries with
// attributes ≈ 40 KB) complete in its first reply instead of needing a
// second, dependent round; it also spreads a level over several
// COMPOUNDs that the server runs in parallel. A directory that still
// does not fit continues with replies of the same kind of share, at
// least moreMaxcount.
const (
	firstMaxcount = 8 << 10
	moreMaxcount  = 128 << 10
)

// readdirShare is the maxcount for each of k READDIRs of one round,
// between lo and the largest that fits a reply.
func (n *nfsFS) readdirShare(k, lo int) int {
	per := n.window * n.maxResp / 4 * 3 / max(k, 1)
	return max(lo, min(per, max(moreMaxcount, lo), n.maxResp-4096))
}

type listTask struct {
	dir    string // cleaned path
	shown  string // DirEntry.Dir
	depth  int
	mask   client.Bitmap
	cookie uint64
	verf   [8]byte
	eof    bool
	max    int
	fn     func(DirEntry) error
	// dirs, if not nil, learns the handles of subdirectories.
	dirs *dirHandles
	// sub collects subdirectories (recursive listing).
	sub *[]listDir
}

type listDir struct {
	dir, shown string
}

func (t *listTask) navDir() (string, bool) { return t.dir, true }

func (t *listTask) emit(b *batch, ti int) emitResult {
	m := b.mark()
	b.cd(ti, t.dir)
	room := b.roomResp() - 32
	if room < 1024 || b.roomOps() < 1 {
		b.rollback(m)
		return emitFull
	}
	maxc := min(t.max, room)
	b.cp.Readdir(t.cookie, t.verf, uint32(maxc), uint32(maxc), t.mask)
	b.track(ti, maxc+32, t.handle)
	if b.over() {
		b.rollback(m)
		return emitFull
	}
	return emitDone
}

func (t *listTask) handle(res nfsv4.NfsResop4) error {
	ok, isOK := res.(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK)
	if !isOK {
		return errBadReply
	}
	t.verf = ok.Resok4.Cookieverf
	n := 0
	for e := ok.Resok4.Reply.Entries; e != nil; e = e.Nextentry {
		n++
		t.cookie = e.Cookie
		a, err := client.DecodeAttrs(e.Attrs)
		if err != nil {
			return fmt.Errorf("entry %q: %w", e.Name, err)
		}
		de := DirEntry{Dir: t.shown, Name: e.Name, Attr: fromNFS(&a), Depth: t.depth}
		if de.Attr.Type == TypeDir {
			t.dirs.put(joinPath(t.dir, e.Name), a.Handle)
		}
		if t.sub != nil && de.Attr.Type == TypeDir {
			*t.sub = append(*t.sub, listDir{dir: path.Join(t.dir, e.Name), shown: path.Join(t.shown, e.Name)})
		}
		if t.fn != nil {
			if err := t.fn(de); err != nil {
				return &callbackError{err}
			}
		}
	}
	t.eof = ok.Resok4.Reply.Eof
	if n == 0 && !t.eof {
		return fmt.Errorf("READDIR returned no entries and no EOF: %w", errBadReply)
	}
	return nil
}

// callbackError carries an error returned by a VListDir callback.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// VListDir implements FS.
func (n *nfsFS) VListDir(ctx context.Context, dirs []string, opts ListOptions, fn func(DirEntry) error) error {
	mask := bitmap(opts.Mask | AttrType)
	dh := n.dirs()
	if dh != nil {
		// Subdirectories' handles come with the listing: the next
		// level (and later calls) reach them with one PUTFH.
		mask = mask.With(nfsv4.FATTR4_FILEHANDLE)
	}
	level := make([]listDir, len(dirs))
	for i, d := range dirs {
		c, err := cleanPath(d)
		if err != nil {
			return &Error{Op: "listdir", Index: i, Path: d, Err: err}
		}
		level[i] = listDir{dir: c, shown: d}
	}
	for depth := 0; len(level) > 0; depth++ {
		var next []listDir
		tasks := make([]*listTask, len(level))
		first := n.readdirShare(len(level), firstMaxcount)
		for i, d := range level {
			tasks[i] = &listTask{dir: d.dir, shown: d.shown, depth: depth, mask: mask, max: first, fn: fn, dirs: dh}
			if opts.Recursive {
				// Each directory collects its own subdirectories so that
				// the next level keeps this level's order.
				tasks[i].sub = new([]listDir)
			}
		}
		pending := tasks
		for len(pending) > 0 {
			ts := make([]task, len(pending))
			for i, t := range pending {
				ts[i] = t
			}
			k, err := n.run(ctx, runOpts{op: "listdir", names: func(i int) string { return pending[i].shown }, txn: n.txn, readOnly: true}, ts)
			if err != nil {
				var ce *callbackError
				if errors.As(err, &ce) {
					return ce.err
				}
				if depth == 0 {
					var e *Error
					if errors.As(err, &e) {
						for i, t := range tasks {
							if t == pending[k] {
								e.Index = i
							}
						}
					}
				}
				return err
			}
			var more []*listTask
			for _, t := range pending {
				if !t.eof {
					more = append(more, t)
				}
			}
			pending = more
			more1 := n.readdirShare(len(pending), moreMaxcount)
			for _, t := range pending {
				t.max = more1
			}
		}
		for _, t := range tasks {
			if t.sub != nil {
				next = append(next, *t.sub...)
			}
		}
		level = next
	}
	return nil
}
