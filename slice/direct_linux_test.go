package slice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// directData returns n pseudo-random bytes starting at a deliberately
// unaligned address (so appendDirect must stage them).
func directData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n+1)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b[1:]
}

func openDirectLocal(t *testing.T, dir string, directMin int) *Local {
	t.Helper()
	l, err := OpenLocal(context.Background(), LocalOptions{FS: vfs.Default, Dir: dir, Files: 1, DirectMin: directMin})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// openDirectOrSkip opens a one-file store in dir with direct writes at the
// default threshold, or skips the test if dir's file system refuses
// O_DIRECT.
func openDirectOrSkip(t *testing.T, dir string) *Local {
	t.Helper()
	return skipUnlessDirect(t, dir, openDirectLocal(t, dir, 0))
}

// openUnstagedOrSkip is openDirectOrSkip with LocalOptions.Unstaged.
func openUnstagedOrSkip(t *testing.T, dir string) *Local {
	t.Helper()
	l, err := OpenLocal(context.Background(), LocalOptions{FS: vfs.Default, Dir: dir, Files: 1, Unstaged: true})
	if err != nil {
		t.Fatal(err)
	}
	return skipUnlessDirect(t, dir, l)
}

func skipUnlessDirect(t *testing.T, dir string, l *Local) *Local {
	t.Helper()
	if l.writable[0].dfd < 0 {
		l.Close()
		t.Skipf("file system under %s refuses O_DIRECT", dir)
	}
	return l
}

func mustGet(t *testing.T, l *Local, p Pointer, want []byte) {
	t.Helper()
	got := make([]byte, p.Length)
	if err := l.ReadAt(context.Background(), p, 0, got); err != nil {
		t.Fatalf("ReadAt(%v): %v", p, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ReadAt(%v): wrong data", p)
	}
}

// TestDirectPuts: on a file system that does O_DIRECT, large puts go
// direct at 4 KiB-aligned offsets, small buffered puts fill the gaps
// between them, and everything reads back before and after a reopen; Free
// of a direct slice makes it unreadable.
func TestDirectPuts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openDirectOrSkip(t, dir)
	type put struct {
		p    Pointer
		data []byte
	}
	var puts []put
	for i, n := range []int{MaxSize, 100, MaxSize - 1, 5000, DefaultDirectMin, DefaultDirectMin - 1, 3, MaxSize} {
		d := directData(uint64(i), n)
		if i == 0 { // aligned and a multiple of 4 KiB
			d = getAlignedCopy(d)
		}
		p, err := l.Put(ctx, 0, d)
		if err != nil {
			t.Fatal(err)
		}
		if n >= DefaultDirectMin && p.Offset%directAlign != 0 {
			t.Errorf("direct put of %d bytes at unaligned offset %d", n, p.Offset)
		}
		puts = append(puts, put{p, d})
	}
	if got := l.Stats().DirectPuts; got != 4 {
		t.Errorf("DirectPuts = %d, want 4", got)
	}
	var ptrs []Pointer
	for _, p := range puts {
		mustGet(t, l, p.p, p.data)
		ptrs = append(ptrs, p.p)
	}
	if err := l.Sync(ctx, ptrs); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openDirectLocal(t, dir, 0)
	defer l.Close()
	for _, p := range puts {
		mustGet(t, l, p.p, p.data)
	}
	// Appends continue after the padded end; a later put reads back.
	d := directData(99, MaxSize)
	p, err := l.Put(ctx, 0, d)
	if err != nil {
		t.Fatal(err)
	}
	if last := puts[len(puts)-1].p; p.Offset < alignUp(last.End()) {
		t.Errorf("put after reopen at %d overlaps the last slice %v", p.Offset, last)
	}
	mustGet(t, l, p, d)
	if err := l.Free(ctx, puts[2].p.Backing, puts[2].p.Offset, uint64(puts[2].p.Length)); err != nil {
		t.Fatal(err)
	}
	if err := l.ReadAt(ctx, puts[2].p, 0, make([]byte, puts[2].p.Length)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read of a freed direct slice = %v, want ErrCorrupt", err)
	}
	mustGet(t, l, puts[1].p, puts[1].data)
	mustGet(t, l, puts[3].p, puts[3].data)
}

func getAlignedCopy(d []byte) []byte {
	b := newAligned()
	return append((*b)[:0], d...)
}

// TestDirectRefusedAtOpen: a file system that refuses O_DIRECT at open
// gets buffered, adjacent puts.
func TestDirectRefusedAtOpen(t *testing.T) {
	old := openDirect
	openDirect = func(string) (int, error) { return -1, unix.EINVAL }
	defer func() { openDirect = old }()
	l := openDirectLocal(t, t.TempDir(), 0)
	defer l.Close()
	a, b := directData(1, 100), directData(2, MaxSize)
	pa, err := l.Put(context.Background(), 0, a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := l.Put(context.Background(), 0, b)
	if err != nil {
		t.Fatal(err)
	}
	if pb.Offset != pa.End() || l.Stats().DirectPuts != 0 {
		t.Errorf("puts %v %v (direct %d), want adjacent buffered puts", pa, pb, l.Stats().DirectPuts)
	}
	mustGet(t, l, pa, a)
	mustGet(t, l, pb, b)
}

// TestDirectRefusedAtWrite: a direct write refused with EINVAL (a file
// system that accepts O_DIRECT opens but not this alignment) falls back to
// a buffered write, and the file stays buffered.
func TestDirectRefusedAtWrite(t *testing.T) {
	dir := t.TempDir()
	l := openDirectOrSkip(t, dir)
	defer l.Close()
	old := pwriteDirect
	calls := 0
	pwriteDirect = func(int, []byte, int64) (int, error) { calls++; return -1, unix.EINVAL }
	defer func() { pwriteDirect = old }()
	a, b, c := directData(1, 100), directData(2, MaxSize), directData(3, MaxSize)
	var ps []Pointer
	for _, d := range [][]byte{a, b, c} {
		p, err := l.Put(context.Background(), 0, d)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if calls != 1 || !l.writable[0].directOff.Load() || l.Stats().DirectPuts != 0 {
		t.Errorf("direct write calls %d, directOff %v, DirectPuts %d; want one refused call, then buffered", calls, l.writable[0].directOff.Load(), l.Stats().DirectPuts)
	}
	// The refused write's reserved range is garbage; later puts are
	// buffered and adjacent.
	if ps[1].Offset < ps[0].End() || ps[2].Offset != ps[1].End() {
		t.Errorf("puts %v: want the 2nd after the 1st, the 3rd adjacent to the 2nd", ps)
	}
	for i, d := range [][]byte{a, b, c} {
		mustGet(t, l, ps[i], d)
	}
}

// TestDirectWriteFails: the first direct write to a file (the probe, run
// before Put returns) failing with EIO or short fails the put, consumes
// its range and leaves the store usable.
func TestDirectWriteFails(t *testing.T) {
	dir := t.TempDir()
	l := openDirectOrSkip(t, dir)
	defer l.Close()
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	for _, fail := range []func(fd int, buf []byte, off int64) (int, error){
		func(int, []byte, int64) (int, error) { return -1, unix.EIO },
		func(fd int, buf []byte, off int64) (int, error) { return old(fd, buf[:directAlign], off) }, // then 0 bytes
	} {
		n := 0
		pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
			n++
			if n == 1 {
				return fail(fd, buf, off)
			}
			return 0, nil
		}
		before := l.writable[0].size.Load()
		if _, err := l.Put(context.Background(), 0, directData(1, MaxSize)); err == nil {
			t.Fatal("put with a failing direct write succeeded")
		}
		if l.writable[0].size.Load() <= before {
			t.Error("failed direct put did not consume its range")
		}
		pwriteDirect = old
		d := directData(2, MaxSize)
		p, err := l.Put(context.Background(), 0, d)
		if err != nil {
			t.Fatal(err)
		}
		if p.Offset < before+MaxSize {
			t.Errorf("put after a failed one at %d reuses its range (from %d)", p.Offset, before)
		}
		mustGet(t, l, p, d)
		if l.writable[0].directOK.Load() != true {
			t.Error("a successful direct write did not end the probe")
		}
		l.writable[0].directOK.Store(false) // probe again in the next case
	}
}

// TestDirectAsyncWriteFails: after the probe, direct writes are
// asynchronous; one failing with EIO makes Sync of its slice (and of
// anything later in the file) fail for good, while what was synced before
// stays readable, and the file takes no more puts. One refused with
// EINVAL is redone buffered at the same offset.
func TestDirectAsyncWriteFails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openDirectOrSkip(t, dir)
	defer l.Close()
	a := directData(1, MaxSize)
	pa, err := l.Put(ctx, 0, a) // the probe
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx, []Pointer{pa}); err != nil {
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()

	// Refused: redone buffered.
	pwriteDirect = func(int, []byte, int64) (int, error) { return -1, unix.EINVAL }
	b := directData(2, MaxSize-5)
	pb, err := l.Put(ctx, 0, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx, []Pointer{pb}); err != nil { // waits for the write
		t.Fatalf("Sync after a refused async write redone buffered: %v", err)
	}
	mustGet(t, l, pb, b)
	if !l.writable[0].directOff.Load() {
		t.Error("refused async write did not turn direct writes off")
	}

	// Failed (e.g. ENOSPC for a moment): the put's Sync and WaitWritten
	// fail, always; the file stays in service, and SyncAll (datadir's
	// ordered-log hook: before every metadata log write) keeps working.
	l.writable[0].directOff.Store(false)
	pwriteDirect = func(int, []byte, int64) (int, error) { return -1, unix.ENOSPC }
	pc, err := l.Put(ctx, 0, directData(3, MaxSize))
	if err != nil {
		t.Fatalf("asynchronous direct put returned the write's error: %v", err)
	}
	if err := l.WaitWritten(ctx, []Pointer{pc}); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("WaitWritten of a slice whose direct write failed = %v, want ENOSPC", err)
	}
	pwriteDirect = old // after WaitWritten, which waited for the write
	for range 2 {
		if err := l.Sync(ctx, []Pointer{pc}); !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("Sync of a slice whose direct write failed = %v, want ENOSPC", err)
		}
	}
	if err := l.Sync(ctx, []Pointer{pa, pb}); err != nil {
		t.Errorf("Sync of slices synced before the failure = %v", err)
	}
	if err := l.WaitWritten(ctx, []Pointer{pa, pb}); err != nil {
		t.Errorf("WaitWritten of slices written before the failure = %v", err)
	}
	mustGet(t, l, pa, a)
	d := directData(4, MaxSize)
	pd, err := l.Put(ctx, 0, d)
	if err != nil {
		t.Fatalf("put after a failed direct write: %v", err)
	}
	if err := l.SyncAll(ctx); err != nil {
		t.Fatalf("SyncAll after a failed direct write: %v", err)
	}
	if err := l.Sync(ctx, []Pointer{pd}); err != nil {
		t.Fatalf("Sync of a put after a failed direct write: %v", err)
	}
	mustGet(t, l, pd, d)
}

