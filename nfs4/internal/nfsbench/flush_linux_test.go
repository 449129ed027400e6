package nfsbench

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkFlushPatterns measures what a durable 1 MiB write costs on the
// file system of the benchmark's temporary directory with the flush
// patterns of txnfs and NFS-Ganesha, without either server: txnfs puts the
// data into a slice file with O_DIRECT, fdatasyncs it, then appends a
// commit record to the WAL and fdatasyncs that (two device flushes);
// Ganesha overwrites resident page-cache pages and fsyncs the file once.
// The other cases are the engine options discussed in docs/nfs-server.md
// ("Session 4"). The -ticks cases pause 5 ms (untimed) before each write,
// as a server's WRITEs are apart, so that every write changes the file's
// mtime: on ext4 without a journal (this machine's) the fdatasync of such
// a file also writes its inode's block, synchronously (docs/nfs-server.md
// "Session 9"); back to back, most writes fall in the same coarse clock
// tick and leave mtime alone. Metrics: p50-ms and p90-ms per durable write
// (ns/op is the mean, with the pauses). Linux only (O_DIRECT); skipped
// where O_DIRECT is refused (tmpfs).
//
//	go test ./nfs4/internal/nfsbench -run XXX -bench FlushPatterns -benchtime 200x
func BenchmarkFlushPatterns(b *testing.B) {
	const mib = 1 << 20
	buf := alignedBuf(mib)
	for i := range buf {
		buf[i] = byte(i)
	}
	rec := make([]byte, 300) // a commit record
	open := func(b *testing.B, dir, name string, flags int) int {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|flags, 0o644)
		if err != nil {
			if flags&unix.O_DIRECT != 0 && (err == unix.EINVAL || err == unix.EOPNOTSUPP) {
				b.Skipf("O_DIRECT refused here: %v", err)
			}
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	// zeroFilled writes n MiB of zeros to a new file and syncs it, then
	// opens it with flags: later writes overwrite written blocks.
	zeroFilled := func(b *testing.B, dir, name string, n, flags int) int {
		fd := open(b, dir, name, 0)
		z := make([]byte, mib)
		for i := 0; i < n; i++ {
			if _, err := unix.Pwrite(fd, z, int64(i)*mib); err != nil {
				b.Fatal(err)
			}
		}
		must(b, unix.Fsync(fd))
		fd2, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|flags, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd2) })
		return fd2
	}
	// fallocated preallocates n MiB (unwritten extents, size extended) in
	// a new file, syncs it and opens it with flags: later writes convert
	// extents but allocate nothing.
	fallocated := func(b *testing.B, dir, name string, n, flags int) int {
		fd := open(b, dir, name, 0)
		must(b, unix.Fallocate(fd, 0, 0, int64(n)*mib))
		must(b, unix.Fsync(fd))
		fd2, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|flags, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd2) })
		return fd2
	}
	type pattern struct {
		name string
		// setup returns the durable write of iteration i.
		setup func(b *testing.B, dir string) func(i int)
		// tick: wait 5 ms (untimed) before each write, as between a
		// server's WRITEs, so that the file system's coarse clock has moved
		// and every write changes the file's mtime.
		tick bool
	}
	// walFile opens the log: appended to (as pebble's new logs were before
	// session 8), or overwriting zeros written ahead (datadir's logs now).
	walFile := func(b *testing.B, dir string, filled bool) int {
		if filled {
			return zeroFilled(b, dir, "wal", 4, 0)
		}
		return open(b, dir, "wal", 0)
	}
	walWrite := func(b *testing.B, w int, off *int64) {
		if _, err := unix.Pwrite(w, rec, *off); err != nil {
			b.Fatal(err)
		}
		*off += int64(len(rec))
		must(b, unix.Fdatasync(w))
	}
	// Where a durable put's 1 MiB lands in its slice file.
	const (
		appended      = iota // an allocating append
		overZeros            // written blocks (zeros): an overwrite, as into reused space
		overUnwritten        // fallocated (unwritten) blocks
	)
	direct := func(flags int, sliceSync bool, space int, walFilled bool) func(b *testing.B, dir string) func(int) {
		return func(b *testing.B, dir string) func(int) {
			var s int
			switch space {
			case overZeros:
				s = zeroFilled(b, dir, "slice", b.N, unix.O_DIRECT|flags)
			case overUnwritten:
				s = fallocated(b, dir, "slice", b.N, unix.O_DIRECT|flags)
			default:
				s = open(b, dir, "slice", unix.O_DIRECT|flags)
			}
			w := walFile(b, dir, walFilled)
			var off int64
			return func(i int) {
				if _, err := unix.Pwrite(s, buf, int64(i)*mib); err != nil {
					b.Fatal(err)
				}
				if sliceSync {
					must(b, unix.Fdatasync(s))
				}
				walWrite(b, w, &off)
			}
		}
	}
	ganesha := func(b *testing.B, dir string) func(int) {
		s := open(b, dir, "file", 0)
		if _, err := unix.Pwrite(s, buf, 0); err != nil {
			b.Fatal(err)
		}
		must(b, unix.Fsync(s))
		return func(int) {
			if _, err := unix.Pwrite(s, buf, 0); err != nil {
				b.Fatal(err)
			}
			must(b, unix.Fsync(s))
		}
	}
	patterns := []pattern{
		{"txnfs=direct-append+slice-sync+wal-sync", direct(0, true, appended, false), false},
		{"direct-append+wal-sync", direct(0, false, appended, false), false},
		{"direct-dsync-append+wal-sync", direct(unix.O_DSYNC, false, appended, false), false},
		{"zero-filled=direct-overwrite+slice-sync+wal-sync", direct(0, true, overZeros, false), false},
		{"zero-filled=direct-overwrite+wal-sync", direct(0, false, overZeros, false), false},
		{"fallocated=direct-overwrite+slice-sync+wal-sync", direct(0, true, overUnwritten, false), false},
		{"txnfs-s8=reused-overwrite+slice-sync+zero-filled-wal-sync", direct(0, true, overZeros, true), false},
		{"txnfs-s8-ticks=reused-overwrite+slice-sync+zero-filled-wal-sync", direct(0, true, overZeros, true), true},
		{"ganesha-ticks=buffered-overwrite+fsync", ganesha, true},
		{"covered-ticks=reused-overwrite+zero-filled-wal-sync", direct(0, false, overZeros, true), true},
		{"ganesha=buffered-overwrite+fsync", ganesha, false},
		{"wal-inline-ticks=buffered-1MiB-log-overwrite+wal-sync", func(b *testing.B, dir string) func(int) {
			w := zeroFilled(b, dir, "wal", b.N+1, 0)
			var off int64
			return func(int) {
				if _, err := unix.Pwrite(w, buf, off); err != nil {
					b.Fatal(err)
				}
				off += mib
				walWrite(b, w, &off)
			}
		}, true},
		{"redo-ticks=direct-overwrite+buffered-1MiB-log-overwrite+wal-sync", func(b *testing.B, dir string) func(int) {
			s := zeroFilled(b, dir, "slice", b.N, unix.O_DIRECT)
			w := zeroFilled(b, dir, "wal", b.N+1, 0)
			var off int64
			return func(i int) {
				if _, err := unix.Pwrite(s, buf, int64(i)*mib); err != nil {
					b.Fatal(err)
				}
				if _, err := unix.Pwrite(w, buf, off); err != nil {
					b.Fatal(err)
				}
				off += mib
				walWrite(b, w, &off)
			}
		}, true},
		{"wal-sync-alone", func(b *testing.B, dir string) func(int) {
			w := walFile(b, dir, false)
			var off int64
			return func(int) { walWrite(b, w, &off) }
		}, false},
		{"zero-filled-wal-sync-alone", func(b *testing.B, dir string) func(int) {
			w := walFile(b, dir, true)
			var off int64
			return func(int) { walWrite(b, w, &off) }
		}, false},
		{"zero-filled-wal-sync-alone-ticks", func(b *testing.B, dir string) func(int) {
			w := walFile(b, dir, true)
			var off int64
			return func(int) { walWrite(b, w, &off) }
		}, true},
	}
	for _, p := range patterns {
		b.Run(p.name, func(b *testing.B) {
			dir := b.TempDir()
			step := p.setup(b, dir)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ { // ns/op includes the ticks' pauses
				if p.tick {
					// Linux's coarse clock ticks every 1-4 ms (HZ).
					time.Sleep(5 * time.Millisecond)
				}
				t := time.Now()
				step(i)
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
			os.RemoveAll(dir)
		})
	}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// alignedBuf returns n bytes at a 4 KiB-aligned address (for O_DIRECT).
func alignedBuf(n int) []byte {
	raw := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))&4095)) & 4095
	return raw[off : off+n : off+n]
}
