package vtools

import (
	"context"
	"errors"
	"fmt"

	"github.com/txnfs/txnfs/vnfs"
)

// Clone makes dst share src's data (NFSv4.2 CLONE: metadata-only on
// txnfs). Where the server lacks CLONE the data is copied instead, with a
// note on Stderr.
func Clone(ctx context.Context, env *Env, src, dst string) error {
	return Concat(ctx, env, dst, []string{src})
}

// Concat makes dst the concatenation of srcs: one VGetAttrs for the sizes
// and one VClone vector (metadata-only on txnfs: WTF's concat). All files
// must be on one file system; without CLONE the data is copied.
func Concat(ctx context.Context, env *Env, dst string, srcs []string) error {
	dt, err := env.Mounts.Resolve(ctx, dst)
	if err != nil {
		return err
	}
	items := make([]vnfs.AttrItem, len(srcs))
	targets := make([]vnfs.Target, len(srcs))
	for i, s := range srcs {
		t, err := env.Mounts.Resolve(ctx, s)
		if err != nil {
			return err
		}
		if t.Server != dt.Server {
			return fmt.Errorf("%s and %s are on different file systems", s, dst)
		}
		targets[i] = t
		items[i] = vnfs.AttrItem{File: vnfs.P(t.Path), Mask: vnfs.AttrType | vnfs.AttrSize | vnfs.AttrMode}
	}
	if k, err := dt.FS.VGetAttrs(ctx, items); err != nil {
		return wrap(targets[k], err)
	}
	// DST is truncated first: a source that is DST would be lost.
	for i, t := range targets {
		if sameFile(ctx, t, dt) {
			if len(srcs) == 1 {
				return fmt.Errorf("'%s' and '%s' are the same file", srcs[i], dst)
			}
			return fmt.Errorf("%s: DST is also a source (concatenate into a new file)", dst)
		}
	}
	cl := make([]vnfs.CopyItem, len(srcs))
	var off uint64
	for i, it := range items {
		if it.Attr.Type != vnfs.TypeRegular {
			return fmt.Errorf("%s: not a regular file", srcs[i])
		}
		cl[i] = vnfs.CopyItem{Src: vnfs.P(targets[i].Path), Dst: vnfs.P(dt.Path), DstOffset: off, Length: it.Attr.Size}
		off += it.Attr.Size
	}
	cl[0].Flags, cl[0].Mode = vnfs.Create|vnfs.Truncate, items[0].Attr.Mode
	_, err = dt.FS.VClone(ctx, cl)
	if errors.Is(err, vnfs.ErrNotSupported) {
		fmt.Fprintf(env.Stderr, "txnfs: %s: the file system cannot clone; copying the data\n", display(dt, dt.Path))
		for i := range cl {
			cl[i].Flags |= vnfs.Stable
		}
		_, err = dt.FS.VSCopy(ctx, cl)
	}
	return wrap(dt, err)
}
