package fs_test

// Fault injection through the seams: the disk (pebble's errorfs over the
// vfs.FS given to datadir), the kv store (kv/faultkv: conflicts, I/O
// errors, lost commit acknowledgements), and corrupted bytes at rest
// (metadata records, slice backing files). Operations must fail with an
// error from the engine's closed set, never panic or return wrong data,
// and the committed state must stay consistent.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/fs/internal/model"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/faultkv"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
	"pgregory.net/rapid"
)

// requireClassified fails if err is outside the engine's closed set.
func requireClassified(t *testing.T, what string, err error) {
	t.Helper()
	if strings.HasPrefix(errName(err), "unclassified") {
		t.Fatalf("%s: error outside the engine's closed set: %v", what, err)
	}
}

// switchable injects errors only while on.
type switchable struct {
	on  atomic.Bool
	inj errorfs.Injector
}

func (s *switchable) String() string { return "switchable(" + s.inj.String() + ")" }
func (s *switchable) MaybeError(op errorfs.Op) error {
	if !s.on.Load() {
		return nil
	}
	return s.inj.MaybeError(op)
}

// runDiskFaults runs the crash workload on a data directory whose disk
// fails randomly (only under pathPrefix, if set), then turns the faults
// off, reopens, and checks consistency. It returns an error instead of
// failing so that the subprocess variant can report it.
func runDiskFaults(t *testing.T, seed uint64, pathPrefix string, rate float64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 3))
	mem := vfs.NewMem()
	pred := errorfs.Randomly(rate, int64(seed))
	if pathPrefix != "" {
		pred = errorfs.And(pred, errorfs.PathMatch(pathPrefix+"*"))
	}
	sw := &switchable{inj: errorfs.ErrInjected.If(pred)}
	disk := errorfs.Wrap(mem, sw)
	const workers = 2
	var last [workers]uint64 // last id whose commit returned nil
	var failed [workers]bool // the attempt after last failed: it may or may not have committed
	var errs, oks int
	for round := 0; round < scale(6, 40); round++ {
		e, err := datadir.Open(ctx, datadir.Options{Dir: "data", FS: disk, CacheBytes: -1})
		if err != nil {
			t.Fatalf("seed %d round %d: open without faults: %v", seed, round, err)
		}
		rep, err := e.FS.Check(ctx)
		if err != nil || !rep.OK() {
			t.Fatalf("seed %d round %d: fsck after faults: %v\n%s", seed, round, err, joinLines(rep.Problems, 20))
		}
		for w := 0; w < workers; w++ {
			got, err := crashVerify(ctx, e.FS, w)
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			if got != last[w] && !(failed[w] && got == last[w]+1) {
				t.Fatalf("seed %d round %d: worker %d holds txn %d, last acknowledged %d", seed, round, w, got, last[w])
			}
			last[w], failed[w] = got, false
		}
		sw.on.Store(true)
		for i := 0; i < 10+rng.IntN(20); i++ {
			w := rng.IntN(workers)
			if failed[w] {
				continue // the outcome of its last attempt is unknown until reopened
			}
			err := crashTxn(ctx, e.FS, w, last[w]+1)
			requireClassified(t, "transaction under disk faults", err)
			if err == nil {
				last[w]++
				oks++
			} else {
				failed[w] = true
				errs++
			}
			// Reads under faults return errors, never wrong data.
			if _, err := crashVerify(ctx, e.FS, rng.IntN(workers)); err != nil {
				requireClassified(t, "read under disk faults", err)
				if !errors.Is(err, fs.ErrIO) && !errors.Is(err, fs.ErrCorrupt) {
					t.Fatalf("seed %d: read under disk faults: %v (want ErrIO or ErrCorrupt)", seed, err)
				}
			}
		}
		if _, err := e.FS.CollectGarbage(ctx); err != nil {
			requireClassified(t, "gc under disk faults", err)
		}
		sw.on.Store(false)
		e.Close()
	}
	t.Logf("seed %d: %d transactions committed, %d failed under faults", seed, oks, errs)
}

// TestFaultDiskSlices injects I/O errors into the slice backing files.
func TestFaultDiskSlices(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	runDiskFaults(t, seed, "data/slices/", 0.05)
}

