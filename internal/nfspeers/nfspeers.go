// Package nfspeers starts NFSv4 servers for client tests and benchmarks:
// NFS-Ganesha (through ../shared/peers/ganesha.sh, FSAL_VFS over a local
// directory) and the txnfs server itself (nfs4/server over a data
// directory). Both listen on loopback.
//
// A Peer is started once per test binary (from TestMain) and each test
// works in its own directory below Peer.Root, so tests stay independent
// without paying a server start per test.
package nfspeers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/nfs4/server"
)

// Peer is a running NFSv4 server.
type Peer struct {
	// Name is "ganesha" or "txnfs".
	Name string
	// Addr is host:port.
	Addr string
	// Root is the path, from the server's root file handle, of the
	// exported directory tests may write in ("/export" for Ganesha, "/"
	// for txnfs).
	Root string
	// Dir is the local directory behind the export (Ganesha only): the
	// same files, visible to local tools. Write through NFS only; Ganesha
	// caches.
	Dir string
	// Txn and Append report the txnfs extensions.
	Txn, Append bool
	// PID is the server's process id (Ganesha only; 0 if unknown).
	PID int

	stop func() error
}

// Stop stops the server.
func (p *Peer) Stop() error {
	if p == nil || p.stop == nil {
		return nil
	}
	return p.stop()
}

// ErrUnavailable means the peer cannot run on this machine (a test skips).
var ErrUnavailable = errors.New("nfspeers: server unavailable")

// GaneshaScript finds ganesha.sh: $TXNFS_GANESHA_SH, or
// ../shared/peers/ganesha.sh next to the module root, or else the
// module's copy of it, scripts/ganesha-peer.sh (a checkout without the
// workplace beside it, e.g. a CI clone elsewhere).
func GaneshaScript() (string, error) {
	if p := os.Getenv("TXNFS_GANESHA_SH"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			for _, p := range []string{
				filepath.Join(filepath.Dir(d), "shared", "peers", "ganesha.sh"),
				filepath.Join(d, "scripts", "ganesha-peer.sh"),
			} {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
			return "", fmt.Errorf("%w: neither ../shared/peers/ganesha.sh nor scripts/ganesha-peer.sh found (set TXNFS_GANESHA_SH)", ErrUnavailable)
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%w: module root not found", ErrUnavailable)
		}
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartGanesha starts NFS-Ganesha exporting a new directory below work
// (which must be writable and is left for the caller to remove). It
// needs root and the Debian nfs-ganesha packages (the script installs
// them when missing and apt is usable).
func StartGanesha(ctx context.Context, work string) (*Peer, error) {
	if os.Getuid() != 0 {
		return nil, fmt.Errorf("%w: NFS-Ganesha (FSAL_VFS) needs root", ErrUnavailable)
	}
	script, err := GaneshaScript()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	exp := filepath.Join(work, "export")
	gw := filepath.Join(work, "ganesha")
	if err := os.MkdirAll(exp, 0o755); err != nil {
		return nil, err
	}
	// Ganesha runs as root and exports with No_Root_Squash; the export
	// directory must be traversable.
	os.Chmod(work, 0o755)
	cmd := exec.CommandContext(ctx, "bash", script, "start", exp, fmt.Sprint(port), gw)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w: ganesha.sh start: %v: %s", ErrUnavailable, err, strings.TrimSpace(string(out)))
	}
	p := &Peer{Name: "ganesha", Addr: fmt.Sprintf("127.0.0.1:%d", port), Root: "/export", Dir: exp}
	if f := strings.Fields(string(out)); len(f) > 0 {
		p.PID, _ = strconv.Atoi(f[len(f)-1]) // the script prints it last
	}
	p.stop = func() error {
		err := exec.Command("bash", script, "stop", gw).Run()
		// The script only signals: wait (up to 5 s) for Ganesha to
		// exit, so that it writes no more into work (its log) once
		// the caller removes it.
		for i := 0; i < 200 && p.PID > 0; i++ {
			if _, serr := os.Stat(fmt.Sprintf("/proc/%d", p.PID)); serr != nil {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		return err
	}
	// The script returns when the port accepts connections; Ganesha may
	// still be finishing start-up (grace period is off).
	time.Sleep(200 * time.Millisecond)
	return p, nil
}

// StartTxnfs starts the txnfs server over a new data directory below work;
// a nil logger logs errors to stderr.
func StartTxnfs(ctx context.Context, work string, logger *slog.Logger) (*Peer, error) {
	if logger == nil {
		// Errors only: a server-side failure behind an NFS4ERR_IO or
		// NFS4ERR_SERVERFAULT reply must reach the test output.
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	e, err := datadir.Open(ctx, datadir.Options{Dir: filepath.Join(work, "data"), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("nfspeers: opening data directory: %w", err)
	}
	srv, err := server.New(server.Config{FS: e.FS, Logger: logger})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("nfspeers: server: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		e.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	p := &Peer{Name: "txnfs", Addr: l.Addr().String(), Root: "/", Txn: true, Append: true}
	p.stop = func() error {
		cancel()
		l.Close()
		srv.Close()
		<-done
		return e.Close()
	}
	return p, nil
}

// RunWithPeers is a TestMain body: it starts NFS-Ganesha (skipped with a
// message when it cannot start) and a txnfs server in a temporary
// directory, stores them in *peers, runs the tests and stops both. It
// returns the exit code.
func RunWithPeers(m interface{ Run() int }, name string, peers *[]*Peer) int {
	work, err := os.MkdirTemp("", name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(work)
	ctx := context.Background()
	if p, err := StartGanesha(ctx, work+"/g"); err != nil {
		fmt.Fprintf(os.Stderr, "%s: skipping NFS-Ganesha: %v\n", name, err)
	} else {
		defer p.Stop()
		*peers = append(*peers, p)
	}
	p, err := StartTxnfs(ctx, work+"/t", nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: txnfs server: %v\n", name, err)
		return 1
	}
	defer p.Stop()
	*peers = append(*peers, p)
	return m.Run()
}
