package fs

import (
	"context"
	"errors"
	"fmt"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// CheckReport is the result of a consistency check.
type CheckReport struct {
	Inodes, Dirs, Files, Symlinks, Orphans int
	Slices                                 int    // distinct slice pointers verified
	SliceBytes                             uint64 // bytes read and checksummed
	Problems                               []string
}

// OK reports whether no problem was found.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

const maxProblems = 1000

func (r *CheckReport) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Check verifies the whole file system in one snapshot: every record
// decodes, directory entries and their cookie index agree, link counts
// match, every directory is reachable from the root through its parent
// chain, span records belong to existing files, do not overlap, end with an
// open record, account for the inode's Used and hold nothing past the end of
// file, and every slice pointer resolves to bytes whose checksum matches.
// Problems are reported, not repaired. An error means the check itself
// could not run.
func (f *FS) Check(ctx context.Context) (CheckReport, error) {
	var rep CheckReport
	err := f.View(ctx, RootCred, func(t *Txn) error {
		return t.check(ctx, &rep)
	})
	return rep, err
}

func (t *Txn) check(ctx context.Context, rep *CheckReport) error {
	inodes := map[uint64]*meta.Inode{}
	var maxIno uint64
	err := t.scanAll(ctx, meta.InodePrefix(), func(p kv.Pair) error {
		ino, err := meta.ParseIno(p.Key)
		if err != nil || len(p.Key) != 9 {
			rep.problem("bad inode key %x", p.Key)
			return nil
		}
		var n meta.Inode
		if err := meta.Unmarshal(p.Value, &n); err != nil {
			rep.problem("inode %d: %v", ino, err)
			return nil
		}
		inodes[ino] = &n
		maxIno = max(maxIno, ino)
		return nil
	})
	if err != nil {
		return err
	}
	rep.Inodes = len(inodes)
	if root, ok := inodes[uint64(RootIno)]; !ok {
		rep.problem("root directory missing")
	} else if root.Type != uint8(TypeDirectory) {
		rep.problem("root is a %v", FileType(root.Type))
	}
	if b, err := t.getRaw(ctx, meta.MiscKey(keyNextIno)); err != nil {
		rep.problem("inode counter: %v", err)
	} else if next, err := decodeUint64(b); err != nil || next <= maxIno {
		rep.problem("inode counter %d not above highest inode %d (%v)", next, maxIno, err)
	}

	links := map[uint64]uint32{}   // directory entries naming each inode
	subdirs := map[uint64]uint32{} // subdirectories of each directory
	cookies := map[[2]uint64]string{}
	entries := map[[2]uint64]meta.Dirent{} // by directory and cookie
	err = t.scanAll(ctx, meta.AllDirentsPrefix(), func(p kv.Pair) error {
		dir, name, err := meta.ParseDirentKey(p.Key)
		if err != nil {
			rep.problem("%v", err)
			return nil
		}
		var de meta.Dirent
		if err := meta.Unmarshal(p.Value, &de); err != nil {
			rep.problem("entry %q of directory %d: %v", name, dir, err)
			return nil
		}
		if checkName(name) != nil {
			rep.problem("directory %d has an invalid name %q", dir, name)
		}
		d, ok := inodes[dir]
		if !ok || d.Type != uint8(TypeDirectory) {
			rep.problem("entry %q in %d, which is not a directory", name, dir)
		}
		n, ok := inodes[de.Ino]
		switch {
		case !ok:
			rep.problem("entry %q in directory %d names missing inode %d", name, dir, de.Ino)
		case n.Type != de.Type:
			rep.problem("entry %q in directory %d has type %v, inode %d is a %v", name, dir, FileType(de.Type), de.Ino, FileType(n.Type))
		case n.Type == uint8(TypeDirectory):
			subdirs[dir]++
			if n.Parent != dir {
				rep.problem("directory %d is entry %q of %d but its parent is %d", de.Ino, name, dir, n.Parent)
			}
		}
		links[de.Ino]++
		cookies[[2]uint64{dir, de.Cookie}] = name
		entries[[2]uint64{dir, de.Cookie}] = de
		if d != nil && de.Cookie >= d.NextCookie {
			rep.problem("entry %q of directory %d has cookie %d beyond the next cookie %d", name, dir, de.Cookie, d.NextCookie)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = t.scanAll(ctx, meta.AllCookiesPrefix(), func(p kv.Pair) error {
		dir, cookie, err := meta.ParseCookieKey(p.Key)
		if err != nil {
			rep.problem("%v", err)
			return nil
		}
		ce, err := meta.ParseCookieValue(p.Value)
		if err != nil {
			rep.problem("cookie %d of directory %d: %v", cookie, dir, err)
			return nil
		}
		if name, ok := cookies[[2]uint64{dir, cookie}]; !ok || name != ce.Name {
			rep.problem("cookie %d of directory %d names %q, which has no matching entry", cookie, dir, ce.Name)
		} else if ce.Full {
			// The entry's inode and type were checked against the
			// entry record; the cookie value must agree with both.
			de := entries[[2]uint64{dir, cookie}]
			if n := inodes[ce.Ino]; ce.Ino != de.Ino || ce.Type != de.Type || n == nil || ce.Gen != n.Gen {
				rep.problem("cookie %d of directory %d (%q) names inode %d type %d generation %d; the entry names inode %d type %d",
					cookie, dir, ce.Name, ce.Ino, ce.Type, ce.Gen, de.Ino, de.Type)
			}
		}
		delete(cookies, [2]uint64{dir, cookie})
		return nil
	})
	if err != nil {
		return err
	}
	for k, name := range cookies {
		rep.problem("entry %q of directory %d has no cookie index entry %d", name, k[0], k[1])
	}

	orphans := map[uint64]bool{}
	err = t.scanAll(ctx, meta.OrphanPrefix(), func(p kv.Pair) error {
		ino, err := meta.ParseIno(p.Key)
		if err != nil {
			rep.problem("%v", err)
			return nil
		}
		orphans[ino] = true
		if n, ok := inodes[ino]; !ok {
			rep.problem("orphan %d has no inode", ino)
		} else if n.Nlink != 0 {
			rep.problem("orphan %d has %d links", ino, n.Nlink)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep.Orphans = len(orphans)

	for ino, n := range inodes {
		switch FileType(n.Type) {
		case TypeDirectory:
			rep.Dirs++
			want := 2 + subdirs[ino]
			if n.Nlink != want && !(orphans[ino] && n.Nlink == 0) {
				rep.problem("directory %d has nlink %d, want %d", ino, n.Nlink, want)
			}
			if ino != uint64(RootIno) && links[ino] != 1 && !orphans[ino] {
				rep.problem("directory %d has %d entries naming it", ino, links[ino])
			}
			if err := reachable(inodes, ino); err != nil {
				rep.problem("directory %d: %v", ino, err)
			}
		default:
			if n.Type == uint8(TypeRegular) {
				rep.Files++
			} else if n.Type == uint8(TypeSymlink) {
				rep.Symlinks++
			}
			if n.Nlink != links[ino] {
				rep.problem("inode %d has nlink %d but %d entries", ino, n.Nlink, links[ino])
			}
			if n.Nlink == 0 && !orphans[ino] {
				rep.problem("inode %d has no links and is not an orphan", ino)
			}
		}
	}

	seen := map[slice.Pointer]bool{}
	used := map[uint64]uint64{}
	nspans := map[uint64]uint64{}    // span records per inode
	openStart := map[uint64]uint64{} // start of each inode's open record
	var prevIno, prevLast uint64
	havePrev := false
	endFile := func() { // the previous file's records are all seen
		if havePrev && prevLast != meta.SpanOpen {
			rep.problem("inode %d: its last span record ends at %d instead of being open", prevIno, prevLast)
		}
	}
	err = t.scanAll(ctx, meta.AllSpansPrefix(), func(p kv.Pair) error {
		ino, start, last, r, err := meta.UnmarshalSpan(p.Key, p.Value)
		if err != nil {
			rep.problem("span record %x: %v", p.Key, err)
			return nil
		}
		if havePrev && ino == prevIno {
			if start <= prevLast {
				rep.problem("inode %d: span records overlap at [%d, %d]", ino, start, last)
			}
		} else {
			endFile()
		}
		prevIno, prevLast, havePrev = ino, last, true
		n, ok := inodes[ino]
		if !ok || n.Type != uint8(TypeRegular) {
			rep.problem("span [%d, %d] of inode %d, which is not a regular file", start, last, ino)
			return nil
		}
		vis := visible(r.Extents)
		if len(vis) > 0 {
			if end := start + vis[len(vis)-1].End(); end > n.Size {
				rep.problem("inode %d has data up to %d past its size %d", ino, end, n.Size)
			}
		} else if last != meta.SpanOpen {
			rep.problem("inode %d: span record [%d, %d] holds nothing", ino, start, last)
		}
		used[ino] += spanUsed(r.Extents)
		nspans[ino]++
		if last == meta.SpanOpen {
			openStart[ino] = start
		}
		for _, e := range r.Extents {
			if e.Kind != meta.KindSlice || seen[e.Pointer()] {
				continue
			}
			ptr := e.Pointer()
			seen[ptr] = true
			buf := make([]byte, ptr.Length)
			if err := t.fs.slices.ReadAt(ctx, ptr, 0, buf); err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					return err
				}
				rep.problem("inode %d span [%d, %d]: slice %v: %v", ino, start, last, ptr, err)
				continue
			}
			rep.SliceBytes += uint64(ptr.Length)
		}
		return nil
	})
	endFile()
	rep.Slices = len(seen)
	if err != nil {
		return err
	}
	for ino, n := range inodes {
		if n.Type == uint8(TypeRegular) && n.Used != used[ino] {
			rep.problem("inode %d records Used %d, its span records reference %d", ino, n.Used, used[ino])
		}
		// Spans 0: unknown (written before layout 4).
		if n.Spans != 0 && n.Spans-1 != nspans[ino] {
			rep.problem("inode %d counts %d span records, it has %d", ino, n.Spans-1, nspans[ino])
		} else if n.Spans >= 2 && n.OpenStart != openStart[ino] {
			rep.problem("inode %d records its open span record at %d, it starts at %d", ino, n.OpenStart, openStart[ino])
		}
	}
	// Layout: Open converts layout-1 region and layout-2 chunk records to
	// span records and then records the layout; none may be left undone.
	if b, err := t.getRaw(ctx, meta.MiscKey(meta.LayoutKey)); err != nil {
		rep.problem("data layout record: %v", err)
	} else if v, err := decodeUint64(b); err != nil || v != meta.LayoutCurrent {
		rep.problem("data layout %d, want %d (%v)", v, meta.LayoutCurrent, err)
	}
	if _, err := t.getRaw(ctx, meta.MiscKey(upgradeProgressKey)); err == nil {
		rep.problem("a layout upgrade progress record is left")
	}
	for _, old := range []struct {
		name   string
		prefix []byte
	}{{"layout-1 region", meta.AllRegionsPrefix()}, {"layout-2 chunk", meta.AllChunksPrefix()}} {
		err = t.scanAll(ctx, old.prefix, func(p kv.Pair) error {
			rep.problem("%s record %x left unconverted", old.name, p.Key)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return t.scanAll(ctx, []byte{'x'}, func(p kv.Pair) error {
		ino, _, err := meta.ParseXattrKey(p.Key)
		if err != nil {
			rep.problem("%v", err)
		} else if _, ok := inodes[ino]; !ok {
			rep.problem("extended attribute of missing inode %d", ino)
		}
		return nil
	})
}

// reachable follows a directory's parent chain to the root.
func reachable(inodes map[uint64]*meta.Inode, ino uint64) error {
	for cur, steps := ino, 0; cur != uint64(RootIno); steps++ {
		n, ok := inodes[cur]
		if !ok {
			return fmt.Errorf("parent chain reaches missing inode %d", cur)
		}
		if steps > len(inodes) {
			return errors.New("parent chain has a cycle")
		}
		cur = n.Parent
	}
	return nil
}