// TestFaultDiskAll injects I/O errors anywhere on the disk, metadata store
// included. Pebble treats some write errors as fatal (it panics), so this
// runs in a subprocess: a panic fails the test instead of killing the test
// binary.
func TestFaultDiskAll(t *testing.T) {
	if s := os.Getenv("TXNFS_FAULT_SEED"); s != "" {
		seed, _ := strconv.ParseUint(s, 10, 64)
		runDiskFaults(t, seed, "", 0.01)
		return
	}
	seed := uint64(time.Now().UnixNano())
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultDiskAll$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TXNFS_FAULT_SEED="+strconv.FormatUint(seed, 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		s := string(out)
		if i := strings.Index(s, "goroutine "); i > 0 && i < len(s)-1 {
			s = s[:min(len(s), i+3000)]
		}
		t.Fatalf("TXNFS_FAULT_SEED=%d: %v:\n%s", seed, err, s)
	}
}

// TestFaultKVConflicts: with the kv store failing commits with conflicts
// at random, Do never returns ErrConflict, and an explicit transaction
// with no real concurrent change never aborts (its replay always gives the
// same results): zero spurious aborts.
func TestFaultKVConflicts(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{wrapKV: func(s kv.Store) kv.Store {
		return faultkv.Wrap(s, faultkv.Options{Seed: 1, ConflictRate: 0.5})
	}})
	b := setupAtomBase(t, f.FS)
	for i := 0; i < 20; i++ {
		for _, c := range atomCases {
			tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.GetAttr(ctx, fs.RootIno); err != nil {
				t.Fatal(err)
			}
			if err := c.op(ctx, tx, b); err != nil {
				// The tree evolves; an op may no longer apply.
				tx.Abort()
				continue
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("%s: Commit under injected kv conflicts: %v (spurious abort)", c.name, err)
			}
		}
	}
	requireCheckClean(t, f.FS)
}

// TestModelConflicts is the model-based test over a kv store whose commits
// conflict at random: every transaction's commit goes through replay.
func TestModelConflicts(t *testing.T) {
	setRapidDefaults(scale(60, 600), scale(80, 150))
	var seed atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		kind := storeMem
		h := &harness{ctx: context.Background(), committed: model.New(), kind: kind}
		h.f = newTestFS(rt, fsOpts{kind: kind, wrapKV: func(s kv.Store) kv.Store {
			return faultkv.Wrap(s, faultkv.Options{Seed: seed.Add(1), ConflictRate: 0.3})
		}})
		rt.Repeat(map[string]func(*rapid.T){
			"do":       func(t *rapid.T) { h.autocommit(t, false) },
			"begin":    h.begin,
			"txn-op":   func(t *rapid.T) { h.txnOp(t, false) },
			"txn-op2":  func(t *rapid.T) { h.txnOp(t, false) },
			"txn-snap": func(t *rapid.T) { h.txnOp(t, true) },
			"commit":   h.commit,
			"abort":    h.abort,
			"":         h.check,
		})
		h.finish(rt)
	})
}

