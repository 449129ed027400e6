package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
)

// Benchmarks of the engine on a real data directory with full durability
// (every commit fsyncs). Results and commands: docs/benchmarks.md.

// benchEngine opens a data directory in a temporary directory.
// TXNFS_BENCH_LOGBUFFER sets datadir.Options.LogBufferBytes (-1: every
// metadata log write goes to the OS at once, after a slice flush — the
// design before the log buffer — for A/B runs in one binary).
func benchEngine(b *testing.B, inlineMax int) *fs.FS {
	b.Helper()
	logBuf, _ := strconv.Atoi(os.Getenv("TXNFS_BENCH_LOGBUFFER"))
	e, err := datadir.Open(context.Background(), datadir.Options{Dir: b.TempDir(), InlineMax: inlineMax, LogBufferBytes: logBuf})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e.FS
}

func mustDo(b *testing.B, f *fs.FS, fn func(tx *fs.Txn) error) {
	b.Helper()
	if err := f.Do(context.Background(), fs.RootCred, fn); err != nil {
		b.Fatal(err)
	}
}

func createFile(ctx context.Context, tx *fs.Txn, dir fs.Ino, name string) (fs.Attr, error) {
	a, _, err := tx.Create(ctx, dir, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644, Exclusive: true})
	return a, err
}

