package datadir

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Tests of covered puts (Options.Covered; docs/engine.md "Covered puts").
// They run on the real disk (covered puts are O_DIRECT writes).

const coveredSize = 1 << 20

// logBuf is a slog handler target safe for concurrent writes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type coveredEnv struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	logs *logBuf
	e    *Engine
	r    *rand.Rand
}

func newCoveredEnv(t *testing.T) *coveredEnv {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	c := &coveredEnv{t: t, ctx: context.Background(), dir: t.TempDir(), logs: &logBuf{}, r: rand.New(rand.NewPCG(seed, 7))}
	c.open()
	return c
}

func (c *coveredEnv) open() {
	c.t.Helper()
	e, err := Open(c.ctx, Options{Dir: c.dir, CacheBytes: -1, Covered: true, SliceReuseMin: 1,
		Logger: slog.New(slog.NewTextHandler(c.logs, nil))})
	if err != nil {
		c.t.Fatalf("open: %v\nlogs:\n%s", err, c.logs)
	}
	c.e = e
}

func (c *coveredEnv) close() {
	c.t.Helper()
	if err := c.e.Close(); err != nil {
		c.t.Fatal(err)
	}
	c.e = nil
}

func (c *coveredEnv) data() []byte {
	b := make([]byte, coveredSize)
	for i := 0; i < len(b); i += 8 {
		v := c.r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// write creates name with data in one durable commit.
func (c *coveredEnv) write(name string, data []byte) {
	c.t.Helper()
	c.writeOpts(name, data, false)
}

// writeOpts creates name with data in one commit, NoSync if noSync.
func (c *coveredEnv) writeOpts(name string, data []byte, noSync bool) {
	c.t.Helper()
	err := c.e.FS.DoOpts(c.ctx, fs.RootCred, fs.TxnOptions{NoSync: noSync}, func(tx *fs.Txn) error {
		a, _, err := tx.Create(c.ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644, Exclusive: true})
		if err != nil {
			return err
		}
		return tx.Write(c.ctx, a.Ino, 0, data)
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *coveredEnv) remove(name string) {
	c.t.Helper()
	err := c.e.FS.Do(c.ctx, fs.RootCred, func(tx *fs.Txn) error { return tx.Unlink(c.ctx, fs.RootIno, name) })
	if err != nil {
		c.t.Fatal(err)
	}
}

// read returns name's contents, or an error (fs.ErrNotExist if it is
// gone).
func (c *coveredEnv) read(name string) ([]byte, error) {
	var out []byte
	err := c.e.FS.View(c.ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, err := tx.Lookup(c.ctx, fs.RootIno, name)
		if err != nil {
			return err
		}
		out = make([]byte, a.Size)
		n, _, err := tx.Read(c.ctx, a.Ino, 0, out)
		out = out[:n]
		return err
	})
	return out, err
}

func (c *coveredEnv) gc() {
	c.t.Helper()
	if _, err := c.e.FS.CollectGarbage(c.ctx); err != nil {
		c.t.Fatal(err)
	}
}

// pool fills the reuse pool: n MiB written, removed, collected twice.
func (c *coveredEnv) pool(n int) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		c.write(fmt.Sprintf("pool%d", i), c.data())
	}
	for i := 0; i < n; i++ {
		c.remove(fmt.Sprintf("pool%d", i))
	}
	c.gc()
	c.gc()
}

// descriptors returns the covered-put descriptors in the store.
func (c *coveredEnv) descriptors() map[string][]slice.Pointer {
	c.t.Helper()
	tx, err := c.e.KV.Begin(c.ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		c.t.Fatal(err)
	}
	defer tx.Rollback()
	pairs, err := tx.Scan(c.ctx, meta.CoveredPrefix(), kv.PrefixEnd(meta.CoveredPrefix()), 0)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string][]slice.Pointer{}
	for _, p := range pairs {
		for v := p.Value; len(v) > 0; v = v[slice.PointerSize:] {
			ptr, err := slice.DecodePointer(v[:slice.PointerSize])
			if err != nil {
				c.t.Fatal(err)
			}
			out[string(p.Key)] = append(out[string(p.Key)], ptr)
		}
	}
	return out
}

