package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fuse"
	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/vnfs"
)

// notifyEnv names the file descriptor through which a --background child
// reports that the mount is up ("ok") or why it failed.
const notifyEnv = "TXNFS_MOUNT_NOTIFY_FD"

// parsePositional parses flags that may appear before or after positional
// arguments and returns the positional ones. Everything after "--" is
// positional ("txnfs rm -- -f" removes the file -f).
func parsePositional(fl *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fl.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fl.NArg() == 0 {
			return pos, nil
		}
		if used := len(args) - fl.NArg(); used > 0 && args[used-1] == "--" && !isFlagValue(fl, args[:used-1]) {
			return append(pos, fl.Args()...), nil
		}
		pos = append(pos, fl.Arg(0))
		args = fl.Args()[1:]
	}
}

// isFlagValue reports whether the argument after before is the value of
// the flag that ends before ("-f --": "--" is -f's archive name).
func isFlagValue(fl *flag.FlagSet, before []string) bool {
	if len(before) == 0 {
		return false
	}
	last := before[len(before)-1]
	if len(last) < 2 || last[0] != '-' || strings.Contains(last, "=") {
		return false
	}
	f := fl.Lookup(strings.TrimLeft(last, "-"))
	if f == nil {
		return false
	}
	bf, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !bf.IsBoolFlag()
}

// serverAddr checks --server's HOST[:PORT] (port 2049 when omitted, as
// in nfs:// URLs).
func serverAddr(s string) (string, error) {
	if strings.Contains(s, "://") {
		return "", fmt.Errorf("%w: --server takes HOST[:PORT], not a URL (%q); a remote mount shows the server's whole tree", errUsage, s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// No port (or an IPv6 literal without brackets and port).
		host, port = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), "2049"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return "", fmt.Errorf("%w: --server %q: want HOST[:PORT] with a port in 1-65535", errUsage, s)
	}
	return net.JoinHostPort(host, port), nil
}

// cacheTimeout converts a command-line timeout (0: no caching) to
// fuse.Config's convention (0: default, negative: no caching).
func cacheTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

