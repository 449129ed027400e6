package fuse

import (
	"fmt"
	"log"
	"log/slog"
	"sync"

	raw "github.com/hanwen/go-fuse/v2/fuse"
)

// mountLife is the lifecycle both kinds of mount (Server, RemoteServer)
// share: mounting through go-fuse, Dir, Wait and Unmount, and the mount's
// own shutdown, run once when the kernel is gone.
type mountLife struct {
	dir          string
	srv          *raw.Server
	onShutdown   func() // releases the mount's state (set before serve)
	shutdownOnce sync.Once
	hugeBufs     bool // request buffers go on huge pages (hugeReadBuffers)
	// lender takes large WRITEs' request buffers from go-fuse for the
	// slice writes (nil if it cannot; see bufLender).
	lender *bufLender
}

// serve mounts fsys on l.dir with opts and serves it in the background.
// started runs once the go-fuse server exists, before the first request
// (the kernel notifier needs it); the mount's backing device is set up
// as bdi says once the mount exists.
func (l *mountLife) serve(fsys raw.RawFileSystem, opts *raw.MountOptions, bdi bdiSettings, log *slog.Logger, started func(*raw.Server)) error {
	srv, err := raw.NewServer(fsys, l.dir, opts)
	if err != nil {
		return fmt.Errorf("fuse: mounting %s: %w", l.dir, err)
	}
	l.srv = srv
	l.hugeBufs = hugeReadBuffers(srv, log)
	if l.hugeBufs {
		// An O_DIRECT write from a buffer on small pages pins it page
		// by page, which costs about what the staging copy saves
		// (slice.md "Unstaged direct puts").
		l.lender = newBufLender(srv, log)
	}
	started(srv)
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return fmt.Errorf("fuse: mounting %s: %w", l.dir, err)
	}
	l.setBDI(bdi, log)
	return nil
}

// bdiSettings are the mount's backing device settings (the kernel's
// /sys/class/bdi/MAJOR:MINOR of the mount, which lives and dies with the
// mount, so nothing needs restoring at unmount). Fields that are 0 or
// negative are left as the kernel set them.
type bdiSettings struct {
	// readAheadKB is the read-ahead (read_ahead_kb).
	readAheadKB int
	// maxRatio is the share (percent) of the kernel's dirty page
	// threshold the mount's dirty pages may use (max_ratio; the kernel
	// gives FUSE 1% and a strict limit, which throttles writers through
	// the writeback cache after a few tens of MiB).
	maxRatio int
}

// Dir returns the mount point.
func (l *mountLife) Dir() string { return l.dir }

// Wait blocks until the file system is unmounted.
func (l *mountLife) Wait() {
	l.srv.Wait()
	l.shutdown()
}

// Unmount unmounts the file system; it fails (EBUSY) while it is in use.
// An active sandbox is aborted.
func (l *mountLife) Unmount() error {
	if err := l.srv.Unmount(); err != nil {
		return fmt.Errorf("fuse: unmounting %s: %w", l.dir, err)
	}
	l.srv.Wait()
	l.shutdown()
	return nil
}

// shutdown runs onShutdown once; Wait and Unmount may both call it,
// concurrently.
func (l *mountLife) shutdown() { l.shutdownOnce.Do(l.onShutdown) }

// mountOptions are the go-fuse options both kinds of mount start from;
// each adds its capabilities.
func (cfg *Config) mountOptions(logger *slog.Logger) *raw.MountOptions {
	return &raw.MountOptions{
		AllowOther:    cfg.AllowOther,
		FsName:        cfg.FsName,
		Name:          "txnfs",
		MaxWrite:      cfg.MaxWrite,
		MaxBackground: 64,
		DirectMount:   cfg.DirectMount,
		Debug:         cfg.Debug,
		Logger:        log.New(&logWriter{logger}, "", 0),
		// The kernel checks permissions from its cached attributes, as
		// the engine (or the server, for the caller's AUTH_SYS
		// identity) does again: without this, paths the kernel has
		// cached are walked without search permission checks and
		// execute permission is "any x bit".
		Options: []string{"default_permissions"},
	}
}