// newDescriptor returns the one descriptor in now that is not in before.
func (c *coveredEnv) newDescriptor(before, now map[string][]slice.Pointer) []slice.Pointer {
	c.t.Helper()
	var got [][]slice.Pointer
	for k, v := range now {
		if _, ok := before[k]; !ok {
			got = append(got, v)
		}
	}
	if len(got) != 1 {
		c.t.Fatalf("want one new covered-put descriptor, got %d (puts %+v)", len(got), c.e.local.Stats())
	}
	return got[0]
}

// clobber overwrites the bytes of ptrs in their backing files (what a
// device that lost the unflushed writes leaves: here, other bytes).
func (c *coveredEnv) clobber(ptrs []slice.Pointer) {
	c.t.Helper()
	for _, p := range ptrs {
		f, err := os.OpenFile(filepath.Join(c.dir, "slices", slice.BackingName(p.Backing)), os.O_WRONLY, 0)
		if err != nil {
			c.t.Fatal(err)
		}
		junk := make([]byte, p.Length)
		for i := range junk {
			junk[i] = 0xa5
		}
		if _, err := f.WriteAt(junk, int64(p.Offset)); err != nil {
			c.t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// TestCoveredRecoverCutsUnflushedCommit: commits of 1 MiB files into
// reused space are covered puts (no slice fdatasync, one descriptor each):
// two durable, then three NoSync ones never synced (not acknowledged as
// durable; their records reach the log file at Close). The model of a
// power cut during the log flush that would have acknowledged them: the
// records reached the disk, the third commit's slice bytes did not. Open
// must cut that commit and the later ones and keep the two acknowledged
// ones, and the store must pass fsck. Without the recovery the third file
// reads corrupt.
func TestCoveredRecoverCutsUnflushedCommit(t *testing.T) {
	c := newCoveredEnv(t)
	c.pool(8)
	before := c.e.local.Stats()
	var files [][]byte
	var descs [][]slice.Pointer
	for i := 0; i < 5; i++ {
		d0 := c.descriptors()
		data := c.data()
		c.writeOpts(fmt.Sprintf("f%d", i), data, i >= 2)
		files = append(files, data)
		descs = append(descs, c.newDescriptor(d0, c.descriptors()))
	}
	st := c.e.local.Stats()
	t.Logf("puts %d (reused %d), fsyncs %d", st.Puts-before.Puts, st.ReusePuts-before.ReusePuts, st.Fsyncs-before.Fsyncs)
	if st.ReusePuts-before.ReusePuts < 5 {
		t.Fatalf("want the 5 commits' puts in reused space, got %d", st.ReusePuts-before.ReusePuts)
	}
	if st.Fsyncs != before.Fsyncs {
		t.Errorf("covered commits ran %d slice fdatasyncs, want 0", st.Fsyncs-before.Fsyncs)
	}
	c.close()
	cut := 2
	c.clobber(descs[cut])
	c.open()
	defer c.close()
	for i, want := range files {
		got, err := c.read(fmt.Sprintf("f%d", i))
		switch {
		case i < cut && (err != nil || !bytes.Equal(got, want)):
			t.Errorf("f%d (acknowledged before the cut commit): err %v, equal %v", i, err, bytes.Equal(got, want))
		case i >= cut && !errors.Is(err, fs.ErrNotExist):
			t.Errorf("f%d (the cut commit or later): want ErrNotExist, got err %v (%d bytes)", i, err, len(got))
		}
	}
	if !strings.Contains(c.logs.String(), "cut from the metadata log") {
		t.Errorf("the cut was not logged:\n%s", c.logs)
	}
	rep, err := c.e.FS.Check(c.ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("fsck after the cut: %v %v", err, rep.Problems)
	}
	// The store works on: new covered commits, reopen.
	c.write("after", files[0])
	c.close()
	c.open()
	if got, err := c.read("after"); err != nil || !bytes.Equal(got, files[0]) {
		t.Fatalf("a file written after the cut: err %v", err)
	}
}

// TestCoveredStaleDescriptorNotCut: a covered commit's file is removed and
// the collector recycles its space, which a later covered commit
// rewrites. The first commit's descriptor must not outlive the recycling
// (the collector deletes descriptors after its Sync, before it recycles):
// left over, it would name bytes that changed and Open would cut
// acknowledged commits.
func TestCoveredStaleDescriptorNotCut(t *testing.T) {
	c := newCoveredEnv(t)
	c.pool(4)
	var names []string
	for i := 0; i < 4; i++ {
		c.write(fmt.Sprintf("a%d", i), c.data())
	}
	if len(c.descriptors()) == 0 {
		t.Fatal("no covered-put descriptor written")
	}
	for i := 0; i < 4; i++ {
		c.remove(fmt.Sprintf("a%d", i))
	}
	c.gc()
	c.gc() // recycles the a* ranges
	if n := len(c.descriptors()); n != 0 {
		t.Errorf("%d descriptors left after the collector's Sync", n)
	}
	files := map[string][]byte{}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("b%d", i)
		files[name] = c.data()
		c.write(name, files[name])
		names = append(names, name)
	}
	c.close()
	c.open()
	defer c.close()
	for _, name := range names {
		if got, err := c.read(name); err != nil || !bytes.Equal(got, files[name]) {
			t.Errorf("%s: err %v, equal %v", name, err, bytes.Equal(got, files[name]))
		}
	}
	if strings.Contains(c.logs.String(), "cut from the metadata log") {
		t.Errorf("Open cut the log:\n%s", c.logs)
	}
}

// TestCoveredDamageNotCut: an acknowledged covered commit's slice bytes
// change on disk while its descriptor is still live (damage, not a power
// cut). Open must not cut the log — later acknowledged commits stay — and
// must open, logging the damage: live, because later commits recorded the
// acknowledgement watermark past it (meta.CoveredAckedKey); reopened,
// because a reopen flushed its log record to an sstable.
func TestCoveredDamageNotCut(t *testing.T) {
	for _, reopen := range []bool{false, true} {
		t.Run(fmt.Sprintf("reopen=%v", reopen), func(t *testing.T) {
			c := newCoveredEnv(t)
			c.pool(4)
			d0 := c.descriptors()
			c.write("damaged", c.data())
			desc := c.newDescriptor(d0, c.descriptors())
			if reopen {
				c.close()
				c.open()
			}
			files := map[string][]byte{}
			for i := 0; i < 3; i++ {
				name := fmt.Sprintf("later%d", i)
				files[name] = c.data()
				c.write(name, files[name])
			}
			c.close()
			c.clobber(desc)
			c.open()
			defer c.close()
			for name, want := range files {
				if got, err := c.read(name); err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s (acknowledged after the damaged commit): err %v, equal %v", name, err, bytes.Equal(got, want))
				}
			}
			if _, err := c.read("damaged"); err == nil {
				t.Errorf("the damaged file reads back whole")
			}
			logs := c.logs.String()
			if strings.Contains(logs, "cut from the metadata log") || !strings.Contains(logs, "damage, not an unfinished commit") {
				t.Errorf("want the damage logged and no cut:\n%s", logs)
			}
		})
	}
}

// TestCoveredWatermarkAfterClockStepBack: descriptor sequences start at
// the clock when the store opens, and the acknowledgement watermark a
// commit recorded stays in the store after the collector dropped every
// descriptor. If the clock stepped back since (NTP, a restored VM, the
// disk moved to another machine), new sequences must still start past
// that watermark: a new commit's sequence at most the stored watermark
// reads as acknowledged at recovery, so a commit whose slice bytes never
// reached the disk would be taken for damage and kept, not cut. Modeled
// by a watermark an hour ahead of the clock.
func TestCoveredWatermarkAfterClockStepBack(t *testing.T) {
	c := newCoveredEnv(t)
	ahead := uint64(time.Now().Add(time.Hour).UnixNano())
	tx, err := c.e.KV.Begin(c.ctx, kv.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Set(meta.MiscKey(meta.CoveredAckedKey), binary.BigEndian.AppendUint64(nil, ahead)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(c.ctx); err != nil {
		t.Fatal(err)
	}
	c.close()
	c.open()
	c.pool(4) // the reuse pool is not persistent: fill it in this run
	c.write("kept", c.data())
	d0 := c.descriptors()
	c.writeOpts("unflushed", c.data(), true) // NoSync: never acknowledged
	desc := c.newDescriptor(d0, c.descriptors())
	c.close()
	c.clobber(desc)
	c.open()
	defer c.close()
	if _, err := c.read("kept"); err != nil {
		t.Errorf("kept (acknowledged): %v", err)
	}
	if got, err := c.read("unflushed"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unacknowledged commit whose bytes are missing: want ErrNotExist (cut), got err %v (%d bytes)\n%s", err, len(got), c.logs)
	}
}

// TestCoveredRecoverAfterCrashedCut: the check runs whatever Covered says
// (a directory written with covered puts, opened without them), and a
// cut that crashed halfway — its copy of the log prefix (".cut") left
// behind, half written — neither stops the next Open nor changes what it
// cuts.
func TestCoveredRecoverAfterCrashedCut(t *testing.T) {
	c := newCoveredEnv(t)
	c.pool(4)
	var descs [][]slice.Pointer
	for i := 0; i < 3; i++ {
		d0 := c.descriptors()
		c.writeOpts(fmt.Sprintf("f%d", i), c.data(), i >= 1)
		descs = append(descs, c.newDescriptor(d0, c.descriptors()))
	}
	c.close()
	c.clobber(descs[1])
	metaDir := filepath.Join(c.dir, "meta")
	ents, err := os.ReadDir(metaDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			if err := os.WriteFile(filepath.Join(metaDir, e.Name()+".cut"), []byte("half a copy"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// And one of a log that this Open does not cut (a cut's own copy
	// goes over the log it cuts).
	if err := os.WriteFile(filepath.Join(metaDir, "999999.log.cut"), []byte("half a copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := Open(c.ctx, Options{Dir: c.dir, CacheBytes: -1, Logger: slog.New(slog.NewTextHandler(c.logs, nil))})
	if err != nil {
		t.Fatalf("open with Covered off after a crashed cut: %v\n%s", err, c.logs)
	}
	c.e = e
	defer c.close()
	if _, err := c.read("f0"); err != nil {
		t.Errorf("f0 (acknowledged): %v", err)
	}
	for _, name := range []string{"f1", "f2"} {
		if _, err := c.read(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s (not acknowledged; f1's bytes missing): want ErrNotExist, got %v\n%s", name, err, c.logs)
		}
	}
	if rep, err := c.e.FS.Check(c.ctx); err != nil || !rep.OK() {
		t.Fatalf("fsck: %v %v", err, rep.Problems)
	}
	if left, _ := filepath.Glob(filepath.Join(metaDir, "*.cut")); len(left) > 0 {
		t.Errorf("copies of the crashed cut left behind: %v", left)
	}
}

// TestCoveredDropsEveryDescriptor: the collector's cleanup lists
// descriptors from a watermark past those it deleted before (so a listing
// does not walk their tombstones) and must still delete every descriptor
// committed before it. Writers keep committing covered puts — durable and
// NoSync, some followed by a Sync — over reused space while collections
// run; after the last writer and a final collection no descriptor may be
// left. A watermark that ran ahead of a commit still in flight, or of a
// NoSync commit not yet synced, leaves that commit's descriptor behind.
func TestCoveredDropsEveryDescriptor(t *testing.T) {
	c := newCoveredEnv(t)
	defer c.close()
	c.pool(8)
	const writers, files = 3, 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	stop := make(chan struct{})
	for w := 0; w < writers; w++ {
		data := c.data()
		noSync := w == 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < files; i++ {
				name := fmt.Sprintf("w%d-%d", w, i%3)
				err := c.e.FS.DoOpts(c.ctx, fs.RootCred, fs.TxnOptions{NoSync: noSync}, func(tx *fs.Txn) error {
					a, _, err := tx.Create(c.ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
					if err != nil {
						return err
					}
					return tx.Write(c.ctx, a.Ino, 0, data)
				})
				if err == nil && noSync && i%2 == 1 {
					err = c.e.FS.Sync(c.ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.e.FS.CollectGarbage(c.ctx); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-collected
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c.e.local.Stats().ReusePuts == 0 {
		t.Fatal("no put into reused space: no covered put made")
	}
	c.gc()
	if n := len(c.descriptors()); n != 0 {
		t.Fatalf("%d descriptors left after the last collection", n)
	}
}