// TestDirectFailedWritesBounded: past maxFailedWrites remembered failures
// a file's sync fails for good, as after a failed fdatasync.
func TestDirectFailedWritesBounded(t *testing.T) {
	ctx := context.Background()
	l := openDirectOrSkip(t, t.TempDir())
	defer l.Close()
	if _, err := l.Put(ctx, 0, directData(1, MaxSize)); err != nil { // the probe
		t.Fatal(err)
	}
	b := l.writable[0]
	b.dmu.Lock()
	for range maxFailedWrites {
		b.dmu.failed = append(b.dmu.failed, failedWrite{off: 1 << 62, end: 1<<62 + 1, err: unix.EIO})
	}
	b.dmu.Unlock()
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	pwriteDirect = func(int, []byte, int64) (int, error) { return -1, unix.ENOSPC }
	pc, err := l.Put(ctx, 0, directData(2, MaxSize))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx, []Pointer{pc}); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Sync = %v, want ENOSPC", err)
	}
	pwriteDirect = old
	if err := l.SyncAll(ctx); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("SyncAll with a forgotten failed write = %v, want its ENOSPC (sticky)", err)
	}
}

// TestDirectAsyncReadWaits: ReadAt of a slice whose asynchronous direct
// write is still running waits for it (Put returned before the data is on
// disk); Close waits for writes in flight.
func TestDirectAsyncReadWaits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openDirectOrSkip(t, dir)
	if _, err := l.Put(ctx, 0, directData(1, MaxSize)); err != nil { // the probe
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	release := make(chan struct{})
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		<-release
		return old(fd, buf, off)
	}
	d, e := directData(2, MaxSize), directData(3, MaxSize)
	p, err := l.Put(ctx, 0, d)
	if err != nil {
		t.Fatal(err)
	}
	q, err := l.Put(ctx, 0, e)
	if err != nil {
		t.Fatal(err)
	}
	readc := make(chan error, 1)
	go func() {
		got := make([]byte, p.Length)
		err := l.ReadAt(ctx, p, 0, got)
		if err == nil && !bytes.Equal(got, d) {
			err = errors.New("wrong data")
		}
		readc <- err
	}()
	select {
	case err := <-readc:
		t.Fatalf("ReadAt of a slice being written returned (%v) before the write", err)
	case <-time.After(100 * time.Millisecond):
	}
	closec := make(chan error, 1)
	go func() {
		if err := <-readc; err != nil {
			closec <- err
			return
		}
		closec <- l.Close()
	}()
	close(release)
	if err := <-closec; err != nil {
		t.Fatal(err)
	}
	l = openDirectLocal(t, dir, 0)
	defer l.Close()
	mustGet(t, l, p, d)
	mustGet(t, l, q, e)
}

