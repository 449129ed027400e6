package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/fs"
)

// The power-cut model of covered puts (docs/engine.md "Covered puts"): a
// device with a volatile write cache under a file system.
//
//   - Every write completes when it returns (the OS may write back a
//     buffered page at once; a direct write — slice.LocalOptions.DirectVFS
//     stands in for O_DIRECT here — has completed) and stays volatile
//     until a flush.
//   - A flush (any file's Sync, SyncData or SyncTo, a directory's Sync)
//     makes every write completed before it durable, in every file.
//   - Namespace changes (create, rename, remove, link, mkdir) are durable
//     at once (a legal file system; pebble orders its own).
//   - Power is cut during flush number cutAt: of the writes since the
//     previous flush, an arbitrary subset becomes durable — for slice
//     files any subset, for the metadata files a prefix of each file's
//     writes (the device may reorder across files; pebble's own tolerance
//     of reordering inside its log is not what this tests). The
//     "adversarial" choice keeps every metadata write and drops every
//     slice write: a covered commit's log record without its data.
//
// After the cut nothing more becomes durable; the workload stops, and the
// durable image is opened as a data directory: every commit acknowledged
// before the cut must be there, every other file must be absent or whole,
// and fsck must pass.

type cutNode struct{ durable []byte }

type cutWrite struct {
	n    *cutNode
	off  int64
	data []byte
	name string
}

type cutFS struct {
	vfs.FS // the live view (a MemFS)

	mu          sync.Mutex
	names       map[string]*cutNode
	dirs        map[string]bool
	pending     []cutWrite
	flushes     int
	cutAt       int
	adversarial bool
	cut         bool
	rng         *rand.Rand
	// slowSlices: a slice file's write returns only once a flush started
	// after it was issued, or a little after a metadata write was (or
	// after slowWait): it is in flight while the log is written, and, if
	// the log is flushed before it returned, during that flush, which
	// then does not cover it. overlapped counts the writes that saw a
	// metadata write; metaWrites counts those.
	slowSlices bool
	overlapped int
	metaWrites int
}

// slowWait bounds how long a slow slice write waits (a sync that waits
// for the write before it writes the log would otherwise never come).
const slowWait = 3 * time.Millisecond

// slowWrite delays a write to name as slowSlices says.
func (c *cutFS) slowWrite(name string) {
	if !c.slowSlices || !strings.Contains(name, "/slices/") {
		return
	}
	c.mu.Lock()
	f0, m0 := c.flushes, c.metaWrites
	c.mu.Unlock()
	var metaSeen time.Time
	for start := time.Now(); time.Since(start) < slowWait; {
		c.mu.Lock()
		flushed, cut, meta := c.flushes > f0, c.cut, c.metaWrites > m0
		if meta && metaSeen.IsZero() {
			c.overlapped++
			metaSeen = time.Now()
		}
		c.mu.Unlock()
		if flushed || cut || !metaSeen.IsZero() && time.Since(metaSeen) > 200*time.Microsecond {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func newCutFS(seed uint64, cutAt int, adversarial bool) *cutFS {
	return &cutFS{FS: vfs.NewMem(), names: map[string]*cutNode{}, dirs: map[string]bool{},
		cutAt: cutAt, adversarial: adversarial, rng: rand.New(rand.NewPCG(seed, 3))}
}

func (c *cutFS) isCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

func (c *cutFS) node(name string) *cutNode {
	n := c.names[name]
	if n == nil {
		n = &cutNode{}
		c.names[name] = n
	}
	return n
}

func (c *cutFS) write(n *cutNode, name string, p []byte, off int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return
	}
	c.pending = append(c.pending, cutWrite{n: n, off: off, data: bytes.Clone(p), name: name})
	if !strings.Contains(name, "/slices/") {
		c.metaWrites++
	}
}

func apply(w cutWrite) {
	if end := w.off + int64(len(w.data)); end > int64(len(w.n.durable)) {
		w.n.durable = append(w.n.durable, make([]byte, end-int64(len(w.n.durable)))...)
	}
	copy(w.n.durable[w.off:], w.data)
}

// flush is a device flush; the cut happens during flush cutAt.
func (c *cutFS) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return
	}
	c.flushes++
	if c.flushes != c.cutAt {
		for _, w := range c.pending {
			apply(w)
		}
		c.pending = nil
		return
	}
	c.cut = true
	// A prefix per metadata file, any subset of slice writes.
	keep := map[*cutNode]int{} // metadata: writes kept per file
	total := map[*cutNode]int{}
	for _, w := range c.pending {
		total[w.n]++
	}
	for n, t := range total {
		keep[n] = c.rng.IntN(t + 1)
		if c.adversarial {
			keep[n] = t
		}
	}
	seen := map[*cutNode]int{}
	for _, w := range c.pending {
		if strings.Contains(w.name, "/slices/") {
			if !c.adversarial && c.rng.IntN(2) == 0 {
				apply(w)
			}
			continue
		}
		if seen[w.n] < keep[w.n] {
			apply(w)
		}
		seen[w.n]++
	}
	c.pending = nil
}

