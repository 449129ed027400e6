package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
)

// BenchmarkTree runs the engine side of the vectorized tree tools
// (vnfs.md "Trees") on 20 directories of 64 files of 4 KiB: op=remove
// removes each directory's files in one transaction (a grouped REMOVE
// run), op=readdir lists each directory with attributes (ls -lR),
// op=read resolves and reads each file, 64 files per read-only
// transaction (tar). ns/op is per file; cpu-ns/file is the process CPU
// (user+system) of the timed part, which includes pebble's flushes and
// compactions of the setup's writes; thread-ns/file is the CPU of the
// benchmark's own thread (locked to it), the steadiest measure of the
// operations themselves on a shared machine.
func BenchmarkTree(b *testing.B) {
	ctx := context.Background()
	const dirs, files = 20, 64
	data := bytes.Repeat([]byte{'t'}, 4<<10)
	for _, op := range []string{"remove", "readdir", "read"} {
		b.Run("op="+op, func(b *testing.B) {
			runtime.LockOSThread() // for threadCPU
			defer runtime.UnlockOSThread()
			f := benchEngine(b, 0)
			buf := make([]byte, len(data))
			var cpu, thread time.Duration
			n := 0
			for b.Loop() {
				b.StopTimer()
				root := fmt.Sprint("t", n)
				n++
				var top fs.Ino
				mustDo(b, f, func(tx *fs.Txn) error {
					a, _, err := tx.Create(ctx, fs.RootIno, root, fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
					top = a.Ino
					return err
				})
				dirIno := make([]fs.Ino, dirs)
				for d := range dirs {
					mustDo(b, f, func(tx *fs.Txn) error {
						a, _, err := tx.Create(ctx, top, fmt.Sprint("d", d), fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
						if err != nil {
							return err
						}
						dirIno[d] = a.Ino
						for i := range files {
							fa, err := createFile(ctx, tx, a.Ino, fmt.Sprintf("file-%05d", i))
							if err != nil {
								return err
							}
							if err := tx.Write(ctx, fa.Ino, 0, data); err != nil {
								return err
							}
						}
						return nil
					})
				}
				start, startThread := processCPU(), threadCPU()
				b.StartTimer()
				for _, dir := range dirIno {
					switch op {
					case "remove":
						mustDo(b, f, func(tx *fs.Txn) error {
							for i := range files {
								if err := tx.Remove(ctx, dir, fmt.Sprintf("file-%05d", i)); err != nil {
									return err
								}
							}
							return nil
						})
					case "readdir":
						err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
							ents, _, err := tx.ReadDir(ctx, dir, fs.ReadDirRequest{WithAttr: true})
							if err == nil && len(ents) != files {
								err = fmt.Errorf("%d entries", len(ents))
							}
							return err
						})
						if err != nil {
							b.Fatal(err)
						}
					case "read":
						err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
							for i := range files {
								h, err := tx.Resolve(ctx, dir, fmt.Sprintf("file-%05d", i))
								if err != nil {
									return err
								}
								if _, _, err := tx.Read(ctx, h.Ino, 0, buf); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				cpu += processCPU() - start
				thread += threadCPU() - startThread
				b.StartTimer()
			}
			perFile := float64(b.N * dirs * files)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perFile, "ns/file")
			b.ReportMetric(float64(cpu.Nanoseconds())/perFile, "cpu-ns/file")
			b.ReportMetric(float64(thread.Nanoseconds())/perFile, "thread-ns/file")
		})
	}
}

// processCPU returns the process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU returns the calling thread's user+system CPU time.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
