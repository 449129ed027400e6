package fs_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/fs/internal/model"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/kv/pebblekv"
	"github.com/txnfs/txnfs/slice"
)

// long reports whether the long (TXNFS_LONG=1) variants of the tests run.
func long() bool { return os.Getenv("TXNFS_LONG") != "" }

// scale returns short normally and long under TXNFS_LONG=1.
func scale(short, long_ int) int {
	if long() {
		return long_
	}
	return short
}

// fixedClock is a clock that never moves, so that replayed operations see
// the same times (and tests are deterministic).
func fixedClock() time.Time { return time.Unix(1_700_000_000, 0) }

type storeKind int

const (
	storeMem    storeKind = iota // memkv + slices on vfs.NewMem
	storePebble                  // pebblekv on vfs.NewMem + slices on vfs.NewMem
)

func (k storeKind) String() string { return [...]string{"memkv", "pebble"}[k] }

// testFS is an engine over throw-away stores.
type testFS struct {
	*fs.FS
	KV     kv.Store
	Slices slice.Store
	Mem    vfs.FS
}

type fsOpts struct {
	kind      storeKind
	inlineMax int
	wrapKV    func(kv.Store) kv.Store
	clock     func() time.Time
	// slicesOrdered sets Config.SlicesOrdered (a false promise on these
	// stores: only for tests that do not crash).
	slicesOrdered bool
	// reuseMin sets slice.LocalOptions.ReuseMin (1: every put takes
	// recycled space when the pool has some).
	reuseMin int
}

// tbLike is what the helpers need of a *testing.T or a *rapid.T.
type tbLike interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// newTestFS opens an engine on in-memory stores; it is closed by t.Cleanup.
func newTestFS(tb tbLike, o fsOpts) *testFS {
	tb.Helper()
	ctx := context.Background()
	mem := vfs.NewMem()
	var store kv.Store
	switch o.kind {
	case storeMem:
		store = memkv.New()
	case storePebble:
		var err error
		store, err = pebblekv.Open(pebblekv.Options{Dir: "kv", FS: mem, NoSync: true})
		if err != nil {
			tb.Fatalf("pebblekv.Open: %v", err)
		}
	}
	sl, err := slice.OpenLocal(ctx, slice.LocalOptions{FS: mem, Dir: "s", ReuseMin: o.reuseMin})
	if err != nil {
		tb.Fatalf("slice.OpenLocal: %v", err)
	}
	kvs := store
	if o.wrapKV != nil {
		kvs = o.wrapKV(store)
	}
	clock := o.clock
	if clock == nil {
		clock = fixedClock
	}
	f, err := fs.Open(ctx, fs.Config{KV: kvs, Slices: sl, Clock: clock, InlineMax: o.inlineMax, GCWait: time.Millisecond,
		SlicesOrdered: o.slicesOrdered})
	if err != nil {
		tb.Fatalf("fs.Open: %v", err)
	}
	tb.Cleanup(func() {
		f.Close()
		sl.Close()
		store.Close()
	})
	return &testFS{FS: f, KV: kvs, Slices: sl, Mem: mem}
}

// sentinels is the closed set of engine errors, for naming results.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrNotExist", fs.ErrNotExist}, {"ErrExist", fs.ErrExist}, {"ErrNotDir", fs.ErrNotDir},
	{"ErrIsDir", fs.ErrIsDir}, {"ErrNotEmpty", fs.ErrNotEmpty}, {"ErrInvalid", fs.ErrInvalid},
	{"ErrBadName", fs.ErrBadName}, {"ErrNameTooLong", fs.ErrNameTooLong}, {"ErrAccess", fs.ErrAccess},
	{"ErrPerm", fs.ErrPerm}, {"ErrTooManyLinks", fs.ErrTooManyLinks}, {"ErrFileTooBig", fs.ErrFileTooBig},
	{"ErrNoSpace", fs.ErrNoSpace}, {"ErrNoAttr", fs.ErrNoAttr}, {"ErrRange", fs.ErrRange},
	{"ErrNotSupported", fs.ErrNotSupported}, {"ErrWrongType", fs.ErrWrongType}, {"ErrBadSlice", fs.ErrBadSlice},
	{"ErrCorrupt", fs.ErrCorrupt}, {"ErrConflict", fs.ErrConflict}, {"ErrTxnDone", fs.ErrTxnDone},
	{"ErrReadOnly", fs.ErrReadOnly}, {"ErrIO", fs.ErrIO},
}

