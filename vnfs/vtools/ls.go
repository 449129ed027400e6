package vtools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/user"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txnfs/txnfs/vnfs"
)

// LsOptions configure Ls.
type LsOptions struct {
	Long      bool // -l
	Recursive bool // -R
	AlmostAll bool // -A: include dot files
	All       bool // -a: include dot files and the "." and ".." entries
}

// Ls lists like GNU ls (in the C locale, output not to a terminal): file
// arguments first, then directories, names sorted bytewise, -R depth-first
// with "dir:" headers. Directory contents come from one recursive VListDir
// with attributes (and one VReadlink for the symlinks) per argument.
func Ls(ctx context.Context, env *Env, args []string, o LsOptions) (err error) {
	if len(args) == 0 {
		args = []string{"."}
	}
	w := bufio.NewWriter(env.Stdout)
	defer func() {
		// A listing that did not reach its file is an error (ls >
		// /dev/full, a full disk), as in GNU ls.
		if ferr := w.Flush(); ferr != nil && err == nil {
			err = fmt.Errorf("write error: %w", ferr)
		}
	}()
	l := &lister{env: env, o: o, w: w, users: map[uint32]string{}, groups: map[uint32]string{}, now: env.now(), failed: map[string]error{}}
	type arg struct {
		name string
		t    vnfs.Target
		attr vnfs.Attr
		link string
	}
	var files, dirs []arg
	var firstErr error
	for _, a := range args {
		t, err := env.Mounts.Resolve(ctx, a)
		if err != nil {
			// GNU ls goes on with the other arguments and exits 2.
			fmt.Fprintf(env.Stderr, "ls: cannot access '%s': %s\n", a, strings.TrimPrefix(strings.TrimPrefix(err.Error(), a+": "), "'': "))
			firstErr = &ReportedError{Status: 2, Err: err}
			continue
		}
		if t, err = slashDir(ctx, t, true); err != nil {
			fmt.Fprintf(env.Stderr, "ls: cannot access '%s': %s\n", a, strings.TrimPrefix(strings.TrimPrefix(err.Error(), a+": "), "'': "))
			firstErr = &ReportedError{Status: 2, Err: err}
			continue
		}
		it := []vnfs.AttrItem{{File: vnfs.P(t.Path), Mask: vnfs.AttrStat}}
		if _, err := t.FS.VGetAttrs(ctx, it); err != nil {
			fmt.Fprintf(env.Stderr, "ls: cannot access '%s': %s\n", a, Reason(err))
			firstErr = &ReportedError{Status: 2, Err: wrap(t, err)}
			continue
		}
		x := arg{name: a, t: t, attr: it[0].Attr}
		if x.attr.Type == vnfs.TypeDir {
			dirs = append(dirs, x)
			continue
		}
		if x.attr.Type == vnfs.TypeSymlink && o.Long {
			x.link, _ = vnfs.Readlink(ctx, t.FS, t.Path)
		}
		files = append(files, x)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].name < dirs[j].name })
	if len(files) > 0 {
		ents := make([]lsEntry, len(files))
		for i, f := range files {
			ents[i] = lsEntry{name: f.name, attr: f.attr, link: f.link}
		}
		l.block(ents, false)
	}
	headers := len(dirs)+len(files) > 1 || o.Recursive
	first := len(files) == 0
	for _, d := range dirs {
		tree, err := l.load(ctx, d.t)
		if err != nil {
			return err
		}
		l.printTree(tree, d.t.Path, d.name, headers, &first)
	}
	if firstErr == nil && l.firstFailure != nil {
		return l.firstFailure
	}
	return firstErr
}

type lsEntry struct {
	name string
	attr vnfs.Attr
	link string
}

type lister struct {
	env    *Env
	o      LsOptions
	w      io.Writer
	users  map[uint32]string
	groups map[uint32]string
	now    time.Time
	dates  map[dateKey]string // date's cache
	line   []byte             // block's line buffer
	// failed holds the subdirectories -R could not list, by path;
	// firstFailure is the first reported (exit status 1, as GNU ls).
	failed       map[string]error
	firstFailure *ReportedError
}