func BenchmarkMetadata(b *testing.B) {
	ctx := context.Background()
	for _, op := range []string{"create", "stat", "rename", "unlink"} {
		b.Run("op="+op, func(b *testing.B) {
			f := benchEngine(b, 0)
			if op != "create" {
				for i := 0; i < b.N; i++ {
					mustDo(b, f, func(tx *fs.Txn) error { _, err := createFile(ctx, tx, fs.RootIno, fmt.Sprint("f", i)); return err })
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprint("f", i)
				switch op {
				case "create":
					mustDo(b, f, func(tx *fs.Txn) error { _, err := createFile(ctx, tx, fs.RootIno, name); return err })
				case "stat":
					if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error { _, err := tx.Lookup(ctx, fs.RootIno, name); return err }); err != nil {
						b.Fatal(err)
					}
				case "rename":
					mustDo(b, f, func(tx *fs.Txn) error {
						return tx.Rename(ctx, fs.RootIno, name, fs.RootIno, "r"+name, fs.RenameFlags{})
					})
				case "unlink":
					mustDo(b, f, func(tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, name) })
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

var ioSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// BenchmarkWrite: sequential writes, each its own durable transaction.
func BenchmarkWrite(b *testing.B) {
	ctx := context.Background()
	for _, sz := range ioSizes {
		b.Run("size="+sz.name, func(b *testing.B) {
			f := benchEngine(b, 0)
			var ino fs.Ino
			mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "f"); ino = a.Ino; return err })
			buf := bytes.Repeat([]byte{'x'}, sz.n)
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mustDo(b, f, func(tx *fs.Txn) error { return tx.Write(ctx, ino, uint64(i*sz.n), buf) })
			}
		})
	}
}

// BenchmarkWriteNoSync: sequential writes, each its own NoSync
// transaction (a FUSE write, an NFS UNSTABLE WRITE), with an FS.Sync
// (fsync, COMMIT) after every syncEvery writes and at the end: durable
// throughput with the barrier where POSIX and NFS put it.
func BenchmarkWriteNoSync(b *testing.B) {
	ctx := context.Background()
	for _, sz := range ioSizes {
		for _, syncEvery := range []int{1, 64, 0} {
			name := fmt.Sprint(syncEvery)
			if syncEvery == 0 {
				name = "end" // one Sync after all b.N writes (fio --end_fsync=1)
			}
			b.Run(fmt.Sprintf("size=%s/sync-every=%s", sz.name, name), func(b *testing.B) {
				f := benchEngine(b, 0)
				var ino fs.Ino
				mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "f"); ino = a.Ino; return err })
				buf := bytes.Repeat([]byte{'x'}, sz.n)
				b.SetBytes(int64(sz.n))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
						return tx.Write(ctx, ino, uint64(i*sz.n), buf)
					}); err != nil {
						b.Fatal(err)
					}
					if (syncEvery > 0 && (i+1)%syncEvery == 0) || i == b.N-1 {
						if err := f.Sync(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// benchFiles creates empty files f0 … f(n-1) in the root, one per writer.
func benchFiles(b *testing.B, f *fs.FS, n int) []fs.Ino {
	ctx := context.Background()
	inos := make([]fs.Ino, n)
	for w := range inos {
		mustDo(b, f, func(tx *fs.Txn) error {
			a, err := createFile(ctx, tx, fs.RootIno, fmt.Sprint("f", w))
			inos[w] = a.Ino
			return err
		})
	}
	return inos
}

// BenchmarkWriteParallel: 4 writers, each writing its own file
// sequentially in 1 MiB durable transactions (compare fio --numjobs=4
// --fsync=1): the data flush of one commit overlaps the log flush of
// another, and concurrent log flushes are group-committed.
func BenchmarkWriteParallel(b *testing.B) {
	ctx := context.Background()
	const writers, n = 4, 1 << 20
	f := benchEngine(b, 0)
	inos := benchFiles(b, f, writers)
	buf := bytes.Repeat([]byte{'p'}, n)
	b.SetBytes(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range inos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := uint64(0); next.Add(1) <= int64(b.N); off += n {
				if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return tx.Write(ctx, inos[w], off, buf) }); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkWriteParallelNoSync: 4 writers, each writing its own file
// sequentially in NoSync writes (size 1 MiB or 4 KiB, one transaction
// each), then one FS.Sync (compare fio --numjobs=4 --end_fsync=1): NFS
// clients send UNSTABLE WRITEs concurrently, then COMMIT.
func BenchmarkWriteParallelNoSync(b *testing.B) {
	ctx := context.Background()
	const writers = 4
	for _, n := range []int{1 << 20, 4 << 10} {
		b.Run(fmt.Sprintf("size=%dKiB", n>>10), func(b *testing.B) {
			f := benchEngine(b, 0)
			inos := benchFiles(b, f, writers)
			buf := bytes.Repeat([]byte{'p'}, n)
			b.SetBytes(int64(n))
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range inos {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for off := uint64(0); next.Add(1) <= int64(b.N); off += uint64(n) {
						if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
							return tx.Write(ctx, inos[w], off, buf)
						}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := f.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRead: sequential reads of recently written (cached) data.
func BenchmarkRead(b *testing.B) {
	ctx := context.Background()
	const fileSize = 64 << 20
	for _, sz := range ioSizes {
		b.Run("size="+sz.name, func(b *testing.B) {
			f := benchEngine(b, 0)
			var ino fs.Ino
			chunk := bytes.Repeat([]byte{'y'}, 1<<20)
			mustDo(b, f, func(tx *fs.Txn) error {
				a, err := createFile(ctx, tx, fs.RootIno, "f")
				if err != nil {
					return err
				}
				ino = a.Ino
				for off := 0; off < fileSize; off += len(chunk) {
					if err := tx.Write(ctx, ino, uint64(off), chunk); err != nil {
						return err
					}
				}
				return nil
			})
			buf := make([]byte, sz.n)
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := uint64(i*sz.n) % fileSize
				if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
					_, _, err := tx.Read(ctx, ino, off, buf)
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTxn: creating and writing N small files in one transaction
// (grouped) versus N transactions of one file each. ns/op is per file.
func BenchmarkTxn(b *testing.B) {
	ctx := context.Background()
	data := bytes.Repeat([]byte{'z'}, 1024)
	for _, n := range []int{1, 16, 256} {
		for _, grouped := range []bool{true, false} {
			b.Run(fmt.Sprintf("ops=%d/grouped=%v", n, grouped), func(b *testing.B) {
				f := benchEngine(b, 0)
				b.ResetTimer()
				files := 0
				for i := 0; i < b.N; i += n {
					dirName := fmt.Sprint("d", i)
					var dir fs.Ino
					b.StopTimer()
					mustDo(b, f, func(tx *fs.Txn) error {
						a, _, err := tx.Create(ctx, fs.RootIno, dirName, fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
						dir = a.Ino
						return err
					})
					b.StartTimer()
					one := func(tx *fs.Txn, j int) error {
						a, err := createFile(ctx, tx, dir, fmt.Sprint("f", j))
						if err != nil {
							return err
						}
						return tx.Write(ctx, a.Ino, 0, data)
					}
					if grouped {
						mustDo(b, f, func(tx *fs.Txn) error {
							for j := 0; j < n; j++ {
								if err := one(tx, j); err != nil {
									return err
								}
							}
							return nil
						})
					} else {
						for j := 0; j < n; j++ {
							mustDo(b, f, func(tx *fs.Txn) error { return one(tx, j) })
						}
					}
					files += n
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(files), "ns/file")
			})
		}
	}
}

// BenchmarkSlicing: concat and copy of files of growing size must take
// time independent of the size (metadata only). The source file is built
// by doubling with CopyRange, so building it is cheap too.
func BenchmarkSlicing(b *testing.B) {
	ctx := context.Background()
	for _, op := range []string{"copy", "concat"} {
		for _, size := range []struct {
			name string
			n    uint64
		}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}, {"1GiB", 1 << 30}} {
			b.Run(fmt.Sprintf("op=%s/size=%s", op, size.name), func(b *testing.B) {
				f := benchEngine(b, 0)
				var src fs.Ino
				mustDo(b, f, func(tx *fs.Txn) error {
					a, err := createFile(ctx, tx, fs.RootIno, "src")
					if err != nil {
						return err
					}
					src = a.Ino
					if err := tx.Write(ctx, src, 0, bytes.Repeat([]byte{'s'}, 1<<20)); err != nil {
						return err
					}
					for have := uint64(1 << 20); have < size.n; have *= 2 {
						if _, err := tx.CopyRange(ctx, src, 0, src, have, have); err != nil {
							return err
						}
					}
					return nil
				})
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					mustDo(b, f, func(tx *fs.Txn) error {
						d, err := createFile(ctx, tx, fs.RootIno, fmt.Sprint("dst", i))
						if err != nil {
							return err
						}
						if op == "copy" {
							return tx.Copy(ctx, src, d.Ino)
						}
						return tx.Concat(ctx, d.Ino, []fs.Ino{src, src})
					})
				}
			})
		}
	}
}

// BenchmarkAppend: concurrent 64-byte appends to one file through
// FS.Append, each durable when it returns.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	for _, appenders := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("size=64B/appenders=%d", appenders), func(b *testing.B) {
			f := benchEngine(b, 0)
			var ino fs.Ino
			mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "log"); ino = a.Ino; return err })
			rec := bytes.Repeat([]byte{'a'}, 64)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := 0; w < appenders; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := f.Append(ctx, fs.RootCred, ino, rec); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		})
	}
}

// BenchmarkSmallWrite measures durable small writes with the data inline
// in metadata versus in a slice, to choose fs.DefaultInlineMax.
func BenchmarkSmallWrite(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{512, 4 << 10, 16 << 10, 64 << 10} {
		for _, inline := range []bool{true, false} {
			b.Run(fmt.Sprintf("size=%d/inline=%v", size, inline), func(b *testing.B) {
				max := -1
				if inline {
					max = 64 << 10
				}
				f := benchEngine(b, max)
				var ino fs.Ino
				mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "f"); ino = a.Ino; return err })
				buf := bytes.Repeat([]byte{'w'}, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					off := uint64(i%1024) * uint64(size)
					mustDo(b, f, func(tx *fs.Txn) error { return tx.Write(ctx, ino, off, buf) })
				}
			})
		}
	}
}

// BenchmarkStreamWrite writes a 256 MiB file sequentially in 1 MiB writes,
// 64 writes per transaction (as an NFS client's UNSTABLE writes followed
// by COMMIT): durability at each commit, compared with fio's
// --end_fsync=1 job. MB/s is the figure to compare.
//
// nosync=true writes the same file with one NoSync transaction per 1 MiB
// write and a single FS.Sync at the end (a FUSE or NFS client streaming a
// file, then fsync/COMMIT).
func BenchmarkStreamWrite(b *testing.B) {
	ctx := context.Background()
	const chunk, perTxn, total = 1 << 20, 64, 256 << 20
	buf := bytes.Repeat([]byte{'s'}, chunk)
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			b.SetBytes(total)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := benchEngine(b, 0)
				var ino fs.Ino
				mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "big"); ino = a.Ino; return err })
				b.StartTimer()
				if noSync {
					for off := 0; off < total; off += chunk {
						if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
							return tx.Write(ctx, ino, uint64(off), buf)
						}); err != nil {
							b.Fatal(err)
						}
					}
					if err := f.Sync(ctx); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for off := 0; off < total; off += chunk * perTxn {
					mustDo(b, f, func(tx *fs.Txn) error {
						for j := 0; j < perTxn; j++ {
							if err := tx.Write(ctx, ino, uint64(off+j*chunk), buf); err != nil {
								return err
							}
						}
						return nil
					})
				}
			}
		})
	}
}

