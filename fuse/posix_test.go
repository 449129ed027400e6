//go:build linux

package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPOSIX is the project's own POSIX suite, run against one mount;
// each subtest works in a directory of its own.
func TestPOSIX(t *testing.T) { posixSuite(t, mountOne(t), nil) }

// posixSuite runs the POSIX suite on mnt, except the cases named in skip
// (with the reason, logged).
func posixSuite(t *testing.T, mnt string, skip map[string]string) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, dir string)
	}{
		{"CreateFlags", testCreateFlags},
		{"PwriteSparse", testPwriteSparse},
		{"Truncate", testTruncate},
		{"RenameOver", testRenameOver},
		{"HardLinks", testHardLinks},
		{"Symlinks", testSymlinks},
		{"ReaddirOffsets", testReaddirOffsets},
		{"AttrsAndCtime", testAttrsAndCtime},
		{"UnlinkWhileOpen", testUnlinkWhileOpen},
		{"RenameAtomicUnderReaders", testRenameAtomicUnderReaders},
		{"AppendTwoFDs", testAppendTwoFDs},
		{"Fallocate", testFallocate},
		{"SeekDataHole", testSeekDataHole},
		{"CopyFileRange", testCopyFileRange},
		{"Reflink", testReflink},
		{"Tmpfile", testTmpfile},
		{"Xattr", testXattr},
		{"Statfs", testStatfs},
		{"Locks", testLocks},
		{"Mknod", testMknod},
		{"TruncRunningExecutable", testTruncRunningExecutable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := skip[tc.name]; ok {
				t.Skip(why)
			}
			dir := filepath.Join(mnt, tc.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.fn(t, dir)
		})
	}
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func testCreateFlags(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("hello world"))
	unix.Close(fd)
	_, err = unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o640)
	wantErrno(t, "O_EXCL on existing", err, unix.EEXIST)
	var st unix.Stat_t
	unix.Stat(p, &st)
	if st.Mode&0o7777 != 0o640 || st.Size != 11 {
		t.Errorf("mode %o size %d, want 640 11", st.Mode&0o7777, st.Size)
	}
	fd, err = unix.Open(p, unix.O_WRONLY|unix.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if s := readFile(t, p); s != "" {
		t.Errorf("after O_TRUNC: %q", s)
	}
	_, err = unix.Open(filepath.Join(dir, "missing"), unix.O_RDONLY, 0)
	wantErrno(t, "open missing", err, unix.ENOENT)
	_, err = unix.Open(dir, unix.O_WRONLY, 0)
	wantErrno(t, "open dir for writing", err, unix.EISDIR)
	_, err = unix.Open(filepath.Join(dir, strings.Repeat("x", 256)), unix.O_CREAT|unix.O_WRONLY, 0o644)
	wantErrno(t, "256-byte name", err, unix.ENAMETOOLONG)
	// O_APPEND writes at the end whatever the offset.
	writeFile(t, p, "abc")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Seek(0, io.SeekStart)
	f.Write([]byte("def"))
	f.Close()
	if s := readFile(t, p); s != "abcdef" {
		t.Errorf("O_APPEND: %q", s)
	}
}

func testPwriteSparse(t *testing.T, dir string) {
	p := filepath.Join(dir, "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const far = 1<<30 + 5
	if _, err := f.WriteAt([]byte("end"), far); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("start"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XY"), 2); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if st.Size() != far+3 {
		t.Fatalf("size %d", st.Size())
	}
	if blocks := st.Sys().(*syscall.Stat_t).Blocks; blocks > 64 {
		// fs.Attr.Used counts the file's extents, not its holes.
		t.Errorf("sparse file reports %d blocks", blocks)
	}
	buf := make([]byte, 8)
	f.ReadAt(buf, 0)
	if string(buf) != "stXYt\x00\x00\x00" {
		t.Errorf("head %q", buf)
	}
	n, err := f.ReadAt(buf, far-2)
	if n != 5 || string(buf[:5]) != "\x00\x00end" || err != io.EOF {
		t.Errorf("tail %q %d %v", buf[:n], n, err)
	}
	// A big unaligned write, read back.
	big := bytes.Repeat([]byte("0123456789abcdef"), 300000)
	if _, err := f.WriteAt(big, 12345); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(big))
	if _, err := f.ReadAt(got, 12345); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Error("big write read back differs")
	}
}

