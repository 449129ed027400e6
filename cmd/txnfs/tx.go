package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/txnfs/txnfs/fuse"
)

func runTx(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("tx", stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, `usage: txnfs tx begin|commit|abort|status MOUNTPOINT

Turns a txnfs mount into a sandbox: after "begin", every change made through
MOUNTPOINT is invisible elsewhere until "commit" publishes all of it at once
(or fails with a conflict, publishing nothing); "abort" discards it.`)
	}
	pos, err := parsePositional(fl, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: want an operation and a MOUNTPOINT", errUsage)
	}
	op, err := fuse.ParseSandboxOp(pos[0])
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := fuse.Control(pos[1], op)
	if err != nil {
		if errors.Is(err, syscall.EBUSY) && op == fuse.OpCommit {
			return fmt.Errorf("commit failed, nothing was committed: %w", err)
		}
		return err
	}
	switch {
	case op == fuse.OpStatus && st.Active:
		fmt.Fprintf(stdout, "sandbox active since %s (%s), %d operations\n",
			st.Since.Format(time.RFC3339), time.Since(st.Since).Round(time.Second), st.Ops)
	case op == fuse.OpStatus:
		fmt.Fprintln(stdout, "no sandbox")
	}
	return nil
}
