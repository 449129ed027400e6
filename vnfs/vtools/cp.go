package vtools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/txnfs/txnfs/vnfs"
)

// CpOptions configure Cp.
type CpOptions struct {
	// Recursive copies directories (cp -r).
	Recursive bool
	// Preserve keeps modes, ownership and times exactly (cp -p).
	Preserve bool
}

// batchFiles bounds the files handed to one vector call (for progress).
const batchFiles = 4096

// Cp copies SRC... to DST like cp(1): into DST when it is a directory,
// else to DST (one source). Files on the same NFS server are copied with
// server-side COPY (falling back to READ/WRITE); across file systems with
// vectorized reads and writes.
func Cp(ctx context.Context, env *Env, srcs []string, dst string, o CpOptions) error {
	dt, err := env.Mounts.Resolve(ctx, dst)
	if err != nil {
		return err
	}
	da := []vnfs.AttrItem{{File: vnfs.P(dt.Path), Mask: vnfs.AttrType}}
	_, err = dt.FS.VGetAttrs(ctx, da)
	if err == nil && da[0].Attr.Type == vnfs.TypeSymlink {
		// cp(1) writes through a DST that is a symbolic link (into the
		// directory it names). Files are opened without following a
		// final link, which failed with a misleading "too many levels
		// of symbolic links": resolve it locally; on a server, whose
		// links may be relative to a client's mount, refuse clearly.
		if dt.Server != "" {
			return fmt.Errorf("%s: is a symbolic link; give the path it points to (links are not followed on NFS paths)", dst)
		}
		r, rerr := filepath.EvalSymlinks(dt.Path)
		if rerr != nil {
			return fmt.Errorf("not writing through dangling symlink '%s'", dst)
		}
		dt.Path = r
		da = []vnfs.AttrItem{{File: vnfs.P(r), Mask: vnfs.AttrType}}
		_, err = dt.FS.VGetAttrs(ctx, da)
	}
	into := err == nil && da[0].Attr.Type == vnfs.TypeDir
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(dt, err)
	}
	if dt.Slash && err == nil && !into {
		return &pathError{path: dst, err: syscall.ENOTDIR}
	}
	if len(srcs) > 1 && !into {
		return fmt.Errorf("target %s is not a directory", dst)
	}
	for _, s := range srcs {
		st, err := env.Mounts.Resolve(ctx, s)
		if err != nil {
			return err
		}
		name := path.Base(st.Path) // as given, also for "link/"
		if st, err = slashDir(ctx, st, true); err != nil {
			return err
		}
		if !o.Recursive && st.Server == "" {
			// cp(1) without -r copies what a source link names.
			// Locally only: a server-side link may be relative to
			// a client's mount (NFS sources are copied as links).
			if fi, err := os.Lstat(st.Path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				r, err := filepath.EvalSymlinks(st.Path)
				if err != nil {
					return fmt.Errorf("cannot stat '%s': %s", s, Reason(err))
				}
				st.Path = r
			}
		}
		target, tname := dt, dst
		if into {
			target.Path = path.Join(dt.Path, name)
			target.Slash = false
			tname = strings.TrimSuffix(dst, "/") + "/" + name
		}
		// cp(1)'s two refusals that keep it from destroying its source:
		// a file copied onto itself would be truncated first, a tree
		// copied into itself would grow while being copied.
		if sameFile(ctx, st, target) {
			return fmt.Errorf("'%s' and '%s' are the same file", s, tname)
		}
		if within(target, st) {
			if a, err := vnfs.Stat(ctx, st.FS, st.Path); err == nil && a.Type == vnfs.TypeDir {
				return fmt.Errorf("cannot copy a directory, '%s', into itself, '%s'", s, tname)
			}
		}
		if err := copyTree(ctx, env, st, target, o); err != nil {
			return err
		}
	}
	return nil
}

