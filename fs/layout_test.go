package fs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/faultkv"
	"github.com/txnfs/txnfs/meta"
)

// TestLayout1Upgrade: a store written in data layout 1 (one Region record
// per 64 MiB region, made by fs.WriteLayout1ForTest from files written
// through the API) opens, reads the same bytes, passes Check, holds no
// region (or chunk) records and is writable afterwards. More than one
// upgrade batch of regions is converted (a sparse file with data in 70
// regions), and Opens that fail half-way (injected kv errors) leave a
// store the next Open finishes converting (to layout 2, then 3).
func TestLayout1Upgrade(t *testing.T) { testLayoutUpgrade(t, meta.LayoutRegions) }

// TestLayout2Upgrade: the same from data layout 2 (one Chunk record per
// 256 KiB, inodes without Used, made by fs.WriteLayout2ForTest) to span
// records: files span several conversion batches (a 12 MiB sequential
// file, the sparse one), Opens fail half-way through files, and the
// converted store passes Check (record invariants, every inode's Used).
func TestLayout2Upgrade(t *testing.T) { testLayoutUpgrade(t, meta.LayoutChunks) }

func testLayoutUpgrade(t *testing.T, from int) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			ctx := context.Background()
			tf := newTestFS(t, fsOpts{kind: kind, inlineMax: 64})
			f := tf.FS
			type file struct {
				ino  fs.Ino
				size uint64
			}
			var files []file
			create := func(name string) fs.Ino {
				var ino fs.Ino
				do(t, f, func(ctx context.Context, tx *fs.Txn) error {
					a, _, err := tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular})
					ino = a.Ino
					return err
				})
				return ino
			}
			// A fragmented file: random writes across chunk boundaries,
			// some larger than a chunk, some inline, and punches.
			frag := create("frag")
			for i := 0; i < 300; i++ {
				off := rng.Uint64N(5 << 20)
				n := 1 + rng.IntN(9000)
				if i%20 == 0 {
					n = 1 + rng.IntN(3<<20)
				}
				data := pattern(byte(i)|1, n)
				do(t, f, func(ctx context.Context, tx *fs.Txn) error {
					if i%17 == 0 {
						return tx.Punch(ctx, frag, off, uint64(n))
					}
					return tx.Write(ctx, frag, off, data)
				})
			}
			// A sparse file with data in 70 regions, straddling each
			// region boundary.
			sparse := create("sparse")
			for r := uint64(1); r <= 70; r++ {
				do(t, f, func(ctx context.Context, tx *fs.Txn) error {
					return tx.Write(ctx, sparse, r*meta.RegionSize-3000, pattern(byte(r), 6000))
				})
			}
			small := create("small")
			do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, small, 10, []byte("inline")) })
			seq := create("seq") // 48 chunks: several batches of 4
			for off := 0; off < 12<<20; off += 1 << 20 {
				do(t, f, func(ctx context.Context, tx *fs.Txn) error {
					return tx.Write(ctx, seq, uint64(off), pattern(byte(off>>20)|1, 1<<20))
				})
			}
			for _, ino := range []fs.Ino{frag, sparse, small, seq} {
				var a fs.Attr
				do(t, f, func(ctx context.Context, tx *fs.Txn) (err error) { a, err = tx.GetAttr(ctx, ino); return err })
				files = append(files, file{ino, a.Size})
			}
			// What each file reads: whole for the small ones, windows of
			// the sparse one.
			readFile := func(f *fs.FS, fl file) []byte {
				var out []byte
				err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
					if fl.ino != sparse {
						b, err := readAll(ctx, tx, fl.ino, fl.size)
						out = b
						return err
					}
					for r := uint64(1); r <= 70; r++ {
						buf := make([]byte, 8000)
						n, _, err := tx.Read(ctx, fl.ino, r*meta.RegionSize-4000, buf)
						if err != nil {
							return err
						}
						out = append(out, buf[:n]...)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			var want [][]byte
			for _, fl := range files {
				want = append(want, readFile(f, fl))
			}
			if from == meta.LayoutRegions {
				if err := fs.WriteLayout1ForTest(ctx, f); err != nil {
					t.Fatal(err)
				}
				if n := countKeys(t, tf.KV, meta.AllRegionsPrefix()); n < 71 {
					t.Fatalf("layout 1 store has %d region records, want at least 71", n)
				}
				if n := countKeys(t, tf.KV, meta.AllChunksPrefix()); n != 0 {
					t.Fatalf("layout 1 store has %d chunk records", n)
				}
			} else {
				if err := fs.WriteLayout2ForTest(ctx, f); err != nil {
					t.Fatal(err)
				}
				if n := countKeys(t, tf.KV, meta.AllChunksPrefix()); n < 48+70 {
					t.Fatalf("layout 2 store has %d chunk records, want at least %d", n, 48+70)
				}
			}
			if n := countKeys(t, tf.KV, meta.AllSpansPrefix()); n != 0 {
				t.Fatalf("layout %d store has %d span records", from, n)
			}
			// Interrupted upgrades: Open over a kv store that fails calls
			// (and conflicts) until one Open gets through; each failed
			// Open leaves a store that the next one resumes from.
			restore := fs.SetUpgradeBatchForTest(4)
			defer restore()
			failures, partial := 0, false
			for attempt := int64(0); ; attempt++ {
				if attempt == 200 {
					t.Fatal("no Open over the faulty store succeeded in 200 attempts")
				}
				faulty := faultkv.Wrap(tf.KV, faultkv.Options{Seed: attempt, ErrorRate: 0.05, ConflictRate: 0.3})
				f3, err := fs.Open(ctx, fs.Config{KV: faulty, Slices: tf.Slices, Clock: fixedClock, InlineMax: 64, GCWait: time.Millisecond})
				if err == nil {
					f3.Close()
					break
				}
				if !errors.Is(err, fs.ErrIO) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("Open over the faulty store: %v", err)
				}
				failures++
				r, c, sp := countKeys(t, tf.KV, meta.AllRegionsPrefix()), countKeys(t, tf.KV, meta.AllChunksPrefix()), countKeys(t, tf.KV, meta.AllSpansPrefix())
				if (r > 0 && c > 0) || (c > 0 && sp > 0) {
					partial = true // stopped half-way through the conversion
				}
			}
			restore()
			t.Logf("%d Opens failed before one converted the store", failures)
			if !partial {
				t.Fatal("no Open failed half-way through the conversion: the resume path was not exercised")
			}
			f2, err := fs.Open(ctx, fs.Config{KV: tf.KV, Slices: tf.Slices, Clock: fixedClock, InlineMax: 64, GCWait: time.Millisecond})
			if err != nil {
				t.Fatalf("opening the layout %d store: %v", from, err)
			}
			if r, c := countKeys(t, tf.KV, meta.AllRegionsPrefix()), countKeys(t, tf.KV, meta.AllChunksPrefix()); r+c != 0 {
				t.Fatalf("%d region and %d chunk records left after the upgrade", r, c)
			}
			for i, fl := range files {
				if got := readFile(f2, fl); !bytes.Equal(got, want[i]) {
					t.Fatalf("file %d reads differently after the upgrade (%d bytes, want %d)", i, len(got), len(want[i]))
				}
			}
			requireCheckClean(t, f2)
			// Still writable, and the GC frees nothing that is referenced.
			do(t, f2, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, frag, 1<<20-5, []byte("0123456789")) })
			copy(want[0][1<<20-5:], "0123456789")
			for i := 0; i < 2; i++ {
				if _, err := f2.CollectGarbage(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i, fl := range files {
				if got := readFile(f2, fl); !bytes.Equal(got, want[i]) {
					t.Fatalf("file %d reads differently after a write and GC", i)
				}
			}
			requireCheckClean(t, f2)
		})
	}
}

// TestLayoutNewerRefused: a store recording a later data layout is not
// opened.
func TestLayoutNewerRefused(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{})
	kt, err := tf.KV.Begin(ctx, kv.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kt.Set(meta.MiscKey(meta.LayoutKey), binary.BigEndian.AppendUint64(nil, meta.LayoutCurrent+1))
	if err := kt.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Open(ctx, fs.Config{KV: tf.KV, Slices: tf.Slices})
	if !errors.Is(err, fs.ErrNotSupported) {
		t.Fatalf("Open of a layout-%d store: %v, want ErrNotSupported", meta.LayoutCurrent+1, err)
	}
	rep, err := tf.Check(ctx)
	if err != nil || rep.OK() {
		t.Fatalf("Check of a layout-4 store: OK=%v %v", rep.OK(), err)
	}
}

func countKeys(t *testing.T, s kv.Store, prefix []byte) int {
	t.Helper()
	ctx := context.Background()
	kt, err := s.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kt.Rollback()
	pairs, err := kt.Scan(ctx, prefix, kv.PrefixEnd(prefix), 0)
	if err != nil {
		t.Fatal(fmt.Errorf("scan: %w", err))
	}
	return len(pairs)
}
