package vtools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"github.com/txnfs/txnfs/vnfs"
)

// RmOptions configure Rm.
type RmOptions struct {
	Recursive bool // -r
	Force     bool // -f: ignore missing paths
}

// Rm removes paths like rm(1). With -r, each file system's trees are
// removed with one recursive listing and one VRemove vector.
func Rm(ctx context.Context, env *Env, args []string, o RmOptions) error {
	for _, a := range args {
		if isDots(a) {
			return fmt.Errorf("refusing to remove '.' or '..' directory: skipping '%s'", a)
		}
	}
	var live []string
	for _, a := range args {
		if a == "" && o.Force {
			continue // rm -f '': nothing to do, as GNU rm
		}
		live = append(live, a)
	}
	groups, order, err := group(ctx, env, live)
	if err != nil {
		return err
	}
	for _, g := range groups {
		for _, t := range g {
			if _, err := slashDir(ctx, t, false); err != nil {
				return err
			}
		}
	}
	for _, key := range order {
		g := groups[key]
		t := g[0]
		items := make([]vnfs.AttrItem, len(g))
		for i, x := range g {
			items[i] = vnfs.AttrItem{File: vnfs.P(x.Path), Mask: vnfs.AttrType}
		}
		var paths []string
		for start := 0; start < len(items); {
			k, err := t.FS.VGetAttrs(ctx, items[start:])
			for _, it := range items[start : start+k] {
				if it.Attr.Type == vnfs.TypeDir && !o.Recursive {
					return &pathError{path: display(t, it.File.Path), err: syscall.EISDIR}
				}
				if it.File.Path == "/" {
					return fmt.Errorf("%s: refusing to remove the root", display(t, "/"))
				}
				paths = append(paths, it.File.Path)
			}
			start += k
			if err == nil {
				break
			}
			if o.Force && errors.Is(err, fs.ErrNotExist) {
				start++
				continue
			}
			return wrap(t, err)
		}
		if len(paths) == 0 {
			continue
		}
		if err := vnfs.RemoveRecursive(ctx, t.FS, paths...); err != nil {
			return wrap(t, err)
		}
	}
	return nil
}

// group resolves args and groups them by file system, in first-seen order.
func group(ctx context.Context, env *Env, args []string) (map[string][]vnfs.Target, []string, error) {
	groups := map[string][]vnfs.Target{}
	var order []string
	for _, a := range args {
		t, err := env.Mounts.Resolve(ctx, a)
		if err != nil {
			return nil, nil, err
		}
		if _, ok := groups[t.Server]; !ok {
			order = append(order, t.Server)
		}
		groups[t.Server] = append(groups[t.Server], t)
	}
	return groups, order, nil
}

// MkdirOptions configure Mkdir.
type MkdirOptions struct {
	Parents bool   // -p
	Mode    uint32 // default 0755
	// ExactMode is mkdir -m: the directories named get exactly Mode
	// (also 0, and the set-id and sticky bits; not less a umask), set
	// after creating them as mkdir(1) does; with Parents, missing
	// parents get the default mode.
	ExactMode bool
}

// Mkdir creates directories. With -p, all missing ancestors of all
// arguments on one file system are found with one VGetAttrs and created
// with one VMkdir.
func Mkdir(ctx context.Context, env *Env, args []string, o MkdirOptions) error {
	if o.Mode == 0 && !o.ExactMode {
		o.Mode = 0o755
	}
	// exact sets -m's mode on the directories created for arguments.
	exact := func(t vnfs.Target, paths []string) error {
		if !o.ExactMode || len(paths) == 0 {
			return nil
		}
		items := make([]vnfs.AttrItem, len(paths))
		for i, p := range paths {
			items[i] = vnfs.AttrItem{File: vnfs.P(p), Mask: vnfs.AttrMode, Attr: vnfs.Attr{Mode: o.Mode}}
		}
		if _, err := t.FS.VSetAttrs(ctx, items); err != nil {
			return wrap(t, err)
		}
		return nil
	}
	groups, order, err := group(ctx, env, args)
	if err != nil {
		return err
	}
	for _, key := range order {
		g := groups[key]
		t := g[0]
		if !o.Parents {
			mk := make([]vnfs.MkdirItem, len(g))
			paths := make([]string, len(g))
			for i, x := range g {
				mk[i] = vnfs.MkdirItem{Path: x.Path, Mode: o.Mode}
				paths[i] = x.Path
			}
			if _, err := t.FS.VMkdir(ctx, mk); err != nil {
				return wrap(t, err)
			}
			if err := exact(t, paths); err != nil {
				return err
			}
			continue
		}
		// Every ancestor of every argument, parents first, once.
		seen := map[string]bool{}
		var all []string
		for _, x := range g {
			parts := strings.Split(strings.Trim(x.Path, "/"), "/")
			for i := range parts {
				p := "/" + path.Join(parts[:i+1]...)
				if !seen[p] && parts[0] != "" {
					seen[p] = true
					all = append(all, p)
				}
			}
		}
		// Stat everything; after a missing directory, its descendants
		// are known to be missing and the rest is stat'ed again.
		exists := map[string]bool{}
		var missing []string
		under := func(p string) bool {
			for _, m := range missing {
				if strings.HasPrefix(p, m+"/") {
					return true
				}
			}
			return false
		}
		for {
			var items []vnfs.AttrItem
			for _, p := range all {
				if !exists[p] && !under(p) && !slicesContains(missing, p) {
					items = append(items, vnfs.AttrItem{File: vnfs.P(p), Mask: vnfs.AttrType})
				}
			}
			if len(items) == 0 {
				break
			}
			k, err := t.FS.VGetAttrs(ctx, items)
			for _, it := range items[:k] {
				if it.Attr.Type != vnfs.TypeDir {
					return &pathError{path: display(t, it.File.Path), err: syscall.ENOTDIR}
				}
				exists[it.File.Path] = true
			}
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return wrap(t, err)
			}
			missing = append(missing, items[k].File.Path)
		}
		named := map[string]bool{}
		for _, x := range g {
			named[x.Path] = true
		}
		var mk []vnfs.MkdirItem
		var created []string
		for _, p := range all {
			if !exists[p] {
				mode := o.Mode
				if o.ExactMode && !named[p] {
					mode = 0o755
				}
				mk = append(mk, vnfs.MkdirItem{Path: p, Mode: mode})
				if named[p] {
					created = append(created, p)
				}
			}
		}
		if len(mk) > 0 {
			if _, err := t.FS.VMkdir(ctx, mk); err != nil {
				return wrap(t, err)
			}
		}
		if err := exact(t, created); err != nil {
			return err
		}
	}
	return nil
}

func slicesContains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