// TestDirectTmpfs: on tmpfs (O_DIRECT refused or emulated, depending on
// the kernel) puts of every size work.
func TestDirectTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "slice-direct-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	l := openDirectLocal(t, filepath.Join(dir, "s"), 0)
	defer l.Close()
	t.Logf("tmpfs: O_DIRECT descriptor %v", l.writable[0].dfd >= 0)
	for i, n := range []int{MaxSize, 1, MaxSize - 1, DefaultDirectMin} {
		d := directData(uint64(i), n)
		p, err := l.Put(context.Background(), 0, d)
		if err != nil {
			t.Fatal(err)
		}
		mustGet(t, l, p, d)
		if err := l.Sync(context.Background(), []Pointer{p}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDirectOnlyOnOSFS: any FS other than vfs.Default (in-memory,
// fault-injecting wrappers whose Fd passes through) never goes direct.
func TestDirectOnlyOnOSFS(t *testing.T) {
	l, err := OpenLocal(context.Background(), LocalOptions{FS: vfs.NewMem(), Dir: "s", DirectMin: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Put(context.Background(), 0, directData(1, MaxSize)); err != nil {
		t.Fatal(err)
	}
	if l.directMin > 0 || l.Stats().DirectPuts != 0 {
		t.Errorf("MemFS store: directMin %d, DirectPuts %d", l.directMin, l.Stats().DirectPuts)
	}
	l2 := openDirectLocal(t, t.TempDir(), -1)
	defer l2.Close()
	if l2.writable[0].dfd >= 0 {
		t.Error("DirectMin -1 opened an O_DIRECT descriptor")
	}
}

// TestDirectSyncWaitsForWriteBelow: direct writes run outside the file's
// mutex, so a later (buffered) put can land above one still in flight. A
// Sync of the later put must not report durable before the direct write
// below it has landed (its fdatasync would not cover those bytes).
func TestDirectSyncWaitsForWriteBelow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openDirectOrSkip(t, dir)
	defer l.Close()
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // a failing test must not hang in Close
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		close(started)
		<-release
		return old(fd, buf, off)
	}
	big := directData(1, MaxSize)
	type res struct {
		p   Pointer
		err error
	}
	bigc := make(chan res, 1)
	go func() { p, err := l.Put(ctx, 0, big); bigc <- res{p, err} }()
	<-started
	pwriteDirect = old // only the first write blocks
	small := directData(2, 100)
	ps, err := l.Put(ctx, 0, small)
	if err != nil {
		t.Fatal(err)
	}
	syncc := make(chan error, 1)
	go func() { syncc <- l.Sync(ctx, []Pointer{ps}) }()
	select {
	case err := <-syncc:
		t.Fatalf("Sync of a put above a direct write in flight returned (%v) before that write", err)
	case <-time.After(100 * time.Millisecond):
	}
	b := l.writable[0]
	b.smu.Lock()
	synced := b.smu.synced
	b.smu.Unlock()
	if synced > ps.Offset-MaxSize {
		t.Errorf("synced %d covers the direct write in flight below %d", synced, ps.Offset)
	}
	unblock()
	r := <-bigc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := <-syncc; err != nil {
		t.Fatal(err)
	}
	if r.p.End() > ps.Offset {
		t.Errorf("direct put %v overlaps the later put %v", r.p, ps)
	}
	mustGet(t, l, r.p, big)
	mustGet(t, l, ps, small)
}

// TestDirectConcurrent: writers mixing direct and buffered puts on few
// files (so direct writes to one file overlap), each syncing and reading
// back its puts, then everything reads back after a reopen. Run with
// -race in CI.
func TestDirectConcurrent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := OpenLocal(ctx, LocalOptions{FS: vfs.Default, Dir: dir, Files: 2, DirectMin: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const writers, per = 4, 8
	type put struct {
		p    Pointer
		data []byte
	}
	out := make([][]put, writers)
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range per {
				n := 1 + r.IntN(MaxSize)
				if r.IntN(3) == 0 {
					n = 1 + r.IntN(64<<10)
				}
				d := directData(seed^uint64(w*1000+i), n)
				p, err := l.Put(ctx, uint64(r.IntN(2)), d)
				if err != nil {
					errc <- err
					return
				}
				if err := l.Sync(ctx, []Pointer{p}); err != nil {
					errc <- err
					return
				}
				got := make([]byte, n)
				if err := l.ReadAt(ctx, p, 0, got); err != nil || !bytes.Equal(got, d) {
					errc <- fmt.Errorf("writer %d put %d %v: read back %v (equal %v)", w, i, p, err, bytes.Equal(got, d))
					return
				}
				out[w] = append(out[w], put{p, d})
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if l.Stats().DirectPuts == 0 && l.writable[0].dfd >= 0 {
		t.Error("no direct puts")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = OpenLocal(ctx, LocalOptions{FS: vfs.Default, Dir: dir, Files: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, ws := range out {
		for _, p := range ws {
			mustGet(t, l, p.p, p.data)
		}
	}
}

// TestDirectAsyncFreeWaits: Free of a slice whose asynchronous direct write
// is still running waits for it, so the write cannot land after the hole
// and bring the freed bytes back; a read of a slice whose asynchronous
// write failed is an error, never its stale bytes.
func TestDirectAsyncFreeWaits(t *testing.T) {
	ctx := context.Background()
	l := openDirectOrSkip(t, t.TempDir())
	defer l.Close()
	if _, err := l.Put(ctx, 0, directData(1, MaxSize)); err != nil { // the probe
		t.Fatal(err)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // before Close, which waits for the write
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		close(started)
		<-release
		return old(fd, buf, off)
	}
	p, err := l.Put(ctx, 0, directData(2, MaxSize))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	freed := make(chan error, 1)
	go func() { freed <- l.Free(ctx, p.Backing, p.Offset, uint64(p.Length)) }()
	select {
	case err := <-freed:
		t.Fatalf("Free of a slice whose direct write is in flight returned (%v) before the write", err)
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	if err := <-freed; err != nil {
		t.Fatal(err)
	}
	if err := l.ReadAt(ctx, p, 0, make([]byte, p.Length)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read of a slice freed while its direct write ran = %v, want ErrCorrupt (the write landed after the hole)", err)
	}

	pwriteDirect = func(int, []byte, int64) (int, error) { return -1, unix.EIO }
	q, err := l.Put(ctx, 0, directData(3, MaxSize))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReadAt(ctx, q, 0, make([]byte, q.Length)); err == nil {
		t.Error("read of a slice whose direct write failed succeeded")
	}
	pwriteDirect = old
}

// TestDirectInFlightStat: LocalStats.DirectInFlight counts the
// asynchronous direct writes that have not returned, and drops to 0 once
// they did.
func TestDirectInFlightStat(t *testing.T) {
	ctx := context.Background()
	l := openDirectOrSkip(t, t.TempDir())
	defer l.Close()
	if _, err := l.Put(ctx, 0, directData(1, MaxSize)); err != nil { // the probe
		t.Fatal(err)
	}
	if st := l.Stats(); st.DirectPuts != 1 || st.DirectInFlight != 0 {
		t.Fatalf("after the probe: %d direct puts, %d in flight; want 1, 0", st.DirectPuts, st.DirectInFlight)
	}
	old := pwriteDirect
	defer func() { pwriteDirect = old }()
	release := make(chan struct{})
	pwriteDirect = func(fd int, buf []byte, off int64) (int, error) {
		<-release
		return old(fd, buf, off)
	}
	var ptrs []Pointer
	for i := range 2 {
		p, err := l.Put(ctx, 0, directData(uint64(2+i), MaxSize))
		if err != nil {
			close(release)
			t.Fatal(err)
		}
		ptrs = append(ptrs, p)
	}
	st := l.Stats()
	close(release)
	if st.DirectPuts != 3 || st.DirectInFlight != 2 {
		t.Fatalf("with two writes blocked: %d direct puts, %d in flight; want 3, 2", st.DirectPuts, st.DirectInFlight)
	}
	if err := l.Sync(ctx, ptrs); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.DirectInFlight != 0 {
		t.Fatalf("after Sync: %d in flight, want 0", st.DirectInFlight)
	}
}