func testTruncate(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, "0123456789")
	if err := os.Truncate(p, 4); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 8); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, p); s != "0123\x00\x00\x00\x00" {
		t.Errorf("after truncate: %q", s)
	}
	// ftruncate through a write-only fd of a file the caller may not
	// open for writing any more.
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o444)
	if err := f.Truncate(1); err != nil {
		t.Errorf("ftruncate: %v", err)
	}
	f.Close()
	if s := readFile(t, p); s != "0" {
		t.Errorf("after ftruncate: %q", s)
	}
	wantErrno(t, "truncate dir", os.Truncate(dir, 0), unix.EISDIR)
}

func testRenameOver(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, a, "A")
	writeFile(t, b, "B")
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, b); s != "A" {
		t.Errorf("b = %q", s)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("a still exists: %v", err)
	}
	d1, d2 := filepath.Join(dir, "d1"), filepath.Join(dir, "d2")
	os.Mkdir(d1, 0o755)
	os.Mkdir(d2, 0o755)
	writeFile(t, filepath.Join(d1, "x"), "x")
	// (os.Rename refuses to replace a directory by itself.)
	if err := unix.Rename(d1, d2); err != nil {
		t.Fatalf("rename dir over empty dir: %v", err)
	}
	if s := readFile(t, filepath.Join(d2, "x")); s != "x" {
		t.Errorf("d2/x = %q", s)
	}
	os.Mkdir(d1, 0o755)
	wantErrno(t, "rename over non-empty dir", unix.Rename(d1, d2), unix.ENOTEMPTY)
	wantErrno(t, "rename dir into itself", unix.Rename(d2, filepath.Join(d2, "sub")), unix.EINVAL)
	wantErrno(t, "rename file over dir", unix.Rename(b, d1), unix.EISDIR)
	wantErrno(t, "rename dir over file", unix.Rename(d1, b), unix.ENOTDIR)
	wantErrno(t, "RENAME_NOREPLACE", unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, d1, unix.RENAME_NOREPLACE), unix.EEXIST)
	if err := unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, d1, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if s := readFile(t, d1); s != "A" {
		t.Errorf("after exchange d1 = %q", s)
	}
	if st, err := os.Stat(b); err != nil || !st.IsDir() {
		t.Errorf("after exchange b is not a dir: %v", err)
	}
}

func testHardLinks(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, a, "data")
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	var sa, sb unix.Stat_t
	unix.Stat(a, &sa)
	unix.Stat(b, &sb)
	if sa.Ino != sb.Ino || sa.Nlink != 2 {
		t.Errorf("ino %d/%d nlink %d", sa.Ino, sb.Ino, sa.Nlink)
	}
	writeFile(t, b, "new")
	if s := readFile(t, a); s != "new" {
		t.Errorf("a = %q", s)
	}
	os.Remove(a)
	unix.Stat(b, &sb)
	if sb.Nlink != 1 {
		t.Errorf("nlink after unlink %d", sb.Nlink)
	}
	wantErrno(t, "link to dir", os.Link(dir, filepath.Join(dir, "dl")), unix.EPERM)
	wantErrno(t, "link over existing", os.Link(b, b), unix.EEXIST)
}

