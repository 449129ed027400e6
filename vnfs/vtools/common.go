// Package vtools implements the txnfs file tools (cp, ls, rm, mkdir, tar,
// untar, clone, concat) on the vectorized API of package vnfs, the way vNFS
// ported GNU coreutils and bsdtar (FAST'17 §5.3): whole trees are listed
// with one recursive VListDir, and files, directories and links are then
// created, read, written and removed in vectors, so the number of RPCs
// grows with the number of COMPOUNDs, not of files.
//
// Arguments are local paths or nfs://HOST[:PORT]/path URLs; the path of a
// URL is taken from the server's root file handle (for NFS-Ganesha it
// starts with the export's pseudo path, e.g. nfs://host:2049/export/dir).
package vtools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/vnfs"
)

// Env is what a tool runs with.
type Env struct {
	// Mounts resolves arguments (required).
	Mounts *vnfs.Mounts
	// Stdout receives the tool's output; Stderr progress and warnings.
	Stdout, Stderr io.Writer
	// Progress enables the progress line on Stderr (set it when Stderr
	// is a terminal).
	Progress bool
	// Now is the current time (ls); default time.Now.
	Now func() time.Time
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// IsTerminal reports whether f is a terminal (isatty: not merely a
// character device, which /dev/null and /dev/full are too).
func IsTerminal(f *os.File) bool { return isatty(f) }

// display renders an FS path the way the user wrote targets. Paths in
// errors may come without their leading slash (vnfs cleans them).
func display(t vnfs.Target, p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if t.Server == "" {
		return p
	}
	return "nfs://" + t.Server + p
}

// ReportedError is returned by a tool that went on after failures it has
// already described on Stderr (ls of a missing path): the caller should
// exit with Status without printing the error again.
type ReportedError struct {
	// Status is the exit status the GNU tool gives (ls: 2 when it
	// cannot access an argument).
	Status int
	// Err is the first failure.
	Err error
}

func (e *ReportedError) Error() string { return e.Err.Error() }
func (e *ReportedError) Unwrap() error { return e.Err }

// sameFile reports whether a and b are one existing object (not following
// final symbolic links): the same device and inode locally, the same
// server and file id over NFS. Errors (a missing path) count as different.
func sameFile(ctx context.Context, a, b vnfs.Target) bool {
	if a.Server == "" && b.Server == "" {
		fa, err := os.Lstat(a.Path)
		if err != nil {
			return false
		}
		fb, err := os.Lstat(b.Path)
		return err == nil && os.SameFile(fa, fb)
	}
	// nfs://localhost:P/f and nfs://127.0.0.1:P/f: one server reached
	// twice.
	if a.Server == "" || b.Server == "" || a.Server != b.Server && !sameServer(ctx, a.Server, b.Server) {
		return false
	}
	x, err := vnfs.Stat(ctx, a.FS, a.Path)
	if err != nil {
		return false
	}
	y, err := vnfs.Stat(ctx, b.FS, b.Path)
	return err == nil && x.Ino == y.Ino && x.Type == y.Type
}

// sameServer reports whether two host:port strings reach one address.
func sameServer(ctx context.Context, a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb {
		return false
	}
	var r net.Resolver
	ia, err1 := r.LookupHost(ctx, ha)
	ib, err2 := r.LookupHost(ctx, hb)
	if err1 != nil || err2 != nil {
		return false
	}
	for _, x := range ia {
		for _, y := range ib {
			if net.ParseIP(x).Equal(net.ParseIP(y)) {
				return true
			}
		}
	}
	return false
}

// slashDir enforces the trailing slash of t's argument: it must name a
// directory. A symbolic link to one is followed when follow is set (ls,
// cp, tar: the directory it names; locally only — a server-side link may
// be relative to a client's mount) and refused otherwise (rm: GNU rm
// refuses "link/"). A missing path passes (the tool reports it).
func slashDir(ctx context.Context, t vnfs.Target, follow bool) (vnfs.Target, error) {
	if !t.Slash {
		return t, nil
	}
	a, err := vnfs.Stat(ctx, t.FS, t.Path)
	switch {
	case err != nil || a.Type == vnfs.TypeDir:
		return t, nil
	case a.Type == vnfs.TypeSymlink && follow && t.Server == "":
		if r, err := filepath.EvalSymlinks(t.Path); err == nil {
			if fi, err := os.Stat(r); err == nil && fi.IsDir() {
				t.Path = r
				return t, nil
			}
		}
	case a.Type == vnfs.TypeSymlink && follow:
		return t, fmt.Errorf("%s: is a symbolic link; give the path it points to (links are not followed on NFS paths)", t.Arg)
	}
	return t, &pathError{path: t.Arg, err: syscall.ENOTDIR}
}

// isDots reports whether the last component of arg is "." or ".." (rm
// refuses them, as GNU rm).
func isDots(arg string) bool {
	if vnfs.IsNFS(arg) {
		if i := strings.Index(arg[len("nfs://"):], "/"); i >= 0 {
			arg = arg[len("nfs://")+i:]
		} else {
			return false
		}
	}
	b := strings.TrimRight(arg, "/")
	if i := strings.LastIndex(b, "/"); i >= 0 {
		b = b[i+1:]
	}
	return b == "." || b == ".."
}

// within reports whether inner is dir or below it (lexically, same file
// system).
func within(inner, dir vnfs.Target) bool {
	return inner.Server == dir.Server && (inner.Path == dir.Path || strings.HasPrefix(inner.Path, strings.TrimSuffix(dir.Path, "/")+"/"))
}

// Reason renders an error for users: the errno text, with the NFS status
// when there is one.
func Reason(err error) string {
	var se *client.StatusError
	var errno syscall.Errno
	switch {
	case errors.Is(err, vnfs.ErrTxnUnsupported):
		return "the server does not support transactions"
	case errors.As(err, &se):
		return fmt.Sprintf("%s (%s)", strings.ToLower(client.Errno(se.Status).Error()[:1])+client.Errno(se.Status).Error()[1:], client.StatusName(se.Status))
	case errors.As(err, &errno):
		return errno.Error()
	}
	var ve *vnfs.Error
	if errors.As(err, &ve) {
		return ve.Err.Error()
	}
	return err.Error()
}

// pathError is a tool error naming a path.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + Reason(e.err) }
func (e *pathError) Unwrap() error { return e.err }

// wrap turns a vnfs error into one naming the user-visible path.
func wrap(t vnfs.Target, err error) error {
	if err == nil {
		return nil
	}
	var ve *vnfs.Error
	if errors.As(err, &ve) && ve.Path != "" {
		return &pathError{path: display(t, ve.Path), err: err}
	}
	return &pathError{path: t.Arg, err: err}
}

// progress prints "\rverb: n/total files, bytes" at most ten times a
// second when enabled.
type progress struct {
	mu    sync.Mutex
	on    bool
	w     io.Writer
	verb  string
	files int
	total int
	bytes int64
	last  time.Time
}

func (e *Env) progress(verb string, total int) *progress {
	return &progress{on: e.Progress && e.Stderr != nil, w: e.Stderr, verb: verb, total: total}
}

func (p *progress) add(files int, bytes int64) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files += files
	p.bytes += bytes
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.print()
}