// TestFaultKVErrors: with kv reads and commits failing at random (some
// failures after the commit was applied: lost acknowledgements), every
// error is ErrIO from the closed set, and once the faults are gone the
// state is consistent: each worker holds its last acknowledged
// transaction or, if its last attempt failed, perhaps that one.
func TestFaultKVErrors(t *testing.T) {
	ctx := context.Background()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 4))
	raw := memkv.New()
	slices, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: vfs.NewMem(), Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer slices.Close()
	const workers = 2
	var last [workers]uint64
	var failed [workers]bool
	for round := 0; round < scale(5, 40); round++ {
		clean, err := fs.Open(ctx, fs.Config{KV: raw, Slices: slices, Clock: fixedClock})
		if err != nil {
			t.Fatal(err)
		}
		requireCheckClean(t, clean)
		for w := 0; w < workers; w++ {
			got, err := crashVerify(ctx, clean, w)
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			if got != last[w] && !(failed[w] && got == last[w]+1) {
				t.Fatalf("seed %d round %d: worker %d holds txn %d, last acknowledged %d", seed, round, w, got, last[w])
			}
			last[w], failed[w] = got, false
		}
		clean.Close()

		faulty, err := fs.Open(ctx, fs.Config{KV: faultkv.Wrap(raw, faultkv.Options{Seed: seed + int64(round),
			ErrorRate: 0.02, LostAckRate: 0.3, ConflictRate: 0.1}), Slices: slices, Clock: fixedClock})
		if err != nil {
			requireClassified(t, "open under kv faults", err)
			continue
		}
		for i := 0; i < 30; i++ {
			w := rng.IntN(workers)
			if failed[w] {
				continue
			}
			err := crashTxn(ctx, faulty, w, last[w]+1)
			requireClassified(t, "transaction under kv faults", err)
			if errors.Is(err, fs.ErrConflict) {
				t.Fatalf("Do returned ErrConflict: %v", err)
			}
			if err == nil {
				last[w]++
			} else {
				failed[w] = true
			}
			if _, err := crashVerify(ctx, faulty, rng.IntN(workers)); err != nil && !errors.Is(err, fs.ErrIO) {
				t.Fatalf("read under kv faults: %v, want ErrIO", err)
			}
		}
		faulty.Close()
	}
}

// TestCorruptMetadata overwrites stored records with garbage: operations
// touching them fail with ErrCorrupt (never a panic, never made-up data)
// and Check reports every one.
func TestCorruptMetadata(t *testing.T) {
	for _, target := range []string{"inode", "dirent", "region", "cookie", "truncated-inode"} {
		for _, garbage := range [][]byte{{}, {0xff}, {1}, {1, 0x9f}, {1, 0x83, 1, 2, 3}, bytes.Repeat([]byte{1, 0xbf}, 50)} {
			t.Run(fmt.Sprintf("%s/%x", target, garbage), func(t *testing.T) {
				ctx := context.Background()
				f := newTestFS(t, fsOpts{inlineMax: 16})
				b := setupAtomBase(t, f.FS)
				var key []byte
				switch target {
				case "inode":
					key = meta.InodeKey(uint64(b.f1))
				case "truncated-inode":
					key = meta.InodeKey(uint64(b.f2))
				case "dirent":
					key = meta.DirentKey(uint64(fs.RootIno), "f1")
				case "cookie":
					key = meta.CookieKey(uint64(fs.RootIno), 5)
				}
				kt, err := f.KV.Begin(ctx, kv.TxnOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if target == "region" { // f1's first span record
					prefix := meta.SpanPrefix(uint64(b.f1))
					pairs, err := kt.Scan(ctx, prefix, kv.PrefixEnd(prefix), 1)
					if err != nil || len(pairs) == 0 {
						t.Fatalf("no span record of f1: %v", err)
					}
					key = pairs[0].Key
				}
				old, err := kt.Get(ctx, key)
				if err != nil {
					t.Fatalf("%s record %x: %v", target, key, err)
				}
				val := garbage
				if target == "truncated-inode" {
					val = old[:len(old)/2]
				}
				if len(val) == 0 && target == "cookie" {
					val = []byte("no-such-name")
				}
				kt.Set(key, val)
				if err := kt.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				// Garbage that happens to decode is a plausible but wrong
				// record: operations may not notice it, Check must.
				var decodes bool
				switch target {
				case "inode", "truncated-inode":
					decodes = meta.Unmarshal(val, &meta.Inode{}) == nil
				case "dirent":
					decodes = meta.Unmarshal(val, &meta.Dirent{}) == nil
				case "region":
					_, _, _, _, err := meta.UnmarshalSpan(key, val)
					decodes = err == nil
				case "cookie":
					decodes = true
				}
				rep, err := f.Check(ctx)
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if rep.OK() {
					t.Fatalf("Check did not report the corrupt %s record", target)
				}
				// Every operation either works (it does not touch the
				// record) or fails with ErrCorrupt.
				corrupt := 0
				for _, c := range atomCases {
					err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return c.op(ctx, tx, b) })
					requireClassified(t, c.name, err)
					if err != nil && errors.Is(err, fs.ErrCorrupt) {
						corrupt++
					}
				}
				// A listing takes entries from the cookie index (layout 4),
				// without reading their entry records: a walk need not
				// notice a corrupt one (Check and lookups do).
				if _, err := snapshot(ctx, f.FS); !decodes && target != "dirent" && !errors.Is(err, fs.ErrCorrupt) {
					t.Errorf("walking the tree over a corrupt %s: %v, want ErrCorrupt", target, err)
				}
				if corrupt == 0 && !decodes {
					t.Errorf("no operation noticed the corrupt %s record", target)
				}
				if _, err := f.Check(ctx); err != nil {
					requireClassified(t, "Check", err)
				}
			})
		}
	}
}