// image returns the durable state as a new MemFS.
func (c *cutFS) image(t *testing.T) vfs.FS {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := vfs.NewMem()
	dirs := make([]string, 0, len(c.dirs))
	for d := range c.dirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := m.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range c.names {
		if err := m.MkdirAll(m.PathDir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := m.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Clone(n.durable)); err != nil {
			t.Fatal(err)
		}
		f.Sync()
		f.Close()
	}
	return m
}

func (c *cutFS) wrap(name string, f vfs.File, err error, truncate bool) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	var n *cutNode
	switch {
	case c.cut:
		n = &cutNode{} // nothing done after the cut is durable
	case truncate:
		n = c.node(name)
		n.durable = nil // a create is durable at once, empty
	default:
		n = c.node(name)
	}
	c.mu.Unlock()
	return &cutFile{File: f, fs: c, n: n, name: name}, nil
}

func (c *cutFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	if err == nil {
		c.mu.Lock()
		if !c.cut {
			c.names[name] = &cutNode{}
		}
		c.mu.Unlock()
	}
	return c.wrap(name, f, err, true)
}

func (c *cutFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.OpenReadWrite(name, cat, opts...)
	return c.wrap(name, f, err, false)
}

func (c *cutFS) OpenDir(name string) (vfs.File, error) {
	f, err := c.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &cutFile{File: f, fs: c, name: name}, nil
}

func (c *cutFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if err := c.Rename(oldname, newname); err != nil {
		return nil, err
	}
	f, err := c.FS.OpenReadWrite(newname, cat)
	return c.wrap(newname, f, err, false)
}

func (c *cutFS) Rename(oldname, newname string) error {
	if err := c.FS.Rename(oldname, newname); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cut {
		c.names[newname] = c.node(oldname)
		delete(c.names, oldname)
	}
	return nil
}

func (c *cutFS) Link(oldname, newname string) error {
	if err := c.FS.Link(oldname, newname); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cut {
		c.names[newname] = c.node(oldname)
	}
	return nil
}

func (c *cutFS) Remove(name string) error {
	if err := c.FS.Remove(name); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cut {
		delete(c.names, name)
		delete(c.dirs, name)
	}
	return nil
}

func (c *cutFS) RemoveAll(name string) error {
	if err := c.FS.RemoveAll(name); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cut {
		for n := range c.names {
			if n == name || strings.HasPrefix(n, name+"/") {
				delete(c.names, n)
			}
		}
	}
	return nil
}

func (c *cutFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := c.FS.MkdirAll(dir, perm); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cut {
		c.dirs[dir] = true
	}
	return nil
}

type cutFile struct {
	vfs.File
	fs   *cutFS
	n    *cutNode // nil: a directory
	name string
	pos  int64
}

func (f *cutFile) Write(p []byte) (int, error) {
	f.fs.slowWrite(f.name)
	f.fs.write(f.n, f.name, p, f.pos)
	n, err := f.File.Write(p)
	f.pos += int64(n)
	return n, err
}

func (f *cutFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.slowWrite(f.name)
	f.fs.write(f.n, f.name, p, off)
	return f.File.WriteAt(p, off)
}

func (f *cutFile) Sync() error {
	f.fs.flush()
	return f.File.Sync()
}

func (f *cutFile) SyncData() error {
	f.fs.flush()
	return f.File.SyncData()
}

func (f *cutFile) SyncTo(length int64) (bool, error) {
	f.fs.flush()
	return f.File.SyncTo(length)
}

