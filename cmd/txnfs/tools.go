package main

// The file tools: cp, ls, rm, mkdir, tar, untar, clone, concat. They take
// local paths and nfs://HOST[:PORT]/path URLs and run on the vectorized
// vNFS API (package vnfs, logic in vnfs/vtools).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/txnfs/txnfs/vnfs"
	"github.com/txnfs/txnfs/vnfs/vtools"
)

// isTerminal reports whether f is a terminal (a variable for tests).
var isTerminal = vtools.IsTerminal

// toolEnv returns the tool environment; the caller closes the mounts.
func toolEnv(stdout, stderr io.Writer) *vtools.Env {
	return &vtools.Env{
		Mounts:   &vnfs.Mounts{},
		Stdout:   stdout,
		Stderr:   stderr,
		Progress: stderr == io.Writer(os.Stderr) && vtools.IsTerminal(os.Stderr),
	}
}

// toolFlags parses args, splitting clustered short options ("-lR",
// "-cf ARCHIVE") the way POSIX tools accept them. Positional arguments
// may be mixed with options.
func toolFlags(fl *flag.FlagSet, args []string, min int, usage string) ([]string, error) {
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "usage: %s %s\n", fl.Name(), usage)
		fl.PrintDefaults()
	}
	var expanded []string
	for i, a := range args {
		if a == "--" {
			expanded = append(expanded, args[i:]...) // operands, as written
			break
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !strings.Contains(a, "=") && fl.Lookup(a[1:]) == nil {
			ok := true
			var parts []string
			for i, c := range a[1:] {
				f := fl.Lookup(string(c))
				if f == nil {
					ok = false
					break
				}
				parts = append(parts, "-"+string(c))
				if bf, isBool := f.Value.(interface{ IsBoolFlag() bool }); (!isBool || !bf.IsBoolFlag()) && i != len(a)-2 {
					ok = false // a value flag must come last
					break
				}
			}
			if ok {
				expanded = append(expanded, parts...)
				continue
			}
		}
		expanded = append(expanded, a)
	}
	pos, err := parsePositional(fl, expanded)
	if err != nil {
		return nil, err
	}
	if len(pos) < min {
		return nil, fmt.Errorf("%w: usage: %s %s", errUsage, fl.Name(), usage)
	}
	return pos, nil
}

func runCp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("cp", stderr)
	r := fl.Bool("r", false, "copy directories recursively")
	R := fl.Bool("R", false, "same as -r")
	p := fl.Bool("p", false, "preserve mode, ownership and times")
	pos, err := toolFlags(fl, args, 2, "[-r] [-p] SRC... DST")
	if err != nil {
		return err
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Cp(ctx, env, pos[:len(pos)-1], pos[len(pos)-1], vtools.CpOptions{Recursive: *r || *R, Preserve: *p})
}

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("ls", stderr)
	l := fl.Bool("l", false, "long listing")
	R := fl.Bool("R", false, "list subdirectories recursively")
	A := fl.Bool("A", false, "include names starting with '.'")
	a := fl.Bool("a", false, "include names starting with '.' and the '.' and '..' entries")
	pos, err := toolFlags(fl, args, 0, "[-l] [-R] [-a|-A] [PATH...]")
	if err != nil {
		return err
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Ls(ctx, env, pos, vtools.LsOptions{Long: *l, Recursive: *R, AlmostAll: *A, All: *a})
}

func runRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("rm", stderr)
	r := fl.Bool("r", false, "remove directories and their contents")
	R := fl.Bool("R", false, "same as -r")
	f := fl.Bool("f", false, "ignore missing paths")
	pos, err := toolFlags(fl, args, 1, "[-r] [-f] PATH...")
	if err != nil {
		return err
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Rm(ctx, env, pos, vtools.RmOptions{Recursive: *r || *R, Force: *f})
}

func runMkdir(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("mkdir", stderr)
	p := fl.Bool("p", false, "create missing parents; no error if existing")
	m := fl.String("m", "755", "mode (octal), exactly (not less the umask) for the directories named")
	pos, err := toolFlags(fl, args, 1, "[-p] [-m MODE] DIR...")
	if err != nil {
		return err
	}
	mode, err := strconv.ParseUint(*m, 8, 32)
	if err != nil || mode > 0o7777 {
		return fmt.Errorf("%w: bad mode %q", errUsage, *m)
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	exact := false
	fl.Visit(func(f *flag.Flag) { exact = exact || f.Name == "m" })
	return vtools.Mkdir(ctx, env, pos, vtools.MkdirOptions{Parents: *p, Mode: uint32(mode), ExactMode: exact})
}

func runTar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("tar", stderr)
	c := fl.Bool("c", true, "create an archive (the only mode; see untar)")
	f := fl.String("f", "-", "archive: local path, nfs:// URL, or - for stdout")
	C := fl.String("C", "", "take PATHs relative to this directory")
	pos, err := toolFlags(fl, args, 1, "-c [-f ARCHIVE] [-C DIR] PATH...")
	if err != nil {
		return err
	}
	if !*c {
		return fmt.Errorf("%w: tar only creates archives; use untar -x", errUsage)
	}
	if (*f == "-" || *f == "") && stdout == io.Writer(os.Stdout) && isTerminal(os.Stdout) {
		// GNU tar's refusal: binary on a terminal is never wanted.
		return fmt.Errorf("%w: refusing to write archive contents to a terminal (-f ARCHIVE, or a pipe)", errUsage)
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Tar(ctx, env, pos, vtools.TarOptions{Archive: *f, Dir: *C})
}

func runUntar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("untar", stderr)
	x := fl.Bool("x", true, "extract (the only mode)")
	f := fl.String("f", "-", "archive: local path, nfs:// URL, or - for stdin")
	C := fl.String("C", ".", "extract into this directory")
	pos, err := toolFlags(fl, args, 0, "-x [-f ARCHIVE] [-C DIR]")
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q: untar extracts the whole archive (-f ARCHIVE, -C DIR)", errUsage, pos[0])
	}
	if !*x {
		return fmt.Errorf("%w: untar only extracts; use tar -c", errUsage)
	}
	if (*f == "-" || *f == "") && isTerminal(os.Stdin) {
		// GNU tar's refusal: without it "txnfs untar" waits for
		// typed input.
		return fmt.Errorf("%w: refusing to read archive contents from a terminal (-f ARCHIVE, or a pipe)", errUsage)
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Untar(ctx, env, vtools.UntarOptions{Archive: *f, Dir: *C})
}

func runClone(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("clone", stderr)
	pos, err := toolFlags(fl, args, 2, "SRC DST")
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: usage: txnfs clone SRC DST", errUsage)
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Clone(ctx, env, pos[0], pos[1])
}

func runConcat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("concat", stderr)
	pos, err := toolFlags(fl, args, 2, "DST SRC...")
	if err != nil {
		return err
	}
	env := toolEnv(stdout, stderr)
	defer env.Mounts.Close()
	return vtools.Concat(ctx, env, pos[0], pos[1:])
}