// TestCorruptSliceData flips bytes in slice backing files: reads of the
// affected data fail with ErrCorrupt, never return the flipped bytes, and
// Check reports the bad checksum.
func TestCorruptSliceData(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{inlineMax: -1})
	var ino fs.Ino
	data := pattern(9, 100_000)
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular})
		if err != nil {
			return err
		}
		ino = a.Ino
		return tx.Write(ctx, ino, 0, data)
	})
	bs, err := f.Slices.Backings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flipped := 0
	for _, b := range bs {
		if b.Size == 0 {
			continue
		}
		name := "s/" + slice.BackingName(b.ID)
		fh, err := f.Mem.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		one := make([]byte, 1)
		off := int64(b.Size / 2)
		if _, err := fh.ReadAt(one, off); err != nil {
			t.Fatal(err)
		}
		one[0] ^= 0x40
		if _, err := fh.WriteAt(one, off); err != nil {
			t.Fatal(err)
		}
		fh.Close()
		flipped++
	}
	if flipped == 0 {
		t.Fatal("no backing file to corrupt")
	}
	// A fresh engine over the same stores, so no cached verified slice
	// hides the corruption.
	f2, err := fs.Open(ctx, fs.Config{KV: f.KV, Slices: f.Slices})
	if err != nil {
		t.Fatal(err)
	}
	err = f2.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		buf := make([]byte, len(data))
		n, _, err := tx.Read(ctx, ino, 0, buf)
		if err == nil {
			if bytes.Equal(buf[:n], data) {
				return nil // the flipped byte was not in a live slice
			}
			return fmt.Errorf("read returned wrong data without an error")
		}
		return err
	})
	if !errors.Is(err, fs.ErrCorrupt) {
		t.Fatalf("reading corrupt slice data: %v, want ErrCorrupt", err)
	}
	rep, err := f2.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatal("Check did not report the corrupt slice")
	}
	t.Logf("Check: %v", rep.Problems)
}

// TestPasteForeignSlices: slices from another file system, or tampered
// with, are rejected with ErrBadSlice and change nothing.
func TestPasteForeignSlices(t *testing.T) {
	ctx := context.Background()
	a := newTestFS(t, fsOpts{inlineMax: -1})
	other := newTestFS(t, fsOpts{inlineMax: -1})
	ab := setupAtomBase(t, a.FS)
	ob := setupAtomBase(t, other.FS)
	var foreign fs.Slices
	do(t, other.FS, func(ctx context.Context, tx *fs.Txn) (err error) {
		foreign, err = tx.Yank(ctx, ob.big, 0, 1000)
		return err
	})
	var own fs.Slices
	do(t, a.FS, func(ctx context.Context, tx *fs.Txn) (err error) {
		own, err = tx.Yank(ctx, ab.big, 0, 1000)
		return err
	})
	enc, err := own.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	before := captureState(t, a)
	cases := map[string]fs.Slices{"foreign": foreign}
	for i := 0; i < len(enc); i += max(1, len(enc)/40) {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x01
		var s fs.Slices
		if err := s.UnmarshalBinary(bad); err != nil {
			if !errors.Is(err, fs.ErrBadSlice) {
				t.Fatalf("UnmarshalBinary of tampered bytes: %v, want ErrBadSlice", err)
			}
			continue
		}
		cases[fmt.Sprintf("flip@%d", i)] = s
	}
	want := pattern(4, 1000)
	for name, s := range cases {
		err := a.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			if err := tx.Paste(ctx, ab.f2, 0, s); err != nil {
				return err
			}
			// Accepted: the tampering must have been a different
			// encoding of the same slices (e.g. CBOR null vs undefined).
			buf := make([]byte, 1000)
			if n, _, err := tx.Read(ctx, ab.f2, 0, buf); err != nil || !bytes.Equal(buf[:n], want) {
				return fmt.Errorf("tampered slices pasted: read %v, data differs: %v", err, !bytes.Equal(buf[:n], want))
			}
			return errTestAbort
		})
		if !errors.Is(err, fs.ErrBadSlice) && (name == "foreign" || !errors.Is(err, errTestAbort)) {
			t.Errorf("paste of %s slices: %v, want ErrBadSlice", name, err)
		}
	}
	requireSameState(t, before, captureState(t, a))
}