func testSymlinks(t *testing.T, dir string) {
	target := filepath.Join(dir, "t")
	writeFile(t, target, "via link")
	l := filepath.Join(dir, "l")
	if err := os.Symlink("t", l); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(l); got != "t" {
		t.Errorf("readlink %q", got)
	}
	if s := readFile(t, l); s != "via link" {
		t.Errorf("through link: %q", s)
	}
	st, _ := os.Lstat(l)
	if st.Mode()&os.ModeSymlink == 0 || st.Size() != 1 {
		t.Errorf("lstat %v size %d", st.Mode(), st.Size())
	}
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))
	if _, err := os.Stat(filepath.Join(dir, "dangling")); !os.IsNotExist(err) {
		t.Errorf("dangling: %v", err)
	}
	long := strings.Repeat("a/", 2000)
	if err := os.Symlink(long, filepath.Join(dir, "long")); err != nil {
		t.Errorf("4000-byte symlink: %v", err)
	} else if got, _ := os.Readlink(filepath.Join(dir, "long")); got != long {
		t.Error("long symlink target differs")
	}
}

// testReaddirOffsets checks that telldir/seekdir offsets stay valid while
// entries are added and removed, and that every entry is listed once.
func testReaddirOffsets(t *testing.T, dir string) {
	const n = 500
	for i := range n {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%04d", i)), "")
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	seen := map[string]int{}
	buf := make([]byte, 1024) // small: many getdents calls
	var resumeAt int64
	for round := 0; ; round++ {
		nb, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if nb == 0 {
			break
		}
		for b := buf[:nb]; len(b) > 0; {
			reclen := int(uint16(b[16]) | uint16(b[17])<<8)
			off := int64(uint64(b[8]) | uint64(b[9])<<8 | uint64(b[10])<<16 | uint64(b[11])<<24 | uint64(b[12])<<32)
			name := string(bytes.TrimRight(b[19:reclen], "\x00"))
			seen[name]++
			if name == "f0250" {
				resumeAt = off
			}
			b = b[reclen:]
		}
		if round == 3 {
			// Concurrent changes: remove listed and unlisted entries,
			// add new ones.
			os.Remove(filepath.Join(dir, "f0000"))
			os.Remove(filepath.Join(dir, "f0499"))
			writeFile(t, filepath.Join(dir, "new"), "")
		}
	}
	for i := 1; i < n-1; i++ {
		if c := seen[fmt.Sprintf("f%04d", i)]; c != 1 {
			t.Errorf("f%04d listed %d times", i, c)
		}
	}
	if seen["."] != 1 || seen[".."] != 1 {
		t.Errorf(". and .. listed %d and %d times", seen["."], seen[".."])
	}
	// Seek back to just after f0250.
	if _, err := unix.Seek(fd, resumeAt, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	nb, _ := unix.Getdents(fd, buf)
	if nb == 0 {
		t.Fatal("nothing after seekdir")
	}
	if name := string(bytes.TrimRight(buf[19:int(buf[16])|int(buf[17])<<8], "\x00")); name != "f0251" {
		t.Errorf("after seekdir: %q, want f0251", name)
	}
}

func testAttrsAndCtime(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, "x")
	stat := func() unix.Stat_t {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st0 := stat()
	time.Sleep(20 * time.Millisecond)
	os.Chmod(p, 0o600)
	st1 := stat()
	if st1.Mode&0o777 != 0o600 {
		t.Errorf("mode %o", st1.Mode)
	}
	if st1.Ctim == st0.Ctim || st1.Mtim != st0.Mtim {
		t.Errorf("chmod: ctime %v -> %v, mtime %v -> %v", st0.Ctim, st1.Ctim, st0.Mtim, st1.Mtim)
	}
	os.Chown(p, 1234, 5678)
	st2 := stat()
	if st2.Uid != 1234 || st2.Gid != 5678 || st2.Ctim == st1.Ctim {
		t.Errorf("chown: %d:%d", st2.Uid, st2.Gid)
	}
	mt := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	at := time.Date(1999, 1, 1, 0, 0, 0, 1, time.UTC)
	if err := os.Chtimes(p, at, mt); err != nil {
		t.Fatal(err)
	}
	st3 := stat()
	if time.Unix(st3.Mtim.Unix()).UTC() != mt || time.Unix(st3.Atim.Unix()).UTC() != at {
		t.Errorf("utimens: atime %v mtime %v", time.Unix(st3.Atim.Unix()), time.Unix(st3.Mtim.Unix()))
	}
	if st3.Ctim == st2.Ctim {
		t.Error("utimens did not change ctime")
	}
	time.Sleep(20 * time.Millisecond)
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.Write([]byte("y"))
	f.Close()
	st4 := stat()
	if st4.Mtim == st3.Mtim || st4.Ctim == st3.Ctim {
		t.Error("write did not change mtime and ctime")
	}
	// Setuid is cleared by a write of a non-owner (the kernel leaves it
	// to the file system: HANDLE_KILLPRIV).
	os.Chown(p, 0, 0)
	os.Chmod(p, 0o4777)
	asUser(t, 1000, 1000, "sh", "-c", "printf z >> "+p)
	if st := stat(); st.Mode&0o4000 != 0 {
		t.Errorf("setuid kept after a non-owner's write: %o", st.Mode)
	}
}

func testUnlinkWhileOpen(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, "still here")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("stat after unlink: %v", err)
	}
	buf := make([]byte, 64)
	n, _ := f.ReadAt(buf, 0)
	if string(buf[:n]) != "still here" {
		t.Errorf("read after unlink: %q", buf[:n])
	}
	if _, err := f.WriteAt([]byte("STILL"), 0); err != nil {
		t.Errorf("write after unlink: %v", err)
	}
	n, _ = f.ReadAt(buf, 0)
	if string(buf[:n]) != "STILL here" {
		t.Errorf("read after write after unlink: %q", buf[:n])
	}
	st, err := f.Stat()
	if err != nil || st.Sys().(*syscall.Stat_t).Nlink != 0 {
		t.Errorf("fstat after unlink: %v %+v", err, st)
	}
	// Replacing by rename keeps the old file readable too.
	writeFile(t, p, "old")
	g, _ := os.Open(p)
	writeFile(t, p+".tmp", "new")
	os.Rename(p+".tmp", p)
	n, _ = g.ReadAt(buf, 0)
	if string(buf[:n]) != "old" {
		t.Errorf("read of replaced file: %q", buf[:n])
	}
	g.Close()
	f.Close()
}