func (p *progress) print() {
	bar := ""
	if p.total > 0 {
		const width = 30
		k := min(width, p.files*width/p.total)
		bar = "[" + strings.Repeat("#", k) + strings.Repeat(" ", width-k) + "] "
	}
	fmt.Fprintf(p.w, "\r%s: %s%d/%d files, %s ", p.verb, bar, p.files, p.total, humanBytes(p.bytes))
}

func (p *progress) done() {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.print()
	fmt.Fprintln(p.w)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// entry is one object of a listed tree, relative to the tree's root.
type entry struct {
	rel  string // "" for the root itself
	attr vnfs.Attr
	link string // symlink target
}

// walk lists the tree at t (recursively when it is a directory) with the
// attributes in mask. Entries come parents first (breadth-first), each
// directory's entries sorted by name.
func walk(ctx context.Context, t vnfs.Target, mask vnfs.AttrMask, readlinks bool) ([]entry, error) {
	root := []vnfs.AttrItem{{File: vnfs.P(t.Path), Mask: mask | vnfs.AttrType}}
	if _, err := t.FS.VGetAttrs(ctx, root); err != nil {
		return nil, wrap(t, err)
	}
	out := []entry{{rel: "", attr: root[0].Attr}}
	if root[0].Attr.Type == vnfs.TypeDir {
		byDir := map[string][]entry{}
		var order []string
		err := t.FS.VListDir(ctx, []string{t.Path}, vnfs.ListOptions{Mask: mask, Recursive: true}, func(de vnfs.DirEntry) error {
			rel := strings.TrimPrefix(strings.TrimPrefix(de.Dir, t.Path), "/")
			if _, ok := byDir[rel]; !ok {
				order = append(order, rel)
			}
			byDir[rel] = append(byDir[rel], entry{rel: path.Join(rel, de.Name), attr: de.Attr})
			return nil
		})
		if err != nil {
			return nil, wrap(t, err)
		}
		// Breadth-first, parents first, sorted within a directory.
		queue := []string{""}
		for len(queue) > 0 {
			d := queue[0]
			queue = queue[1:]
			ents := byDir[d]
			sortEntries(ents)
			for _, e := range ents {
				out = append(out, e)
				if e.attr.Type == vnfs.TypeDir {
					queue = append(queue, e.rel)
				}
			}
		}
	}
	if readlinks {
		var rl []vnfs.ReadlinkItem
		var idx []int
		for i, e := range out {
			if e.attr.Type == vnfs.TypeSymlink {
				rl = append(rl, vnfs.ReadlinkItem{Path: path.Join(t.Path, e.rel)})
				idx = append(idx, i)
			}
		}
		if len(rl) > 0 {
			if _, err := t.FS.VReadlink(ctx, rl); err != nil {
				return nil, wrap(t, err)
			}
			for j, i := range idx {
				out[i].link = rl[j].Target
			}
		}
	}
	return out, nil
}

func sortEntries(es []entry) {
	sort.Slice(es, func(i, j int) bool { return path.Base(es[i].rel) < path.Base(es[j].rel) })
}