// errName names the sentinel err wraps: "" for nil, "unclassified: ..."
// for an error outside the closed set (itself a bug).
func errName(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "unclassified: " + err.Error()
}

// engineWalker reads a tree through a transaction for model.Walk.
type engineWalker struct {
	ctx context.Context
	tx  *fs.Txn
}

func (w engineWalker) Root() fs.Ino { return fs.RootIno }

func (w engineWalker) Stat(ino fs.Ino) (model.Entry, []string, []fs.Ino, error) {
	ctx, tx := w.ctx, w.tx
	a, err := tx.GetAttr(ctx, ino)
	if err != nil {
		return model.Entry{}, nil, nil, err
	}
	e := model.Entry{Type: a.Type, Mode: a.Mode, Uid: a.Uid, Gid: a.Gid, Rdev: a.Rdev, Nlink: a.Nlink, Size: a.Size,
		Xattrs: map[string]string{}}
	switch a.Type {
	case fs.TypeRegular:
		if e.Data, err = readAll(ctx, tx, ino, a.Size); err != nil {
			return e, nil, nil, err
		}
	case fs.TypeSymlink:
		if e.Target, err = tx.Readlink(ctx, ino); err != nil {
			return e, nil, nil, err
		}
	}
	names, err := tx.ListXattr(ctx, ino)
	if err != nil {
		return e, nil, nil, fmt.Errorf("listxattr: %w", err)
	}
	for _, n := range names {
		v, err := tx.GetXattr(ctx, ino, n)
		if err != nil {
			return e, nil, nil, fmt.Errorf("getxattr %q: %w", n, err)
		}
		e.Xattrs[n] = string(v)
	}
	if a.Type != fs.TypeDirectory {
		return e, nil, nil, nil
	}
	ents, err := readDirAll(ctx, tx, ino, 3)
	if err != nil {
		return e, nil, nil, err
	}
	names = names[:0:0]
	inos := make([]fs.Ino, 0, len(ents))
	for _, de := range ents {
		names = append(names, de.Name)
		inos = append(inos, de.Ino)
	}
	return e, names, inos, nil
}

// readAll reads size bytes of a file in a few chunks and checks that EOF
// is reported exactly at the end.
func readAll(ctx context.Context, tx *fs.Txn, ino fs.Ino, size uint64) ([]byte, error) {
	out := make([]byte, 0, size)
	chunk := 64 << 10
	for {
		buf := make([]byte, chunk)
		off := uint64(len(out))
		n, eof, err := tx.Read(ctx, ino, off, buf)
		if err != nil {
			return nil, fmt.Errorf("read at %d: %w", off, err)
		}
		out = append(out, buf[:n]...)
		if eof {
			if uint64(len(out)) != size {
				return nil, fmt.Errorf("read: EOF after %d bytes of a %d-byte file", len(out), size)
			}
			return out, nil
		}
		if n == 0 {
			return nil, fmt.Errorf("read at %d: no progress and no EOF (size %d)", off, size)
		}
		if uint64(len(out)) > size {
			return nil, fmt.Errorf("read: %d bytes from a %d-byte file", len(out), size)
		}
	}
}