func runMount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("mount", stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: txnfs mount --data DIR [flags] MOUNTPOINT\n       txnfs mount --server HOST[:PORT] [flags] MOUNTPOINT")
		fl.PrintDefaults()
	}
	root := os.Geteuid() == 0
	dir := fl.String("data", "", "data directory to mount (created if missing)")
	server := fl.String("server", "", "mount a remote NFSv4.1 server HOST[:PORT] (port 2049 if omitted) instead of a data directory (cache timeouts then default to 1s)")
	soft := fl.Bool("soft", false, "remote mounts: fail requests (EIO) after three connection attempts instead of waiting for an unreachable server (default: hard, like NFS: requests wait until the server answers; a killed caller or `txnfs umount --force` ends the wait)")
	background := fl.Bool("background", false, "return once mounted and serve from a background process")
	logFile := fl.String("log", "", "log file (with --background; default: discard)")
	allowOther := fl.Bool("allow-other", root, "let all users use the mount (permissions are checked per user)")
	direct := fl.Bool("direct-mount", root, "mount with mount(2) instead of fusermount3 (needs root)")
	entryTimeout := fl.Duration("entry-timeout", fuse.DefaultTimeout, "kernel cache lifetime of directory entries (0: none)")
	attrTimeout := fl.Duration("attr-timeout", fuse.DefaultTimeout, "kernel cache lifetime of attributes (0: none)")
	negTimeout := fl.Duration("negative-timeout", fuse.DefaultTimeout, "kernel cache lifetime of failed lookups (0: none)")
	writeback := fl.Bool("writeback", false, "use the kernel writeback cache (faster small writes; only for a mount that is its files' only writer)")
	dirtyMaxRatio := fl.Int("dirty-max-ratio", fuse.DefaultDirtyMaxRatio, "with --writeback: percent of the kernel's dirty page threshold the mount's dirty pages may use before writers are throttled (needs root; negative: the kernel's 1% for FUSE)")
	writeBehind := fl.Int("write-behind", fuse.DefaultWriteBehindBytes, "bytes of writes answered before they commit (local mounts; 0 or negative: every write commits first)")
	writeBehindDelay := fl.Duration("write-behind-delay", fuse.DefaultWriteBehindDelay, "longest an answered write waits for its commit when nothing asks for it (0: commit at once)")
	mirrorBytes := fl.Int64("mirror-bytes", 0, "local mounts without --writeback: memory (bytes, e.g. 1073741824) for mirrors of recently written files in a private tmpfs, which read-only opens read by FUSE passthrough at page-cache speed (needs root; 0: off, the default; see docs/fuse.md for the costs)")
	debug := fl.Bool("debug", false, "log every FUSE request")
	level := fl.String("log-level", "info", "log level: debug, info, warn, error")
	cpuProfile := fl.String("cpuprofile", "", "write a CPU profile of the mount to this file when it ends")
	metrics := fl.String("metrics", "", "address to serve Prometheus /metrics on (local mounts add the storage engine's; empty: off)")
	gcEvery := fl.Duration("gc-interval", 10*time.Minute, "local mounts: garbage collection interval, at least (0: off)")
	gcGarbage := fl.Int64("gc-garbage", 64<<20, "local mounts: also collect once commits made this many bytes of slice data unreachable")
	reserve := fl.Int64("reserve", 0, "local mounts: free bytes of the data directory's file system kept for metadata: writes get ENOSPC before using them (0: 2% of its size, 64 MiB-4 GiB; negative: none)")
	covered := fl.Bool("covered", coveredDefault == "true", "local mounts: one device flush per durable commit whose slices went into reused space (docs/engine.md \"Covered puts\")")
	pos, err := parsePositional(fl, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want exactly one MOUNTPOINT, got %d arguments", errUsage, len(pos))
	}
	mnt := pos[0]
	switch {
	case *server != "" && *dir != "":
		return fmt.Errorf("%w: --data and --server exclude each other", errUsage)
	case *server != "" && *writeback:
		return fmt.Errorf("%w: --writeback is for local mounts only", errUsage)
	case *server == "" && *dir == "":
		return fmt.Errorf("%w: --data or --server is required", errUsage)
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["dirty-max-ratio"] && !*writeback {
		return fmt.Errorf("%w: --dirty-max-ratio is the writeback cache's limit: it needs --writeback", errUsage)
	}
	if *server != "" {
		addr, err := serverAddr(*server)
		if err != nil {
			return err
		}
		*server = addr
		// Other clients change a remote server's files: short caches
		// unless asked otherwise.
		for name, d := range map[string]*time.Duration{"entry-timeout": entryTimeout, "attr-timeout": attrTimeout, "negative-timeout": negTimeout} {
			if !set[name] {
				*d = fuse.DefaultRemoteTimeout
			}
		}
	}
	// Checked here, not by fusermount3, whose failure says only its exit
	// status.
	if fi, err := os.Stat(mnt); err != nil {
		return fmt.Errorf("mount point %s: %w", mnt, unwrapPath(err))
	} else if !fi.IsDir() {
		return fmt.Errorf("mount point %s: not a directory", mnt)
	}
	if *background && os.Getenv(notifyEnv) == "" {
		return startBackground(args, *logFile, stderr)
	}
	notify := notifyFile()
	fail := func(err error) error {
		if notify != nil {
			fmt.Fprintln(notify, err)
			notify.Close()
		}
		return err
	}

	logOut := stderr
	if notify != nil && *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		logOut = f
	}
	if *debug {
		*level = "debug"
	}
	log, err := newLogger(logOut, *level)
	if err != nil {
		return fail(err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	cfg := fuse.Config{
		Logger:           log,
		EntryTimeout:     cacheTimeout(*entryTimeout),
		AttrTimeout:      cacheTimeout(*attrTimeout),
		NegativeTimeout:  cacheTimeout(*negTimeout),
		AllowOther:       *allowOther,
		DirectMount:      *direct,
		Debug:            *debug,
		Writeback:        *writeback,
		DirtyMaxRatio:    *dirtyMaxRatio,
		WriteBehindBytes: *writeBehind,
		WriteBehindDelay: *writeBehindDelay,
	}
	if cfg.WriteBehindBytes <= 0 {
		cfg.WriteBehindBytes = -1 // 0 would be Config's default
	}
	cfg.MirrorBytes = *mirrorBytes
	if cfg.WriteBehindDelay <= 0 {
		cfg.WriteBehindDelay = -1 // 0 would be Config's default
	}
	var m fuse.Mounted
	if *server != "" {
		dctx, cancel := context.WithTimeout(ctx, vnfs.DefaultDialTimeout)
		c, err := client.Dial(dctx, client.Config{Addr: *server, Logger: log, Hard: !*soft})
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return fail(fmt.Errorf("connecting to %s: the server did not answer within %v", *server, vnfs.DefaultDialTimeout))
			}
			return fail(fmt.Errorf("connecting to %s: %w", *server, err))
		}
		defer c.Close()
		cfg.Client = c
		cfg.FsName = "txnfs:" + *server
		if err := serveMetrics(ctx, *metrics, newRegistry()); err != nil {
			return fail(err)
		}
		if m, err = fuse.MountRemote(ctx, mnt, cfg); err != nil {
			return fail(err)
		}
		log.Info("txnfs mounted", "mountpoint", mnt, "server", *server)
	} else {
		e, err := datadir.Open(ctx, datadir.Options{Dir: *dir, Logger: log, Reserve: *reserve, Covered: *covered})
		if err != nil {
			return fail(explainInUse(err))
		}
		defer e.Close()
		if *gcEvery > 0 {
			// Freed space comes back for reuse while a workload
			// overwrites (see fs.RunCollector); stopped before Close.
			defer startCollector(ctx, e.FS, *gcEvery, *gcGarbage)()
		}
		mirrors := &mirrorCollector{}
		if err := serveMetrics(ctx, *metrics, newRegistry(e.Metrics(), mirrors)); err != nil {
			return fail(err)
		}
		cfg.FS = e.FS
		lm, err := fuse.Mount(ctx, mnt, cfg)
		if err != nil {
			return fail(err)
		}
		mirrors.m.Store(lm)
		m = lm
		log.Info("txnfs mounted", "mountpoint", mnt, "data", *dir)
	}
	if notify != nil {
		fmt.Fprintln(notify, "ok")
		notify.Close()
	}
	return serveMount(ctx, m, log)
}

