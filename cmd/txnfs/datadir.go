package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/txnfs/txnfs/datadir"
)

// openOffline parses a --data flag and opens that directory for an
// offline tool (no server may be running on it).
func openOffline(ctx context.Context, name string, args []string, stderr io.Writer) (*datadir.Engine, error) {
	fl := newFlags(name, stderr)
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: txnfs %s --data DIR\n", name)
		fl.PrintDefaults()
	}
	dir := fl.String("data", "", "data directory (required); the server must not be running")
	if err := parse(fl, args); err != nil {
		return nil, err
	}
	if *dir == "" {
		return nil, fmt.Errorf("%w: --data is required", errUsage)
	}
	// Opening creates a missing data directory; a check or a collection
	// of a mistyped one must not report a fresh empty file system.
	if fi, err := os.Stat(*dir); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", *dir, unwrapPath(err))
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("data directory %s: not a directory", *dir)
	}
	if _, err := os.Stat(filepath.Join(*dir, "meta")); err != nil {
		return nil, fmt.Errorf("%s is not a txnfs data directory (no meta/ in it)", *dir)
	}
	// No reuse pool: it would die with this process, and `txnfs gc` is
	// there to give space back to the OS.
	return datadir.Open(ctx, datadir.Options{Dir: *dir, CacheBytes: -1, SliceReuseMax: -1})
}

func runFsck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e, err := openOffline(ctx, "fsck", args, stderr)
	if err != nil {
		return err
	}
	defer e.Close()
	rep, err := e.FS.Check(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "inodes %d (dirs %d, files %d, symlinks %d, orphans %d); slices %d verified, %d bytes\n",
		rep.Inodes, rep.Dirs, rep.Files, rep.Symlinks, rep.Orphans, rep.Slices, rep.SliceBytes)
	if rep.OK() {
		fmt.Fprintln(stdout, "ok: no problems found")
		return nil
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(stdout, "problem: %s\n", p)
	}
	fmt.Fprintf(stdout, "%d problems found\n", len(rep.Problems))
	return errProblems
}

func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e, err := openOffline(ctx, "gc", args, stderr)
	if err != nil {
		return err
	}
	defer e.Close()
	// Nothing else runs on this directory, so two scans in a row are
	// safe: the second frees what both found unreferenced.
	var freed uint64
	for i := 0; i < 2; i++ {
		rep, err := e.FS.CollectGarbage(ctx)
		if err != nil {
			return err
		}
		freed += rep.FreedBytes
		if i == 1 {
			fmt.Fprintf(stdout, "backing files %d; live slices %d (%d bytes); freed %d bytes\n",
				rep.Backings, rep.LiveSlices, rep.LiveBytes, freed)
		}
	}
	return nil
}

// unwrapPath drops an *fs.PathError's operation and path (the caller's
// message names the path).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
