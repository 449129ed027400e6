// Command txnfs is the one txnfs binary: the NFS server and the tools that
// work on a data directory.
//
//	txnfs serve --data DIR [--listen 127.0.0.1:2049]   serve DIR over NFSv4
//	txnfs fsck  --data DIR                              verify every record and slice
//	txnfs gc    --data DIR                              free unreferenced slices
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/txnfs/txnfs/vnfs/vtools"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":  {"serve a data directory over NFSv4 (4.0, 4.1, 4.2)", runServe},
		"fsck":   {"check a data directory's consistency; exit 1 if a problem is found", runFsck},
		"gc":     {"collect garbage slices in a data directory (server must be stopped)", runGC},
		"mount":  {"mount a data directory or a remote server with FUSE (txnfs mount --data DIR | --server HOST[:PORT] MOUNTPOINT)", runMount},
		"umount": {"unmount a txnfs FUSE mount, also a crashed one (txnfs umount MOUNTPOINT)", runUmount},
		"tx":     {"sandbox a FUSE mount: txnfs tx begin|commit|abort|status MOUNTPOINT", runTx},
		"cp":     {"copy files and trees (local paths, nfs://HOST[:PORT]/path)", runCp},
		"ls":     {"list directories like GNU ls (-l, -R)", runLs},
		"rm":     {"remove files and trees", runRm},
		"mkdir":  {"create directories (-p: with parents)", runMkdir},
		"tar":    {"write a tar archive of files and trees", runTar},
		"untar":  {"extract a tar archive", runUntar},
		"clone":  {"clone a file (NFSv4.2 CLONE; metadata-only on txnfs)", runClone},
		"concat": {"concatenate files into DST by cloning", runConcat},
	}
}

// dataCommands open a data directory (--data).
var dataCommands = map[string]bool{"serve": true, "mount": true, "fsck": true, "gc": true}

// explainInUse explains the failure to take a data directory's lock
// (the slice store's, datadir): one process per directory.
func explainInUse(err error) error {
	const why = "the data directory is in use by another txnfs serve, mount, fsck or gc"
	if errors.Is(err, syscall.EWOULDBLOCK) && !strings.Contains(err.Error(), why) {
		return fmt.Errorf("%w: %s", err, why)
	}
	return err
}

// errUsage marks a command-line error (exit status 2).
var errUsage = errors.New("usage error")

// errProblems marks a check that found problems (exit status 1).
var errProblems = errors.New("problems found")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "txnfs: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = errors.New("interrupted")
	}
	if dataCommands[args[0]] {
		err = explainInUse(err)
	}
	var reported *vtools.ReportedError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "txnfs %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, errProblems):
		return 1
	case errors.As(err, &reported):
		return reported.Status
	default:
		fmt.Fprintf(stderr, "txnfs %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: txnfs COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'txnfs COMMAND -h' for a command's flags.")
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fl := flag.NewFlagSet("txnfs "+name, flag.ContinueOnError)
	fl.SetOutput(stderr)
	return fl
}

// parse parses args, rejecting stray positional arguments.
func parse(fl *flag.FlagSet, args []string) error {
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	}
	return nil
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q", errUsage, level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