func copyTree(ctx context.Context, env *Env, src, dst vnfs.Target, o CpOptions) error {
	ents, err := walk(ctx, src, vnfs.AttrStat, true)
	if err != nil {
		return err
	}
	if dst.Slash && ents[0].attr.Type != vnfs.TypeDir {
		// "cp f new/": cp(1) will not create a file named new.
		return &pathError{path: dst.Arg, err: syscall.ENOTDIR}
	}
	if ents[0].attr.Type == vnfs.TypeDir && !o.Recursive {
		return fmt.Errorf("%s: -r not specified; omitting directory", src.Arg)
	}
	dpath := func(rel string) string { return path.Join(dst.Path, rel) }
	spath := func(rel string) string { return path.Join(src.Path, rel) }
	var mk []vnfs.MkdirItem
	var files []vnfs.CopyItem
	var links []vnfs.SymlinkItem
	var attrs, dirAttrs []vnfs.AttrItem
	var bytes int64
	skipped := 0 // special files: not copied, the exit status says so
	for _, e := range ents {
		mask := vnfs.AttrMode
		if o.Preserve {
			mask |= vnfs.AttrUid | vnfs.AttrGid | vnfs.AttrAtime | vnfs.AttrMtime
		}
		item := vnfs.AttrItem{File: vnfs.P(dpath(e.rel)), Mask: mask, Attr: e.attr}
		switch e.attr.Type {
		case vnfs.TypeDir:
			// Writable while we fill it; its mode is set at the end.
			mk = append(mk, vnfs.MkdirItem{Path: dpath(e.rel), Mode: e.attr.Mode | 0o700})
			dirAttrs = append(dirAttrs, item)
		case vnfs.TypeRegular:
			files = append(files, vnfs.CopyItem{Src: vnfs.P(spath(e.rel)), Dst: vnfs.P(dpath(e.rel)),
				Length: vnfs.CopyToEnd, Flags: vnfs.Create | vnfs.Truncate | vnfs.Stable, Mode: e.attr.Mode | 0o200})
			bytes += int64(e.attr.Size)
			attrs = append(attrs, item)
		case vnfs.TypeSymlink:
			links = append(links, vnfs.SymlinkItem{Path: dpath(e.rel), Target: e.link})
			if o.Preserve {
				item.Mask &^= vnfs.AttrMode
				attrs = append(attrs, item)
			}
		default:
			fmt.Fprintf(env.Stderr, "cp: %s: skipping special file\n", display(src, spath(e.rel)))
			skipped++
		}
	}
	if len(mk) > 0 {
		if _, err := dst.FS.VMkdir(ctx, mk); err != nil {
			return wrap(dst, err)
		}
	}
	p := env.progress("cp", len(files))
	for i := 0; i < len(files); i += batchFiles {
		batch := files[i:min(len(files), i+batchFiles)]
		var err error
		switch {
		// Files are independent: their COMPOUNDs may be in flight
		// together (a failure aborts the copy anyway).
		case src.Server != "" && src.Server == dst.Server:
			_, err = vnfs.Unordered(dst.FS).VSCopy(ctx, batch)
		case src.Server == "" && dst.Server == "":
			_, err = dst.FS.VCopy(ctx, batch)
		default:
			_, err = vnfs.Transfer(ctx, src.FS, vnfs.Unordered(dst.FS), batch)
		}
		if err != nil {
			return copyErr(src, dst, batch, err)
		}
		var b int64
		for _, it := range batch {
			b += int64(it.N)
		}
		p.add(len(batch), b)
	}
	p.done()
	if len(links) > 0 {
		if _, err := dst.FS.VSymlink(ctx, links); err != nil {
			return wrap(dst, err)
		}
	}
	// Modes (and with -p owners and times) of files, then of directories
	// deepest first so that setting a parent's time is the last change.
	if !o.Preserve {
		// Without -p, files keep the mode they were created with (less
		// the umask on local file systems), as cp(1) does.
		attrs = nil
	}
	for i := len(dirAttrs) - 1; i >= 0; i-- {
		attrs = append(attrs, dirAttrs[i])
	}
	if len(attrs) > 0 {
		_, err := vnfs.Unordered(dst.FS).VSetAttrs(ctx, attrs)
		if err != nil && o.Preserve && errors.Is(err, syscall.EPERM) {
			// cp -p by a user who may not give files away: like
			// cp(1), keep modes and times, not the ownership.
			for i := range attrs {
				attrs[i].Mask &^= vnfs.AttrUid | vnfs.AttrGid
			}
			_, err = vnfs.Unordered(dst.FS).VSetAttrs(ctx, attrs)
		}
		if err != nil {
			return wrap(dst, err)
		}
	}
	if skipped == 1 {
		return fmt.Errorf("%s: 1 special file (device, FIFO, socket) not copied", src.Arg)
	}
	if skipped > 1 {
		return fmt.Errorf("%s: %d special files (devices, FIFOs, sockets) not copied", src.Arg, skipped)
	}
	return nil
}

// copyErr names the path of a failed copy: the source when reading it
// failed, the destination otherwise.
func copyErr(src, dst vnfs.Target, batch []vnfs.CopyItem, err error) error {
	var ve *vnfs.Error
	if errors.As(err, &ve) && ve.Index < len(batch) {
		it := batch[ve.Index]
		if ve.Path == it.Src.Path || ve.Op == "read" || ve.Op == "getattr" {
			return &pathError{path: display(src, it.Src.Path), err: err}
		}
		return &pathError{path: display(dst, it.Dst.Path), err: err}
	}
	return wrap(dst, err)
}