// testRenameAtomicUnderReaders replaces a file by rename while readers
// open and read it: every read must see one complete version.
func testRenameAtomicUnderReaders(t *testing.T, dir string) {
	p := filepath.Join(dir, "target")
	version := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 10000+i%7) }
	os.WriteFile(p, version(0), 0o644)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, 8)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(p)
				if err != nil {
					errs <- err
					return
				}
				reads.Add(1)
				if len(b) < 10000 || bytes.Count(b, b[:1]) != len(b) {
					errs <- fmt.Errorf("torn read: %d bytes, %q...", len(b), b[:min(len(b), 20)])
					return
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		tmp := fmt.Sprintf("%s.tmp%d", p, i)
		if err := os.WriteFile(tmp, version(i), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d reads", reads.Load())
}

// testAppendTwoFDs: two writers with their own O_APPEND descriptions
// interleave whole records (the multi-process variant is
// TestAppendTwoProcesses).
func testAppendTwoFDs(t *testing.T, dir string) {
	p := filepath.Join(dir, "log")
	appendRecords(t, []string{p, p}, 300)
	checkRecords(t, p, 2, 300)
}

func appendRecords(t *testing.T, paths []string, n int) {
	var wg sync.WaitGroup
	for w, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := range n {
				if _, err := f.Write(record(w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// record is a fixed-size line naming its writer and sequence number.
func record(w, i int) []byte {
	return []byte(fmt.Sprintf("writer %d record %06d %s\n", w, i, strings.Repeat("x", 100)))
}

func checkRecords(t *testing.T, p string, writers, n int) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) != writers*n {
		t.Fatalf("%d lines, want %d", len(lines), writers*n)
	}
	for _, l := range lines {
		var w, i int
		if _, err := fmt.Sscanf(l, "writer %d record %d", &w, &i); err != nil || w >= writers || l != string(record(w, i)) {
			t.Fatalf("bad record %q", l)
		}
		if i != next[w] {
			t.Fatalf("writer %d: record %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
}

func testFallocate(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	data := bytes.Repeat([]byte("z"), 3<<20)
	os.WriteFile(p, data, 0o644)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20); err != nil {
		t.Fatalf("punch hole: %v", err)
	}
	got, _ := os.ReadFile(p)
	copy(data[1<<20:2<<20], make([]byte, 1<<20))
	if !bytes.Equal(got, data) {
		t.Error("content after punch differs")
	}
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	if st.Size != 3<<20 {
		t.Errorf("after punch: size %d", st.Size)
	}
	if st.Blocks*512 > 2<<20+64<<10 || st.Blocks*512 < 2<<20 {
		t.Errorf("after punch: %d bytes used, want 2 MiB", st.Blocks*512)
	}
	if err := unix.Fallocate(fd, 0, 0, 5<<20); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	unix.Fstat(fd, &st)
	if st.Size != 5<<20 {
		t.Errorf("size after fallocate %d", st.Size)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, 9<<20); err != nil {
		t.Fatalf("fallocate keep size: %v", err)
	}
	unix.Fstat(fd, &st)
	if st.Size != 5<<20 {
		t.Errorf("size after KEEP_SIZE fallocate %d", st.Size)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, 0, 10); err != nil {
		t.Fatalf("zero range: %v", err)
	}
	buf := make([]byte, 12)
	f.ReadAt(buf, 0)
	if string(buf) != strings.Repeat("\x00", 10)+"zz" {
		t.Errorf("after zero range %q", buf)
	}
	wantErrno(t, "collapse range", unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096), unix.EOPNOTSUPP)
}

func testSeekDataHole(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	f, _ := os.Create(p)
	defer f.Close()
	const region = 8 << 20
	f.WriteAt(bytes.Repeat([]byte("d"), 4096), 3*region)
	f.Truncate(5 * region)
	fd := int(f.Fd())
	off, err := unix.Seek(fd, 0, unix.SEEK_DATA)
	if err != nil || off > 3*region || off < 2*region {
		t.Errorf("SEEK_DATA: %d %v", off, err)
	}
	off, err = unix.Seek(fd, 3*region, unix.SEEK_HOLE)
	if err != nil || off < 3*region+4096 || off > 4*region {
		t.Errorf("SEEK_HOLE: %d %v", off, err)
	}
	_, err = unix.Seek(fd, 4*region, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA past the last data", err, unix.ENXIO)
	_, err = unix.Seek(fd, 6*region, unix.SEEK_HOLE)
	wantErrno(t, "SEEK_HOLE past EOF", err, unix.ENXIO)
}

func testCopyFileRange(t *testing.T, dir string) {
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := bytes.Repeat([]byte("0123456789"), 500000)
	os.WriteFile(src, data, 0o644)
	os.WriteFile(dst, []byte("prefix"), 0o644)
	in, _ := os.Open(src)
	defer in.Close()
	out, _ := os.OpenFile(dst, os.O_WRONLY, 0)
	defer out.Close()
	offIn, offOut := int64(10), int64(6)
	total := 0
	for total < len(data)-10 {
		n, err := unix.CopyFileRange(int(in.Fd()), &offIn, int(out.Fd()), &offOut, len(data), 0)
		if err != nil {
			t.Fatalf("copy_file_range: %v", err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != len(data)-10 {
		t.Errorf("copied %d", total)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, append([]byte("prefix"), data[10:]...)) {
		t.Errorf("dst differs (%d bytes)", len(got))
	}
	// cp uses copy_file_range (or FICLONE, which FUSE does not forward).
	run(t, dir, "cp", "src", "cp")
	if got := readFile(t, filepath.Join(dir, "cp")); got != string(data) {
		t.Error("cp result differs")
	}
}

// testReflink checks what the kernel does with FICLONE and FICLONERANGE on
// a FUSE file: the VFS answers them itself (FUSE has no remap_file_range)
// with EOPNOTSUPP, without a request reaching the file system, so cp
// --reflink=auto falls back to copy_file_range (the engine's metadata-only
// copy) and --reflink=always fails. If a kernel starts forwarding them,
// this test fails and docs/fuse.md must be updated.
func testReflink(t *testing.T, dir string) {
	data := bytes.Repeat([]byte("reflink "), 100000)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "clone"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	wantErrno(t, "FICLONE", unix.IoctlFileClone(int(out.Fd()), int(in.Fd())), unix.EOPNOTSUPP)
	wantErrno(t, "FICLONERANGE", unix.IoctlFileCloneRange(int(out.Fd()),
		&unix.FileCloneRange{Src_fd: int64(in.Fd()), Src_length: 4096}), unix.EOPNOTSUPP)
	run(t, dir, "cp", "--reflink=auto", "src", "auto")
	if got := readFile(t, filepath.Join(dir, "auto")); got != string(data) {
		t.Error("cp --reflink=auto result differs")
	}
	cmd := command(dir, "cp", "--reflink=always", "src", "always")
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if outp, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("cp --reflink=always succeeded on a FUSE mount: %s", outp)
	} else if !strings.Contains(string(outp), "not supported") {
		t.Errorf("cp --reflink=always: %v: %s", err, outp)
	}
}

// testTmpfile: open(O_TMPFILE) makes a file with no name, readable and
// writable through its descriptor; linkat names it (by AT_EMPTY_PATH and by
// /proc/self/fd with AT_SYMLINK_FOLLOW), not with O_EXCL. (TestTmpfileReclaim
// checks that unnamed files are deleted.)
func testTmpfile(t *testing.T, dir string) {
	tmp := func(flags int) int {
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|flags, 0o640)
		if err != nil {
			t.Fatalf("open(O_TMPFILE): %v", err)
		}
		return fd
	}
	fd := tmp(0)
	if _, err := unix.Write(fd, []byte("unnamed data")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Nlink != 0 || st.Size != 12 || st.Mode&0o7777 != 0o640 {
		t.Errorf("fstat of the unnamed file: nlink %d size %d mode %o %v", st.Nlink, st.Size, st.Mode, err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("directory with an unnamed file: %v %v", ents, err)
	}
	if err := unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(dir, "a"), unix.AT_EMPTY_PATH); err != nil {
		t.Fatalf("linkat(AT_EMPTY_PATH): %v", err)
	}
	unix.Write(fd, []byte(" and more"))
	unix.Close(fd)
	if got := readFile(t, filepath.Join(dir, "a")); got != "unnamed data and more" {
		t.Errorf("named file: %q", got)
	}
	fd = tmp(0)
	unix.Write(fd, []byte("second"))
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, filepath.Join(dir, "b"), unix.AT_SYMLINK_FOLLOW); err != nil {
		t.Errorf("linkat(/proc/self/fd): %v", err)
	}
	unix.Close(fd)
	if got := readFile(t, filepath.Join(dir, "b")); got != "second" {
		t.Errorf("second named file: %q", got)
	}
	fd = tmp(unix.O_EXCL)
	wantErrno(t, "linkat of O_TMPFILE|O_EXCL", unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(dir, "c"), unix.AT_EMPTY_PATH), unix.ENOENT)
	unix.Write(fd, bytes.Repeat([]byte("x"), 1<<20))
	unix.Close(fd)
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("directory: %v %v", ents, err)
	}
}

// testTmpfileUnsupported: a remote mount refuses open(O_TMPFILE) with
// EOPNOTSUPP (NFS has no unnamed files), so programs take their fallback.
func testTmpfileUnsupported(t *testing.T, dir string) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err == nil {
		unix.Close(fd)
	}
	wantErrno(t, "open(O_TMPFILE)", err, unix.EOPNOTSUPP)
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("directory after O_TMPFILE: %v %v", ents, err)
	}
}

func testXattr(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, "")
	if err := unix.Setxattr(p, "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "XATTR_CREATE on existing", unix.Setxattr(p, "user.color", []byte("x"), unix.XATTR_CREATE), unix.EEXIST)
	wantErrno(t, "XATTR_REPLACE on missing", unix.Setxattr(p, "user.size", []byte("x"), unix.XATTR_REPLACE), unix.ENODATA)
	unix.Setxattr(p, "user.size", []byte("big"), 0)
	buf := make([]byte, 64)
	n, err := unix.Getxattr(p, "user.color", buf)
	if err != nil || string(buf[:n]) != "blue" {
		t.Errorf("getxattr: %q %v", buf[:n], err)
	}
	_, err = unix.Getxattr(p, "user.color", make([]byte, 2))
	wantErrno(t, "small buffer", err, unix.ERANGE)
	n, _ = unix.Listxattr(p, buf)
	list := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	slices.Sort(list)
	if !slices.Equal(list, []string{"user.color", "user.size"}) {
		t.Errorf("listxattr %q", list)
	}
	unix.Removexattr(p, "user.color")
	_, err = unix.Getxattr(p, "user.color", buf)
	wantErrno(t, "removed", err, unix.ENODATA)
	if err := unix.Setxattr(p, "trusted.x", []byte("t"), 0); err != nil {
		t.Errorf("trusted as root: %v", err)
	}
}

func testStatfs(t *testing.T, dir string) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Bsize == 0 || st.Blocks == 0 || st.Namelen != 255 || st.Files == 0 {
		t.Errorf("statfs %+v", st)
	}
}

// testLocks: flock and POSIX locks are enforced by the kernel between
// descriptions of the mount.
func testLocks(t *testing.T, dir string) {
	p := filepath.Join(dir, "lock")
	writeFile(t, p, "")
	a, _ := os.Open(p)
	defer a.Close()
	b, _ := os.Open(p)
	defer b.Close()
	if err := unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "second flock", unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	unix.Flock(int(a.Fd()), unix.LOCK_UN)
	if err := unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("flock after unlock: %v", err)
	}
	// A POSIX lock held by another process blocks F_SETLK: use flock(1)
	// on... a subprocess holding an fcntl lock via python is heavy; test
	// F_GETLK in-process (locks of one process never conflict).
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 0, Len: 10}
	if err := unix.FcntlFlock(a.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Errorf("F_SETLK: %v", err)
	}
}