// failingGets wraps a kv store so that Gets of keys with a prefix, and
// Scans starting there, fail while on.
type failingGets struct {
	kv.Store
	prefix []byte
	on     *atomic.Bool
}

type failingGetsTxn struct {
	kv.Txn
	s *failingGets
}

func (s *failingGets) Begin(ctx context.Context, o kv.TxnOptions) (kv.Txn, error) {
	tx, err := s.Store.Begin(ctx, o)
	if err != nil {
		return nil, err
	}
	return failingGetsTxn{tx, s}, nil
}

func (t failingGetsTxn) Get(ctx context.Context, key []byte) ([]byte, error) {
	if t.s.on.Load() && bytes.HasPrefix(key, t.s.prefix) {
		return nil, errors.New("test: injected read error")
	}
	return t.Txn.Get(ctx, key)
}

func (t failingGetsTxn) Scan(ctx context.Context, start, end []byte, limit int) ([]kv.Pair, error) {
	if t.s.on.Load() && bytes.HasPrefix(start, t.s.prefix) {
		return nil, errors.New("test: injected read error")
	}
	return t.Txn.Scan(ctx, start, end, limit)
}

// TestReadDirIOError: an I/O error while reading directory entries (the
// cookie index; for cookie values written before layout 4, the entry
// records by point reads, or by one scan when a page holds the whole
// directory) is an I/O error (ErrIO), not a report of corrupt metadata.
func TestReadDirIOError(t *testing.T) {
	ctx := context.Background()
	for _, layout3 := range []bool{false, true} {
		var on atomic.Bool
		prefix := meta.AllCookiesPrefix()
		if layout3 {
			prefix = meta.AllDirentsPrefix()
		}
		f := newTestFS(t, fsOpts{wrapKV: func(s kv.Store) kv.Store {
			return &failingGets{Store: s, prefix: prefix, on: &on}
		}})
		setupAtomBase(t, f.FS)
		if layout3 {
			if err := fs.WriteLayout3ForTest(ctx, f.FS); err != nil {
				t.Fatal(err)
			}
		}
		on.Store(true)
		for _, req := range []fs.ReadDirRequest{{}, {Limit: 1}} {
			err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				_, _, err := tx.ReadDir(ctx, fs.RootIno, req)
				return err
			})
			if !errors.Is(err, fs.ErrIO) {
				t.Fatalf("BUG: ReadDir(%+v) with a failing metadata read (layout 3 cookies: %v): %v, want ErrIO", req, layout3, err)
			}
		}
	}
}

// FuzzSlicesUnmarshal: decoding untrusted Slices never panics, fails with
// ErrBadSlice, and Paste rejects whatever decodes unless it is an
// encoding of slices this file system issued.
func FuzzSlicesUnmarshal(f *testing.F) {
	ctx := context.Background()
	tf := newTestFS(f, fsOpts{inlineMax: 64})
	var ino fs.Ino
	do(f, tf.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular})
		if err != nil {
			return err
		}
		ino = a.Ino
		if err := tx.Write(ctx, ino, 0, pattern(1, 5000)); err != nil {
			return err
		}
		if err := tx.Write(ctx, ino, 100, []byte("inline")); err != nil {
			return err
		}
		for _, r := range [][2]uint64{{0, 5000}, {90, 20}, {0, 0}, {4000, 10000}} {
			s, err := tx.Yank(ctx, ino, r[0], r[1])
			if err != nil {
				return err
			}
			b, err := s.MarshalBinary()
			if err != nil {
				return err
			}
			f.Add(b)
		}
		return nil
	})
	f.Add([]byte{})
	f.Add([]byte{1, 0x83, 0x19, 0xff, 0xff, 0x80, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s fs.Slices
		if err := s.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, fs.ErrBadSlice) {
				t.Fatalf("UnmarshalBinary: %v, want ErrBadSlice", err)
			}
			return
		}
		err := tf.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
			if err := tx.Paste(ctx, ino, 7, s); err != nil {
				return err
			}
			return errTestAbort
		})
		if !errors.Is(err, fs.ErrBadSlice) && !errors.Is(err, errTestAbort) {
			t.Fatalf("Paste of decoded slices: %v", err)
		}
	})
}