// load lists the directory at t (recursively with -R): entries by
// directory path.
func (l *lister) load(ctx context.Context, t vnfs.Target) (map[string][]lsEntry, error) {
	mask := vnfs.AttrType
	if l.o.Long {
		mask = vnfs.AttrStat
	}
	tree := map[string][]lsEntry{t.Path: nil}
	var links []vnfs.ReadlinkItem
	type ref struct {
		dir string
		i   int
	}
	var refs []ref
	var subdirs []string // of the level-by-level listing below
	add := func(de vnfs.DirEntry) error {
		if !l.o.AlmostAll && !l.o.All && strings.HasPrefix(de.Name, ".") {
			return nil
		}
		tree[de.Dir] = append(tree[de.Dir], lsEntry{name: de.Name, attr: de.Attr})
		if de.Attr.Type == vnfs.TypeDir {
			if _, ok := tree[de.Path()]; !ok {
				tree[de.Path()] = nil
			}
			subdirs = append(subdirs, de.Path())
		}
		if l.o.Long && de.Attr.Type == vnfs.TypeSymlink {
			links = append(links, vnfs.ReadlinkItem{Path: de.Path()})
			refs = append(refs, ref{de.Dir, len(tree[de.Dir]) - 1})
		}
		return nil
	}
	err := t.FS.VListDir(ctx, []string{t.Path}, vnfs.ListOptions{Mask: mask, Recursive: l.o.Recursive}, add)
	var ve *vnfs.Error
	if err != nil && l.o.Recursive && errors.As(err, &ve) && ve.Path != "" && ve.Path != t.Path && ctx.Err() == nil {
		// A subdirectory could not be listed (permission denied, or
		// removed meanwhile): list again one directory at a time, so
		// that, like GNU ls -R, everything else is printed and each
		// failure reported where its listing would be (printTree).
		tree, links, refs, subdirs = map[string][]lsEntry{t.Path: nil}, nil, nil, nil
		queue := []string{t.Path}
		for len(queue) > 0 {
			d := queue[0]
			queue = queue[1:]
			subdirs = subdirs[:0]
			n := len(tree[d])
			if err := t.FS.VListDir(ctx, []string{d}, vnfs.ListOptions{Mask: mask}, add); err != nil {
				if d == t.Path {
					return nil, wrap(t, err)
				}
				tree[d] = tree[d][:n]
				l.failed[d] = err
				continue
			}
			queue = append(queue, subdirs...)
		}
		err = nil
	}
	if err != nil {
		return nil, wrap(t, err)
	}
	if l.o.All {
		if err := l.addDots(ctx, t, mask, tree); err != nil {
			return nil, err
		}
	}
	if len(links) > 0 {
		if _, err := t.FS.VReadlink(ctx, links); err != nil {
			return nil, wrap(t, err)
		}
		for j, r := range refs {
			tree[r.dir][r.i].link = links[j].Target
		}
	}
	return tree, nil
}

// addDots adds the "." and ".." entries of -a to every directory of tree:
// the attributes of the directory itself and of its parent, taken from the
// listing where it has them and from one VGetAttrs (the listed directory
// and its parent) otherwise. Paths are clean and never follow symlinks, so
// the parent of a path is its lexical parent; the root is its own parent.
func (l *lister) addDots(ctx context.Context, t vnfs.Target, mask vnfs.AttrMask, tree map[string][]lsEntry) error {
	top := []vnfs.AttrItem{{File: vnfs.P(t.Path), Mask: mask}, {File: vnfs.P(path.Dir(t.Path)), Mask: mask}}
	if _, err := t.FS.VGetAttrs(ctx, top); err != nil {
		return wrap(t, err)
	}
	attrs := map[string]vnfs.Attr{t.Path: top[0].Attr, path.Dir(t.Path): top[1].Attr}
	for dir, ents := range tree {
		for _, e := range ents {
			if e.attr.Type == vnfs.TypeDir {
				attrs[path.Join(dir, e.name)] = e.attr
			}
		}
	}
	for dir := range tree {
		tree[dir] = append(tree[dir], lsEntry{name: ".", attr: attrs[dir]}, lsEntry{name: "..", attr: attrs[path.Dir(dir)]})
	}
	return nil
}

// printTree prints directory dir (shown as name) and, with -R, its
// subdirectories depth-first.
func (l *lister) printTree(tree map[string][]lsEntry, dir, name string, header bool, first *bool) {
	ents := tree[dir]
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	if !*first {
		fmt.Fprintln(l.w)
	}
	*first = false
	if header {
		fmt.Fprintf(l.w, "%s:\n", name)
	}
	if l.reportFailed(dir, name) {
		return
	}
	l.block(ents, true)
	if !l.o.Recursive {
		return
	}
	for _, e := range ents {
		if e.attr.Type == vnfs.TypeDir && e.name != "." && e.name != ".." {
			sub := path.Join(dir, e.name)
			if _, ok := tree[sub]; ok {
				l.printTree(tree, sub, strings.TrimSuffix(name, "/")+"/"+e.name, true, first)
			}
		}
	}
}

// reportFailed prints, after the header of a directory that could not be
// listed, GNU ls's message (stdout is flushed first so that the message
// comes after the header on a shared terminal).
func (l *lister) reportFailed(dir, name string) bool {
	err, ok := l.failed[dir]
	if !ok {
		return false
	}
	if f, ok := l.w.(interface{ Flush() error }); ok {
		f.Flush()
	}
	fmt.Fprintf(l.env.Stderr, "ls: cannot open directory '%s': %s\n", name, Reason(err))
	if l.firstFailure == nil {
		l.firstFailure = &ReportedError{Status: 1, Err: fmt.Errorf("%s: %s", name, Reason(err))}
	}
	return true
}

