//go:build linux

package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
)

// TestMirrorModel runs random operations on a few files through several
// descriptors each (read-only ones, which get passthrough when the file's
// mirror is valid and nothing else has it open; read-write ones, O_APPEND
// ones), with writes at any offset, truncate (by descriptor and by path),
// punch hole, fallocate and copy_file_range, and compares every read with
// a model. TXNFS_MIRROR_SEED replays a seed; the seed is printed.
func TestMirrorModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXNFS_MIRROR_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (TXNFS_MIRROR_SEED=%d replays it)", seed, seed)
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	dir, m := newEnv(t, envOptions{mirror: SuggestedMirrorBytes}).mount()
	runMirrorModel(t, m, dir, seed, steps)
}

type modelFD struct {
	f    *os.File
	name string
	kind int // 0 read-only, 1 read-write, 2 O_APPEND write-only
}

func runMirrorModel(t *testing.T, m *Server, dir string, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var fds []*modelFD
	fail := func(format string, args ...any) {
		t.Helper()
		for _, d := range fds {
			d.f.Close()
		}
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	names := []string{"a", "b", "c"}
	model := map[string][]byte{}
	path := func(n string) string { return filepath.Join(dir, n) }
	randData := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	setLen := func(b []byte, n int) []byte {
		if n <= len(b) {
			return b[:n]
		}
		return append(b, make([]byte, n-len(b))...)
	}
	pick := func(n string, kinds ...int) *modelFD {
		var c []*modelFD
		for _, d := range fds {
			if (n == "" || d.name == n) && bytes.IndexByte([]byte{byte(kinds[0]), byte(kinds[len(kinds)-1])}, byte(d.kind)) >= 0 {
				c = append(c, d)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[rng.IntN(len(c))]
	}
	check := func(op string, d *modelFD, off int64, got []byte, n int, err error) {
		t.Helper()
		want := model[d.name]
		end := min(int(off)+len(got), len(want))
		if int(off) > len(want) {
			end = int(off)
		}
		if err != nil && !errors.Is(err, os.ErrClosed) && err.Error() != "EOF" {
			fail("%s %s at %d: %v", op, d.name, off, err)
		}
		if n != end-int(off) || !bytes.Equal(got[:n], want[off:end]) {
			first := -1
			for i := 0; i < min(n, end-int(off)); i++ {
				if got[i] != want[int(off)+i] {
					first = int(off) + i
					break
				}
			}
			fail("%s %s (kind %d) at %d: read %d bytes, model has %d (size %d), first difference at %d", op, d.name, d.kind, off, n, end-int(off), len(want), first)
		}
	}
	const maxSize = 3 << 20
	trace := os.Getenv("TXNFS_MIRROR_TRACE") != ""
	var ptReads uint64
	for step := 0; step < steps; step++ {
		n := names[rng.IntN(len(names))]
		r := rng.IntN(100)
		if trace {
			var open []string
			for _, d := range fds {
				open = append(open, fmt.Sprintf("%s/%d", d.name, d.kind))
			}
			t.Logf("step %d: op %d file %s sizes a=%d b=%d c=%d open %v pt %d", step, r, n, len(model["a"]), len(model["b"]), len(model["c"]), open, m.MirrorStats().PassthroughOpens)
		}
		switch {
		case r < 8: // create (or empty) the file through a new writer
			f, err := os.OpenFile(path(n), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				fail("step %d: create %s: %v", step, n, err)
			}
			model[n] = []byte{}
			fds = append(fds, &modelFD{f, n, 1})
		case r < 20: // open a reader (half the time: alone)
			if _, ok := model[n]; !ok {
				continue
			}
			if rng.IntN(2) == 0 {
				kept := fds[:0]
				for _, d := range fds {
					if d.name == n {
						d.f.Close()
					} else {
						kept = append(kept, d)
					}
				}
				fds = kept
				waitClosed(t, m, path(n))
			}
			before := m.MirrorStats().PassthroughOpens
			f, err := os.Open(path(n))
			if err != nil {
				fail("step %d: open %s: %v", step, n, err)
			}
			d := &modelFD{f, n, 0}
			fds = append(fds, d)
			if m.MirrorStats().PassthroughOpens > before {
				// A passthrough open: its reads reach no READ request.
				reads := m.readRequests.Load()
				buf := make([]byte, len(model[n])+10)
				k, err := f.ReadAt(buf, 0)
				check("passthrough read", d, 0, buf, k, err)
				if extra := m.readRequests.Load() - reads; extra != 0 {
					fail("step %d: %d READ requests through a passthrough open of %s", step, extra, n)
				}
				ptReads++
			}
		case r < 26: // open a writer, read-write or append
			if _, ok := model[n]; !ok {
				continue
			}
			kind, flags := 1, os.O_RDWR
			if rng.IntN(3) == 0 {
				kind, flags = 2, os.O_WRONLY|os.O_APPEND
			}
			f, err := os.OpenFile(path(n), flags, 0)
			if err != nil {
				fail("step %d: open %s for writing: %v", step, n, err)
			}
			fds = append(fds, &modelFD{f, n, kind})
		case r < 40: // close one
			if len(fds) == 0 {
				continue
			}
			i := rng.IntN(len(fds))
			fds[i].f.Close()
			fds = append(fds[:i], fds[i+1:]...)
		case r < 55: // pwrite
			d := pick("", 1)
			if d == nil {
				continue
			}
			off := rng.IntN(maxSize)
			data := randData(1 + rng.IntN(256<<10))
			if _, err := d.f.WriteAt(data, int64(off)); err != nil {
				fail("step %d: write %s: %v", step, d.name, err)
			}
			b := model[d.name]
			if len(b) < off+len(data) {
				b = setLen(b, off+len(data))
			}
			copy(b[off:], data)
			model[d.name] = b
		case r < 60: // append
			d := pick("", 2)
			if d == nil {
				continue
			}
			data := randData(1 + rng.IntN(64<<10))
			if _, err := d.f.Write(data); err != nil {
				fail("step %d: append %s: %v", step, d.name, err)
			}
			model[d.name] = append(model[d.name], data...)
		case r < 64: // ftruncate
			d := pick("", 1)
			if d == nil {
				continue
			}
			size := rng.IntN(maxSize)
			if err := d.f.Truncate(int64(size)); err != nil {
				fail("step %d: ftruncate %s: %v", step, d.name, err)
			}
			model[d.name] = setLen(model[d.name], size)
		case r < 66: // truncate by path (allowed with passthrough readers)
			if _, ok := model[n]; !ok {
				continue
			}
			size := rng.IntN(maxSize)
			if err := os.Truncate(path(n), int64(size)); err != nil {
				fail("step %d: truncate %s: %v", step, n, err)
			}
			model[n] = setLen(model[n], size)
		case r < 70: // punch hole, or fallocate extending the file
			d := pick("", 1)
			if d == nil {
				continue
			}
			off, length := rng.IntN(maxSize), 1+rng.IntN(1<<20)
			b := model[d.name]
			if rng.IntN(2) == 0 {
				if err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(length)); err != nil {
					fail("step %d: punch %s: %v", step, d.name, err)
				}
				for i := off; i < min(off+length, len(b)); i++ {
					b[i] = 0
				}
			} else {
				if err := unix.Fallocate(int(d.f.Fd()), 0, int64(off), int64(length)); err != nil {
					fail("step %d: fallocate %s: %v", step, d.name, err)
				}
				if len(b) < off+length {
					b = setLen(b, off+length)
				}
			}
			model[d.name] = b
		case r < 74: // copy_file_range into a writer's file
			dst := pick("", 1)
			src := names[rng.IntN(len(names))]
			if dst == nil || model[src] == nil || src == dst.name {
				continue
			}
			sf, err := os.Open(path(src))
			if err != nil {
				fail("step %d: open %s: %v", step, src, err)
			}
			sb := model[src]
			offIn := int64(rng.IntN(len(sb) + 1))
			offOut := int64(rng.IntN(maxSize))
			length := rng.IntN(1 << 20)
			k, err := unix.CopyFileRange(int(sf.Fd()), &offIn, int(dst.f.Fd()), &offOut, length, 0)
			sf.Close()
			if err != nil {
				fail("step %d: copy_file_range %s -> %s: %v", step, src, dst.name, err)
			}
			if k > 0 {
				from := int(offIn) - k
				to := int(offOut) - k
				b := model[dst.name]
				if len(b) < to+k {
					b = setLen(b, to+k)
				}
				copy(b[to:], sb[from:from+k])
				model[dst.name] = b
			}
		case r < 77: // fsync through a writer: the engine has the model
			d := pick("", 1, 2)
			if d == nil {
				continue
			}
			if err := d.f.Sync(); err != nil {
				fail("step %d: fsync %s: %v", step, d.name, err)
			}
			checkEngine(t, m, seed, fmt.Sprintf("step %d: after fsync of %s", step, d.name), path(d.name), model[d.name])
		case r < 79: // stat: the size
			if _, ok := model[n]; !ok {
				continue
			}
			st, err := os.Stat(path(n))
			if err != nil || st.Size() != int64(len(model[n])) {
				fail("step %d: stat %s: size %d (%v), model %d", step, n, st.Size(), err, len(model[n]))
			}
		default: // pread through any readable descriptor
			d := pick("", 0, 1)
			if d == nil {
				continue
			}
			size := len(model[d.name])
			off := rng.IntN(size + 1)
			buf := make([]byte, rng.IntN(1<<20)+1)
			k, err := d.f.ReadAt(buf, int64(off))
			check(fmt.Sprintf("step %d: pread", step), d, int64(off), buf, k, err)
		}
	}
	for _, d := range fds {
		d.f.Close()
	}
	for n := range model {
		waitClosed(t, m, path(n))
		checkEngine(t, m, seed, "after the last close", path(n), model[n])
	}
	// Every file read whole through a fresh descriptor.
	for n, want := range model {
		got, err := os.ReadFile(path(n))
		if err != nil || !bytes.Equal(got, want) {
			fail("final read of %s: %d bytes (%v), model %d", n, len(got), err, len(want))
		}
	}
	st := m.MirrorStats()
	t.Logf("passthrough opens %d (%d checked for READs, %d writers), mirrors made %d, dropped %d, resynced %d, reconciled %d (%d bytes)",
		st.PassthroughOpens, ptReads, st.PassthroughWriters, st.Created, st.Dropped, st.Resynced, st.Reconciled, st.ReconciledBytes)
	if st.PassthroughOpens == 0 || st.PassthroughWriters == 0 || st.ReconciledBytes == 0 {
		t.Errorf("seed %d: passthrough readers or writers not exercised: the test did not test them", seed)
	}
}

// checkEngine compares the engine's contents of the file at path (read
// directly, not through the mount) with want.
func checkEngine(t *testing.T, m *Server, seed uint64, when, path string, want []byte) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("seed %d: %s: %v", seed, when, err)
	}
	var got []byte
	err := m.eng.View(m.ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, err := tx.GetAttr(m.ctx, fs.Ino(st.Ino))
		if err != nil {
			return err
		}
		got = make([]byte, a.Size)
		if a.Size > 0 {
			_, _, err = tx.Read(m.ctx, fs.Ino(st.Ino), 0, got)
		}
		return err
	})
	if err != nil || !bytes.Equal(got, want) {
		first := -1
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				first = i
				break
			}
		}
		t.Fatalf("seed %d: %s: the engine has %d bytes of %s (%v), model %d, first difference at %d", seed, when, len(got), filepath.Base(path), err, len(want), first)
	}
}