// serveMount serves until the mount goes away or ctx ends (SIGINT,
// SIGTERM), then unmounts.
func serveMount(ctx context.Context, m fuse.Mounted, log *slog.Logger) error {
	done := make(chan struct{})
	go func() {
		m.Wait()
		close(done)
	}()
	select {
	case <-done:
		log.Info("txnfs unmounted", "mountpoint", m.Dir())
		return nil
	case <-ctx.Done():
	}
	log.Info("signal received: unmounting", "mountpoint", m.Dir())
	for attempt := 0; ; attempt++ {
		err := m.Unmount()
		if err == nil {
			return nil
		}
		if attempt == 5 {
			log.Warn("mount is busy: detaching it lazily; serving until its last user leaves", "err", err)
			if err := fuse.Unmount(m.Dir(), true); err != nil {
				return err
			}
			<-done
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// notifyFile returns the pipe to the --background parent, if any.
func notifyFile() *os.File {
	v := os.Getenv(notifyEnv)
	if v == "" {
		return nil
	}
	os.Unsetenv(notifyEnv)
	fd, err := strconv.Atoi(v)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "notify")
}

// startBackground re-runs this command in a new session and waits until
// it reports the mount is up.
func startBackground(args []string, logFile string, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe, append([]string{"mount"}, args...)...)
	cmd.Env = append(os.Environ(), notifyEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if logFile != "" {
		// Also what the child's helpers (fusermount3) print.
		f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "ok" {
		cmd.Process.Release()
		return nil
	}
	cmd.Wait()
	if line == "" {
		line = "the background process exited before mounting"
	}
	return errors.New(line)
}

func runUmount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("umount", stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: txnfs umount [--force] MOUNTPOINT")
		fl.PrintDefaults()
	}
	force := fl.Bool("force", false, "abort the FUSE connection and detach even if busy (lazy unmount)")
	pos, err := parsePositional(fl, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want exactly one MOUNTPOINT", errUsage)
	}
	return fuse.Unmount(pos[0], *force)
}

// mirrorCollector exports a local mount's memory mirror metrics
// (fuse.MirrorStats) once the mount exists.
type mirrorCollector struct{ m atomic.Pointer[fuse.Server] }

var (
	mirrorBytesDesc  = prometheus.NewDesc("txnfs_fuse_mirror_bytes", "Memory (tmpfs blocks) held by the mirrors of recently written files.", nil, nil)
	mirrorBudgetDesc = prometheus.NewDesc("txnfs_fuse_mirror_budget_bytes", "Memory budget of the mirrors (--mirror-bytes).", nil, nil)
	mirrorFilesDesc  = prometheus.NewDesc("txnfs_fuse_mirror_files", "Files with a memory mirror.", nil, nil)
	mirrorEventsDesc = prometheus.NewDesc("txnfs_fuse_mirror_events_total", "Mirror events: created, dropped, evicted (dropped for the budget), resynced (copied again from the engine), passthrough_opens, passthrough_writers (writable opens given passthrough: passthrough readers had the file open), reconciled and reconciled_bytes (passthrough writes written into the engine).", []string{"event"}, nil)
)

func (c *mirrorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- mirrorBytesDesc
	ch <- mirrorBudgetDesc
	ch <- mirrorFilesDesc
	ch <- mirrorEventsDesc
}

func (c *mirrorCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m.Load()
	if m == nil {
		return
	}
	st := m.MirrorStats()
	ch <- prometheus.MustNewConstMetric(mirrorBytesDesc, prometheus.GaugeValue, float64(st.Used))
	ch <- prometheus.MustNewConstMetric(mirrorBudgetDesc, prometheus.GaugeValue, float64(st.Budget))
	ch <- prometheus.MustNewConstMetric(mirrorFilesDesc, prometheus.GaugeValue, float64(st.Mirrors))
	for _, e := range []struct {
		name string
		v    uint64
	}{{"created", st.Created}, {"dropped", st.Dropped}, {"evicted", st.Evicted}, {"resynced", st.Resynced},
		{"passthrough_opens", st.PassthroughOpens}, {"passthrough_writers", st.PassthroughWriters},
		{"reconciled", st.Reconciled}, {"reconciled_bytes", st.ReconciledBytes}} {
		ch <- prometheus.MustNewConstMetric(mirrorEventsDesc, prometheus.CounterValue, float64(e.v), e.name)
	}
}