// readDirAll lists a directory in pages of limit entries, checking that
// cookies increase and names are unique, and returns the entries sorted by
// name.
func readDirAll(ctx context.Context, tx *fs.Txn, dir fs.Ino, limit int) ([]fs.DirEntry, error) {
	var all []fs.DirEntry
	seen := map[string]bool{}
	var cookie uint64
	for page := 0; ; page++ {
		ents, eof, err := tx.ReadDir(ctx, dir, fs.ReadDirRequest{Cookie: cookie, Limit: limit})
		if err != nil {
			return nil, fmt.Errorf("readdir: %w", err)
		}
		if limit > 0 && len(ents) > limit {
			return nil, fmt.Errorf("readdir: %d entries for limit %d", len(ents), limit)
		}
		for _, e := range ents {
			if e.Cookie <= cookie || e.Cookie < 3 {
				return nil, fmt.Errorf("readdir: cookie %d after %d", e.Cookie, cookie)
			}
			if seen[e.Name] {
				return nil, fmt.Errorf("readdir: %q listed twice", e.Name)
			}
			seen[e.Name] = true
			cookie = e.Cookie
			all = append(all, e)
		}
		if eof {
			break
		}
		if len(ents) == 0 {
			return nil, fmt.Errorf("readdir: empty page without EOF")
		}
		if page > 1<<20 {
			return nil, fmt.Errorf("readdir: does not end")
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

// snapshotTxn reads the whole tree in tx.
func snapshotTxn(ctx context.Context, tx *fs.Txn) (model.Snapshot, error) {
	return model.Walk(engineWalker{ctx, tx})
}

// snapshot reads the whole tree in a read-only transaction.
func snapshot(ctx context.Context, f *fs.FS) (model.Snapshot, error) {
	var s model.Snapshot
	err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		var err error
		s, err = snapshotTxn(ctx, tx)
		return err
	})
	return s, err
}

func mustSnapshot(tb tbLike, f *fs.FS) model.Snapshot {
	tb.Helper()
	s, err := snapshot(context.Background(), f)
	if err != nil {
		tb.Fatalf("snapshot: %v", err)
	}
	return s
}

// requireSameTree fails if the trees differ.
func requireSameTree(tb tbLike, want, got model.Snapshot) {
	tb.Helper()
	if d := model.Diff(want, got); d != "" {
		tb.Fatalf("trees differ:\n%s", d)
	}
}

// requireCheckClean runs fsck and fails on any problem.
func requireCheckClean(tb tbLike, f *fs.FS) {
	tb.Helper()
	rep, err := f.Check(context.Background())
	if err != nil {
		tb.Fatalf("Check: %v", err)
	}
	if len(rep.Problems) > 0 {
		tb.Fatalf("Check found %d problems:\n%s", len(rep.Problems), joinLines(rep.Problems, 20))
	}
}

func joinLines(lines []string, max int) string {
	var b bytes.Buffer
	for i, l := range lines {
		if i == max {
			fmt.Fprintf(&b, "... and %d more\n", len(lines)-max)
			break
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// setRapidDefaults sets rapid's number of checks and steps unless the
// command line or environment chose them.
func setRapidDefaults(checks, steps int) {
	userSetOnce.Do(func() {
		flag.Visit(func(f *flag.Flag) { userSet[f.Name] = true })
		userSet["rapid.checks"] = userSet["rapid.checks"] || os.Getenv("RAPID_CHECKS") != ""
		userSet["rapid.steps"] = userSet["rapid.steps"] || os.Getenv("RAPID_STEPS") != ""
		userSet["rapid.nofailfile"] = userSet["rapid.nofailfile"] || userSet["rapid.failfile"]
	})
	if !userSet["rapid.checks"] {
		flag.Set("rapid.checks", strconv.Itoa(checks))
	}
	if !userSet["rapid.steps"] {
		flag.Set("rapid.steps", strconv.Itoa(steps))
	}
	// Failures print their seed; do not litter the checkout with fail
	// files unless asked to.
	if !userSet["rapid.nofailfile"] && os.Getenv("RAPID_NOFAILFILE") == "" {
		flag.Set("rapid.nofailfile", "true")
	}
}

var (
	userSetOnce sync.Once
	userSet     = map[string]bool{}
)

// pattern returns n bytes derived from seed, different at every offset so
// misplaced bytes show.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

// do runs fn in a read-write transaction as root; fn may return
// errTestAbort to abort it on purpose.
func do(tb tbLike, f *fs.FS, fn func(ctx context.Context, tx *fs.Txn) error) {
	tb.Helper()
	ctx := context.Background()
	if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return fn(ctx, tx) }); err != nil && err != errTestAbort {
		tb.Fatalf("Do: %v", err)
	}
}

// newFile creates regular file name in the root and writes data (if
// any) at offset 0, in one transaction, and returns its inode.
func newFile(tb tbLike, f *fs.FS, name string, data []byte) fs.Ino {
	tb.Helper()
	var ino fs.Ino
	do(tb, f, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular})
		if err != nil {
			return err
		}
		ino = a.Ino
		if len(data) == 0 {
			return nil
		}
		return tx.Write(ctx, ino, 0, data)
	})
	return ino
}

// sibling opens another engine over tf's store (as a second server on one
// kv store would), closed when the test ends.
func sibling(t tbLike, tf *testFS, inlineMax int) *fs.FS {
	t.Helper()
	f, err := fs.Open(context.Background(), fs.Config{KV: tf.KV, Slices: tf.Slices, Clock: fixedClock, InlineMax: inlineMax, GCWait: time.Millisecond})
	if err != nil {
		t.Fatalf("opening a second engine: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