func testMknod(t *testing.T, dir string) {
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(dir, "dev")
	if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(4, 300))); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Stat(dev, &st)
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 4 || unix.Minor(st.Rdev) != 300 {
		t.Errorf("device: mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	// A FIFO on the mount works as a pipe (the kernel serves it).
	done := make(chan string)
	go func() {
		b, _ := os.ReadFile(fifo)
		done <- string(b)
	}()
	if err := os.WriteFile(fifo, []byte("through the fifo"), 0); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != "through the fifo" {
		t.Errorf("fifo: %q", got)
	}
}

// testTruncRunningExecutable: open(O_TRUNC) of a program that is running
// fails with ETXTBSY and leaves the file alone (the truncation must not
// happen before the kernel's check).
func testTruncRunningExecutable(t *testing.T, dir string) {
	src, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Skip(err)
	}
	p := filepath.Join(dir, "sleeper")
	if err := os.WriteFile(p, src, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := command(dir, "./sleeper", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// Wait until the shell has exec'd the program.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); err == nil && strings.HasSuffix(exe, "sleeper") {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the program did not start")
		}
	}
	for _, flags := range []int{unix.O_WRONLY | unix.O_TRUNC, unix.O_RDONLY | unix.O_TRUNC} {
		fd, err := unix.Open(p, flags, 0)
		if err == nil {
			unix.Close(fd)
		}
		wantErrno(t, fmt.Sprintf("open(%#x) of a running program", flags), err, unix.ETXTBSY)
	}
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, src) {
		t.Errorf("the running program's file changed: %d bytes, %v", len(b), err)
	}
}
