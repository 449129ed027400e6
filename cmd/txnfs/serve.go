package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/server"
)

// coveredDefault is the default of serve's and mount's --covered
// ("true" or not; a variable so that a build can set it with -ldflags -X
// for A/B benchmarks, whose harnesses pass fixed flags). On since session
// 10, with the recovery that keeps the guarantee (docs/engine.md
// "Covered puts").
var coveredDefault = "true"

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := newFlags("serve", stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: txnfs serve [--data DIR] [--listen HOST:PORT] [flags]")
		fl.PrintDefaults()
	}
	dir := fl.String("data", "txnfs-data", "data directory (created if missing)")
	listen := fl.String("listen", "127.0.0.1:2049", "NFS listen address")
	metrics := fl.String("metrics", "", "address to serve Prometheus /metrics on (empty: off)")
	debug := fl.String("debug", "", "address to serve pprof on (empty: off)")
	rootSquash := fl.Bool("root-squash", false, "map uid 0 to nobody (65534)")
	grace := fl.Duration("grace", 0, "NFSv4 grace period after a restart, for clients to reclaim their state (0: the lease time; negative: none)")
	gcEvery := fl.Duration("gc-interval", 10*time.Minute, "garbage collection interval, at least (0: off)")
	gcGarbage := fl.Int64("gc-garbage", 64<<20, "also collect once commits made this many bytes of slice data unreachable")
	reserve := fl.Int64("reserve", 0, "free bytes of the data directory's file system kept for metadata: writes get ENOSPC before using them (0: 2% of its size, 64 MiB-4 GiB; negative: none)")
	level := fl.String("log-level", "info", "log level: debug, info, warn, error")
	sysmonSlack := fl.Duration("sysmon-slack", time.Millisecond, "timer slack of the Go runtime's monitor thread: its shortest tick (0: the system's default; see docs/nfs-server.md)")
	covered := fl.Bool("covered", coveredDefault == "true", "one device flush per durable commit whose slices went into reused space (docs/engine.md \"Covered puts\")")
	procs := fl.Int("procs", 0, "Go scheduler Ps (GOMAXPROCS) unless the GOMAXPROCS variable is set (0: twice the runtime's default, the CPUs available)")
	if err := parse(fl, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	tuneGC()
	serveProcs(*procs)
	if *sysmonSlack > 0 {
		if err := slowSysmon(ctx, *sysmonSlack); err != nil {
			log.Info("sysmon's timer slack unchanged", "err", err)
		}
	}
	e, err := datadir.Open(ctx, datadir.Options{Dir: *dir, Logger: log, Reserve: *reserve,
		// Every WRITE reply waits for its data to be written: aligned
		// payloads go to disk from the request record (no staging copy).
		SliceUnstaged: true, Covered: *covered})
	if err != nil {
		return err
	}
	defer e.Close()

	reg := newRegistry(e.Metrics())
	srv, err := server.New(server.Config{FS: e.FS, Logger: log, Registry: reg, RootSquash: *rootSquash,
		StateDir: *dir, Grace: *grace})
	if err != nil {
		return err
	}
	defer srv.Close()

	if err := serveMetrics(ctx, *metrics, reg); err != nil {
		return err
	}
	if *debug != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		if err := serveHTTP(ctx, *debug, mux); err != nil {
			return err
		}
	}
	if *gcEvery > 0 {
		// Paced by garbage (a workload overwriting large files gets its
		// freed space back for reuse while it runs), with gc-interval as
		// the floor; see fs.RunCollector.
		defer startCollector(ctx, e.FS, *gcEvery, *gcGarbage)()
	}

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log.Info("txnfs serving NFSv4", "listen", l.Addr().String(), "data", *dir)
	err = srv.Serve(ctx, l)
	if ctx.Err() != nil {
		log.Info("txnfs shutting down")
		return nil
	}
	return err
}

// newRegistry returns a Prometheus registry with the Go runtime's and the
// process's collectors and cs.
func newRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

// serveMetrics serves reg's metrics at http://addr/metrics until ctx
// ends (nothing if addr is empty).
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return serveHTTP(ctx, addr, mux)
}

func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return nil
}

// tuneGC makes the server collect garbage less often than Go's default
// (GOGC=400 instead of 100) under a soft memory limit of 1.5 GiB, unless
// GOGC or GOMEMLIMIT are set in the environment. Small NFS requests
// allocate a few KiB each (generated XDR code) while the live heap stays
// small, so at the default the collector ran every few thousand requests:
// GC=400 gave 10–20% more GETATTR/LOOKUP/OPEN+READ+CLOSE compounds/s
// (docs/nfs-server.md, benchmarks). The limit (the memory tier is
// 256 MiB) keeps the heap from growing 5x a large live heap.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(3 << 29)
	}
}

// serveProcs sets GOMAXPROCS to n, or with n <= 0 to twice the runtime's
// default (defaultProcs: the CPUs available to the process), unless the
// GOMAXPROCS environment variable is set. More Ps
// than CPUs: a durable WRITE's
// goroutine blocks in pwrite and fdatasync holding its P, and with sysmon
// ticking at ~1 ms (slowSysmon) a P blocked so would be retaken late when
// every P is busy; spare Ps let the other goroutines run meanwhile
// without a retake. Measured with 16 clients writing 1 MiB
// (docs/nfs-server.md, "Session 9"): 4 Ps against 2 gave 0.97–2.27x the
// throughput, and the 1-client rows within noise.
func serveProcs(n int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if n <= 0 {
		n = 2 * defaultProcs
	}
	runtime.GOMAXPROCS(n)
}

// defaultProcs is GOMAXPROCS as the process started with it.
var defaultProcs = runtime.GOMAXPROCS(0)

// startCollector runs the garbage collector of f (fs.RunCollector: paced
// by garbage, at least every interval) until the returned stop is called,
// which waits for it: call stop before closing the engine.
func startCollector(ctx context.Context, f *fs.FS, interval time.Duration, garbage int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.RunCollector(ctx, fs.GCSchedule{Interval: interval, GarbageBytes: uint64(max(garbage, 0))})
	}()
	return func() { cancel(); <-done }
}