// powerCutRounds is the number of rounds of TestPowerCutCovered
// (TXNFS_POWERCUT_ROUNDS overrides).
// powerCutSeeds returns the first round's seed and the number of rounds:
// TXNFS_POWERCUT_SEED replays one round, else the clock seeds
// powerCutRounds rounds.
func powerCutSeeds(t *testing.T) (uint64, int) {
	if s := os.Getenv("TXNFS_POWERCUT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v, 1
	}
	return uint64(time.Now().UnixNano()), powerCutRounds()
}

func powerCutRounds() int {
	if s := os.Getenv("TXNFS_POWERCUT_ROUNDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 12
}

// TestPowerCutCovered runs covered commits (1 MiB files into reused space,
// durable and NoSync + Sync, with removals and collections) on the model
// device and cuts the power during a random flush of that phase, half the
// rounds adversarially (every metadata write kept, every slice write
// dropped). Seeds are printed; TXNFS_POWERCUT_SEED replays one round.
func TestPowerCutCovered(t *testing.T) {
	base, rounds := powerCutSeeds(t)
	cutCommits := 0
	for r := 0; r < rounds; r++ {
		seed := base + uint64(r)
		t.Logf("round %d: seed %d (TXNFS_POWERCUT_SEED=%d replays it)", r, seed, seed)
		if cut, _ := powerCutRound(t, seed, r%2 == 0, false); cut {
			cutCommits++
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d of %d rounds cut commits from the log at open", cutCommits, rounds)
}

// TestPowerCutCoveredSlowWrites is TestPowerCutCovered with slice writes
// that stay in flight while the log is written (cutFS.slowSlices):
// commits pledge their covered puts (slice.Local.Pledge) and the log is
// written while they run, so the flush that acknowledges a commit must
// wait until its writes returned (orderedFile.syncLog). Fails if the log
// is flushed without that wait: an acknowledged commit's bytes are then
// lost in the cut, and recovery cuts the commit.
func TestPowerCutCoveredSlowWrites(t *testing.T) {
	base, rounds := powerCutSeeds(t)
	// Whether a slice write is still running when the log is written
	// depends on scheduling: under load (CI runs packages in parallel)
	// a whole run of rounds may see none, so rounds go on (up to three
	// times as many) until one did.
	overlapped := 0
	for r := 0; r < rounds || (overlapped == 0 && r < 3*rounds); r++ {
		seed := base + uint64(r)
		t.Logf("round %d: seed %d (TXNFS_POWERCUT_SEED=%d replays it)", r, seed, seed)
		_, n := powerCutRound(t, seed, r%2 == 0, true)
		overlapped += n
		if t.Failed() {
			return
		}
	}
	if overlapped == 0 {
		t.Errorf("no slice write was in flight while the log was written")
	}
	t.Logf("%d slice writes were in flight while the log was written", overlapped)
}

// powerCutRound runs one round, with slow slice writes if slow is set
// (cutFS.slowSlices); it reports whether Open cut the log and how many
// slice writes were in flight during a flush.
func powerCutRound(t *testing.T, seed uint64, adversarial, slow bool) (bool, int) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 11))
	// The cut comes within the first flushes of the commit phase (each
	// commit makes one or two; the phase's count varies with pebble's
	// background work).
	model := newCutFS(seed, 1<<30, adversarial)
	logs := &logBuf{}
	opts := Options{Dir: "/d", FS: model, CacheBytes: -1, Covered: true, SliceReuseMin: 1, directVFS: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	// TXNFS_POWERCUT_LOGBUF sets Options.LogBufferBytes (a tiny one hands
	// NoSync commits' log bytes to the OS early, after a SyncAll that
	// skips covered puts); TXNFS_POWERCUT_NOSYNC=1 adds NoSync commits
	// left unsynced (never acknowledged) to the mix.
	if s := os.Getenv("TXNFS_POWERCUT_LOGBUF"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("TXNFS_POWERCUT_LOGBUF=%q: %v", s, err)
		}
		opts.LogBufferBytes = n
	}
	cases := 4
	if os.Getenv("TXNFS_POWERCUT_NOSYNC") == "1" {
		cases = 5
	}
	e, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	data := func() []byte {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < len(b); j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		return b
	}
	write := func(name string, b []byte, noSync bool) error {
		return e.FS.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: noSync}, func(tx *fs.Txn) error {
			a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644, Exclusive: true})
			if err != nil {
				return err
			}
			return tx.Write(ctx, a.Ino, 0, b)
		})
	}
	remove := func(name string) error {
		return e.FS.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return tx.Unlink(ctx, fs.RootIno, name) })
	}
	// The reuse pool.
	for i := 0; i < 6; i++ {
		if err := write(fmt.Sprintf("pool%d", i), data(), false); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 6; i++ {
		if err := remove(fmt.Sprintf("pool%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := e.FS.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	model.mu.Lock()
	model.cutAt = model.flushes + 1 + r.IntN(12)
	model.slowSlices = slow
	model.mu.Unlock()
	st0 := e.local.Stats()

	acked := map[string][]byte{}   // acknowledged before the cut
	written := map[string][]byte{} // every file a commit tried to create
	var live []string
	for i := 0; i < 40 && !model.isCut(); i++ {
		name := fmt.Sprintf("f%d", i)
		b := data()
		if r.IntN(3) > 0 {
			b = b[:1<<20-r.IntN(3)*4096-r.IntN(2)*100]
		}
		written[name] = b
		var err error
		unacked := false
		switch r.IntN(cases) {
		case 0: // NoSync, then Sync
			err = write(name, b, true)
			if err == nil {
				err = e.FS.Sync(ctx)
			}
		case 4: // NoSync, never synced: not acknowledged
			err = write(name, b, true)
			unacked = true
		default:
			err = write(name, b, false)
		}
		if os.Getenv("CUTDEBUG") != "" {
			t.Logf("%s: err %v cut %v flushes %d cutAt %d pending %d", name, err, model.isCut(), model.flushes, model.cutAt, len(model.pending))
		}
		if err == nil && !model.isCut() {
			if !unacked {
				acked[name] = b
			}
			live = append(live, name)
		}
		if len(live) > 3 && r.IntN(3) == 0 {
			k := r.IntN(len(live))
			// Removed or not (a removal not acknowledged may be
			// durable): the file must be absent or whole.
			delete(acked, live[k])
			remove(live[k])
			live = slices.Delete(live, k, k+1)
		}
		if r.IntN(6) == 0 {
			e.FS.CollectGarbage(ctx)
		}
	}
	if !model.isCut() {
		t.Logf("no cut within the phase (%d flushes)", model.flushes)
	}
	if st := e.local.Stats(); st.ReusePuts == st0.ReusePuts || st.DirectPuts == st0.DirectPuts {
		t.Errorf("seed %d: no direct puts into reused space (covered puts) before the cut: %+v", seed, st)
	}
	e.Close()

	img := model.image(t)
	logs2 := &logBuf{}
	e2, err := Open(ctx, Options{Dir: "/d", FS: img, CacheBytes: -1, Logger: slog.New(slog.NewTextHandler(logs2, nil))})
	if err != nil {
		t.Fatalf("open after the cut: %v\n%s", err, logs2)
	}
	defer e2.Close()
	read := func(name string) ([]byte, error) {
		var out []byte
		err := e2.FS.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, err := tx.Lookup(ctx, fs.RootIno, name)
			if err != nil {
				return err
			}
			out = make([]byte, a.Size)
			n, _, err := tx.Read(ctx, a.Ino, 0, out)
			out = out[:n]
			return err
		})
		return out, err
	}
	for name, want := range written {
		got, err := read(name)
		switch {
		case acked[name] != nil && (err != nil || !bytes.Equal(got, want)):
			t.Errorf("seed %d: %s acknowledged, after the cut: err %v, equal %v\n%s", seed, name, err, bytes.Equal(got, want), logs2)
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			t.Errorf("seed %d: %s (not acknowledged or removed): %v\n%s", seed, name, err, logs2)
		case !bytes.Equal(got, want):
			t.Errorf("seed %d: %s (not acknowledged or removed) reads other bytes", seed, name)
		}
	}
	rep, err := e2.FS.Check(ctx)
	if err != nil || !rep.OK() {
		t.Errorf("seed %d: fsck after the cut: %v %v", seed, err, rep.Problems)
	}
	model.mu.Lock()
	overlapped := model.overlapped
	model.mu.Unlock()
	return strings.Contains(logs2.String(), "cut from the metadata log"), overlapped
}
