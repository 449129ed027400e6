// Command benchvnfs runs the workloads of scripts/bench-fuse-remote.sh
// (fio's jobs and the metadata loop) through the vnfs client library
// directly, for comparison with the same workloads through a remote FUSE
// mount of the same server. Data calls carry one I/O each, as a program's
// read(2)/write(2) do; metadata runs both one item per call and in
// vectors of 256.
//
//	benchvnfs -addr HOST:PORT [-size 256MiB] [-runtime 10s] [-files 10000]
//
// It prints one line per workload: "name MiB/s IOPS" (data) or
// "name ops/s" (metadata).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/txnfs/txnfs/vnfs"
)

func main() {
	addr := flag.String("addr", "", "server host:port")
	size := flag.Int64("size", 256<<20, "file size in bytes")
	runtime := flag.Duration("runtime", 10*time.Second, "duration of each random job")
	files := flag.Int("files", 10000, "files of the metadata jobs")
	dir := flag.String("dir", "/benchvnfs", "working directory on the server")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "benchvnfs: -addr is required")
		os.Exit(2)
	}
	if err := run(*addr, *dir, *size, *runtime, *files); err != nil {
		fmt.Fprintln(os.Stderr, "benchvnfs:", err)
		os.Exit(1)
	}
}

func run(addr, dir string, size int64, runtime time.Duration, files int) error {
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: addr})
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.VMkdir(ctx, []vnfs.MkdirItem{{Path: dir, Mode: 0o755}}); err != nil {
		return err
	}
	data := func(name string, bs int, write, random bool, timed bool) error {
		// Reads read the file seq-write-1M wrote (fio lays its read
		// files out first, untimed).
		path := dir + "/bench.seq-write-1M"
		flags := vnfs.OpenRead
		if write {
			path = dir + "/bench." + name
			flags = vnfs.OpenWrite | vnfs.OpenCreate
		}
		var items [1]vnfs.OpenItem
		items[0] = vnfs.OpenItem{Path: path, Flags: flags}
		if _, err := f.VOpen(ctx, items[:]); err != nil {
			return err
		}
		fd := items[0].FD
		defer f.VClose(ctx, []vnfs.FD{fd})
		buf := make([]byte, bs)
		for i := range buf {
			buf[i] = byte(i*7 + 1)
		}
		blocks := size / int64(bs)
		start := time.Now()
		var n int64
		for i := int64(0); ; i++ {
			if timed && time.Since(start) >= runtime || !timed && i >= blocks {
				break
			}
			off := i % blocks
			if random {
				off = rand.Int64N(blocks)
			}
			io := []vnfs.IO{{File: vnfs.D(fd), Offset: uint64(off) * uint64(bs), Data: buf}}
			if write && !timed && i == blocks-1 || write && timed && time.Since(start) >= runtime {
				io[0].Flags = vnfs.Stable
			}
			if write {
				_, err = f.VWrite(ctx, io)
			} else {
				_, err = f.VRead(ctx, io)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			n++
		}
		if write {
			// fio's end_fsync: the last write above was not stable in
			// timed runs; one stable write of nothing is a COMMIT.
			if _, err := f.VWrite(ctx, []vnfs.IO{{File: vnfs.D(fd), Offset: 0, Data: buf[:0], Flags: vnfs.Stable}}); err != nil {
				return err
			}
		}
		el := time.Since(start).Seconds()
		fmt.Printf("%s %.0f %.0f\n", name, float64(n*int64(bs))/el/(1<<20), float64(n)/el)
		return nil
	}
	const K, M = 4 << 10, 1 << 20
	for _, j := range []struct {
		name                 string
		bs                   int
		write, random, timed bool
	}{
		{"seq-write-1M", M, true, false, false},
		{"seq-read-1M", M, false, false, false},
		{"seq-read-1M-again", M, false, false, false},
		{"seq-write-4K", K, true, false, true},
		{"rand-read-4K", K, false, true, true},
		{"rand-write-4K", K, true, true, true},
		{"rand-read-1M", M, false, true, true},
		{"rand-write-1M", M, true, true, true},
	} {
		if err := data(j.name, j.bs, j.write, j.random, j.timed); err != nil {
			return err
		}
	}
	for _, batch := range []int{1, 256} {
		if err := meta(ctx, f, fmt.Sprintf("%s/meta%d", dir, batch), files, batch); err != nil {
			return err
		}
	}
	return nil
}

// meta creates, stats and unlinks n files, batch items per call.
func meta(ctx context.Context, f vnfs.FS, dir string, n, batch int) error {
	if _, err := f.VMkdir(ctx, []vnfs.MkdirItem{{Path: dir, Mode: 0o755}}); err != nil {
		return err
	}
	name := func(i int) string { return fmt.Sprintf("%s/f%06d", dir, i) }
	step := func(op string, fn func(lo, hi int) error) error {
		start := time.Now()
		for lo := 0; lo < n; lo += batch {
			if err := fn(lo, min(n, lo+batch)); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
		fmt.Printf("%s-x%d %.0f\n", op, batch, float64(n)/time.Since(start).Seconds())
		return nil
	}
	if err := step("create", func(lo, hi int) error {
		ios := make([]vnfs.IO, 0, hi-lo)
		for i := lo; i < hi; i++ {
			ios = append(ios, vnfs.IO{File: vnfs.P(name(i)), Flags: vnfs.Create})
		}
		_, err := f.VWrite(ctx, ios)
		return err
	}); err != nil {
		return err
	}
	if err := step("stat", func(lo, hi int) error {
		items := make([]vnfs.AttrItem, 0, hi-lo)
		for i := lo; i < hi; i++ {
			items = append(items, vnfs.AttrItem{File: vnfs.P(name(i)), Mask: vnfs.AttrStat})
		}
		_, err := f.VGetAttrs(ctx, items)
		return err
	}); err != nil {
		return err
	}
	return step("unlink", func(lo, hi int) error {
		paths := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			paths = append(paths, name(i))
		}
		_, err := f.VRemove(ctx, paths)
		return err
	})
}