// BenchmarkRandomWrite: random 4 KiB-aligned 4 KiB writes into a 128 MiB
// file (written first in 1 MiB pieces), each its own NoSync transaction,
// one FS.Sync at the end (a FUSE mount's random writes; compare fio
// --rw=randwrite --bs=4k --size=128M --end_fsync=1). The file fragments as
// the run goes on, so the per-write cost must not grow with its extent
// count (fuse ENGINE-REQUESTS 7). The offsets come from a fixed seed.
func BenchmarkRandomWrite(b *testing.B) {
	ctx := context.Background()
	const fileSize, bs = 128 << 20, 4096
	for _, nosync := range []bool{true, false} {
		b.Run(fmt.Sprintf("nosync=%v", nosync), func(b *testing.B) {
			f := benchEngine(b, 0)
			var ino fs.Ino
			mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "f"); ino = a.Ino; return err })
			fill := bytes.Repeat([]byte{'f'}, 1<<20)
			for off := 0; off < fileSize; off += len(fill) {
				if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
					return tx.Write(ctx, ino, uint64(off), fill)
				}); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 7))
			buf := bytes.Repeat([]byte{'x'}, bs)
			b.SetBytes(bs)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := rng.Uint64N(fileSize/bs) * bs
				if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: nosync}, func(tx *fs.Txn) error {
					return tx.Write(ctx, ino, off, buf)
				}); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}

// BenchmarkGetAttrUsed: GetAttr (whose Used the inode keeps; layout 2 summed every chunk
// record of the file) of a 256 MiB file written in 1 MiB pieces.
func BenchmarkGetAttrUsed(b *testing.B) {
	ctx := context.Background()
	const fileSize = 256 << 20
	f := benchEngine(b, 0)
	var ino fs.Ino
	mustDo(b, f, func(tx *fs.Txn) error { a, err := createFile(ctx, tx, fs.RootIno, "f"); ino = a.Ino; return err })
	fill := bytes.Repeat([]byte{'f'}, 1<<20)
	for off := 0; off < fileSize; off += len(fill) {
		if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
			return tx.Write(ctx, ino, uint64(off), fill)
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, err := tx.GetAttr(ctx, ino)
			if err == nil && a.Used != fileSize {
				err = fmt.Errorf("Used %d, want %d", a.Used, fileSize)
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}