// TestFaultSliceSyncFails: when slice bytes cannot be synced, the commit
// that depends on them fails (ErrIO) and changes nothing: metadata never
// points at data that is not durable. Once the disk recovers, commits work.
func TestFaultSliceSyncFails(t *testing.T) {
	ctx := context.Background()
	var on atomic.Bool
	disk := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if on.Load() {
				return errorfs.ErrInjected
			}
		}
		return nil
	}))
	sl, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: disk, Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	raw := memkv.New()
	f, err := fs.Open(ctx, fs.Config{KV: raw, Slices: sl, Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFS{FS: f, KV: raw, Slices: sl}
	b := setupAtomBase(t, f)
	before := captureState(t, tf)
	on.Store(true)
	err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
		if err := tx.Write(ctx, b.f2, 0, pattern(1, 100_000)); err != nil {
			return err
		}
		_, _, err := tx.Create(ctx, fs.RootIno, "new", fs.CreateRequest{Type: fs.TypeRegular})
		return err
	})
	if !errors.Is(err, fs.ErrIO) {
		t.Fatalf("commit whose slices cannot be synced: %v, want ErrIO", err)
	}
	requireSameState(t, before, captureState(t, tf))
	on.Store(false)
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, b.f2, 0, pattern(2, 100_000)) })
	err = f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		got, err := readFile(ctx, tx, b.f2)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, pattern(2, 100_000)) {
			return fmt.Errorf("data written after the disk recovered reads back wrong")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	requireCheckClean(t, f)
}

// failingWrites is a slice store whose writes fail after Put returned, as
// slice.Local's asynchronous direct writes can (ENOSPC): WaitWritten and
// Sync report it.
type failingWrites struct {
	slice.Store
	on *atomic.Bool
}

var errWriteFailed = errors.New("injected: direct write failed")

func (s failingWrites) WaitWritten(context.Context, []slice.Pointer) error {
	if s.on.Load() {
		return errWriteFailed
	}
	return nil
}

// TestFaultSliceWriteFailsNoSync: a NoSync commit over ordered stores does
// not sync its slices (the store does, before the log write) but must not
// name a slice whose write failed: it fails (ErrIO) and changes nothing,
// and later commits work.
func TestFaultSliceWriteFailsNoSync(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	sl, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	var on atomic.Bool
	raw := memkv.New()
	f, err := fs.Open(ctx, fs.Config{KV: raw, Slices: failingWrites{sl, &on}, Clock: fixedClock, SlicesOrdered: true})
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFS{FS: f, KV: raw, Slices: sl}
	b := setupAtomBase(t, f)
	before := captureState(t, tf)
	on.Store(true)
	err = f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
		return tx.Write(ctx, b.f2, 0, pattern(1, 100_000))
	})
	if !errors.Is(err, fs.ErrIO) || !strings.Contains(err.Error(), errWriteFailed.Error()) {
		t.Fatalf("NoSync commit naming a failed write: %v, want ErrIO with the write's error", err)
	}
	requireSameState(t, before, captureState(t, tf))
	on.Store(false)
	if err := f.DoOpts(ctx, fs.RootCred, fs.TxnOptions{NoSync: true}, func(tx *fs.Txn) error {
		return tx.Write(ctx, b.f2, 0, pattern(2, 100_000))
	}); err != nil {
		t.Fatalf("NoSync commit after the failure: %v", err)
	}
}