// block prints entries, in long format with aligned columns. Lines are
// built with appends into one buffer, dates through a cache (fmt.Fprintf
// with padded verbs and time.Format per entry were a quarter of ls -lR's
// CPU, docs/vnfs.md "Trees, session 8"); TestLsMatchesGNU compares the
// output with GNU ls.
func (l *lister) block(ents []lsEntry, total bool) {
	if !l.o.Long {
		for _, e := range ents {
			io.WriteString(l.w, e.name)
			io.WriteString(l.w, "\n")
		}
		return
	}
	var blocks uint64
	var wl, wu, wg, ws int
	type row struct {
		mode                     [10]byte
		nlink, user, group, size string
	}
	rows := make([]row, len(ents))
	for i, e := range ents {
		a := e.attr
		blocks += a.Space
		r := &rows[i]
		r.mode = modeBytes(a)
		r.size = strconv.FormatUint(a.Size, 10)
		if a.Type == vnfs.TypeBlock || a.Type == vnfs.TypeChar {
			r.size = fmt.Sprintf("%d, %d", a.Rdev[0], a.Rdev[1])
		}
		r.nlink, r.user, r.group = strconv.FormatUint(uint64(a.Nlink), 10), l.user(a.Uid), l.group(a.Gid)
		// Widths in runes, as fmt's %*s counts them.
		wl = max(wl, utf8.RuneCountInString(r.nlink))
		wu = max(wu, utf8.RuneCountInString(r.user))
		wg = max(wg, utf8.RuneCountInString(r.group))
		ws = max(ws, utf8.RuneCountInString(r.size))
	}
	if total {
		fmt.Fprintf(l.w, "total %d\n", (blocks+1023)/1024)
	}
	line := l.line[:0]
	for i, e := range ents {
		r := &rows[i]
		line = append(line[:0], r.mode[:]...)
		line = append(padTo(append(line, ' '), r.nlink, wl), r.nlink...)
		line = padTo(append(append(line, ' '), r.user...), r.user, wu)
		line = padTo(append(append(line, ' '), r.group...), r.group, wg)
		line = append(padTo(append(line, ' '), r.size, ws), r.size...)
		line = append(line, ' ')
		line = append(line, l.date(e.attr.Mtime)...)
		line = append(line, ' ')
		line = append(line, e.name...)
		if e.attr.Type == vnfs.TypeSymlink {
			line = append(append(line, " -> "...), e.link...)
		}
		line = append(line, '\n')
		l.w.Write(line)
	}
	l.line = line
}

// padTo appends the spaces that pad s to width runes.
func padTo(b []byte, s string, width int) []byte {
	for n := utf8.RuneCountInString(s); n < width; n++ {
		b = append(b, ' ')
	}
	return b
}

// date formats a time like GNU ls: "Jan  2 15:04" within the last six
// months, else "Jan  2  2006". Results are cached by second (a tree's
// files share few distinct times; the local zone conversion and Format
// cost more than the lookup).
func (l *lister) date(t time.Time) string {
	sixMonths := time.Duration(31556952/2) * time.Second
	recent := t.After(l.now.Add(-sixMonths)) && !t.After(l.now)
	key := dateKey{sec: t.Unix(), recent: recent}
	if s, ok := l.dates[key]; ok {
		return s
	}
	var s string
	if recent {
		s = t.Local().Format("Jan _2 15:04")
	} else {
		s = t.Local().Format("Jan _2  2006")
	}
	if l.dates == nil || len(l.dates) >= 1<<16 {
		l.dates = map[dateKey]string{}
	}
	l.dates[key] = s
	return s
}

// dateKey is the key of lister.dates.
type dateKey struct {
	sec    int64
	recent bool
}

func (l *lister) user(uid uint32) string {
	if n, ok := l.users[uid]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	l.users[uid] = n
	return n
}

func (l *lister) group(gid uint32) string {
	if n, ok := l.groups[gid]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(n); err == nil {
		n = g.Name
	}
	l.groups[gid] = n
	return n
}

// modeBytes renders the type and permissions like ls -l.
func modeBytes(a vnfs.Attr) [10]byte {
	var b [10]byte
	switch a.Type { // a switch, not a map literal built per entry
	case vnfs.TypeDir:
		b[0] = 'd'
	case vnfs.TypeSymlink:
		b[0] = 'l'
	case vnfs.TypeBlock:
		b[0] = 'b'
	case vnfs.TypeChar:
		b[0] = 'c'
	case vnfs.TypeFIFO:
		b[0] = 'p'
	case vnfs.TypeSocket:
		b[0] = 's'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if a.Mode&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(bit uint32, i int, set, unset byte) {
		if a.Mode&bit != 0 {
			if b[i] == 'x' {
				b[i] = set
			} else {
				b[i] = unset
			}
		}
	}
	special(0o4000, 3, 's', 'S')
	special(0o2000, 6, 's', 'S')
	special(0o1000, 9, 't', 'T')
	return b
}
