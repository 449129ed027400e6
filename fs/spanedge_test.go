package fs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// Edge cases of span records (data layout 3): offsets near MaxFileSize and
// 2^64, copies whose destination range would wrap past 2^64, truncation
// into the middle of a record, copies starting and ending inside records,
// and concatenations of empty files. Every case checks the bytes against a
// sparse model and runs Check (record invariants and Used).

// sparseRef is a model of a sparse file: size plus the non-zero bytes.
type sparseRef struct {
	size uint64
	data map[uint64]byte
}

func newSparseRef() *sparseRef { return &sparseRef{data: map[uint64]byte{}} }

func (r *sparseRef) write(off uint64, b []byte) {
	for i, c := range b {
		if c == 0 {
			delete(r.data, off+uint64(i))
		} else {
			r.data[off+uint64(i)] = c
		}
	}
	r.size = max(r.size, off+uint64(len(b)))
}

func (r *sparseRef) truncate(size uint64) {
	for o := range r.data {
		if o >= size {
			delete(r.data, o)
		}
	}
	r.size = size
}

func (r *sparseRef) read(off, n uint64) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = r.data[off+uint64(i)]
	}
	return out
}

// requireSparse compares the size and the model's interesting windows
// (around every non-zero byte, plus the given extra offsets) of ino.
func requireSparse(t *testing.T, f *fs.FS, ino fs.Ino, ref *sparseRef, when string, extra ...uint64) {
	t.Helper()
	ctx := context.Background()
	err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		a, err := tx.GetAttr(ctx, ino)
		if err != nil {
			return err
		}
		if a.Size != ref.size {
			return fmt.Errorf("size %d, want %d", a.Size, ref.size)
		}
		offs := map[uint64]bool{}
		for _, o := range extra {
			offs[o] = true
		}
		for o := range ref.data {
			offs[o&^8191] = true
		}
		for o := range offs {
			if o >= ref.size {
				continue
			}
			n := min(uint64(8192), ref.size-o)
			buf := make([]byte, n)
			got, _, err := tx.Read(ctx, ino, o, buf)
			if err != nil {
				return fmt.Errorf("read at %d: %w", o, err)
			}
			if uint64(got) != n || !bytes.Equal(buf, ref.read(o, n)) {
				return fmt.Errorf("bytes at %d differ from the model (read %d of %d)", o, got, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	requireCheckClean(t, f)
}

func createFiles(t *testing.T, f *fs.FS, n int) []fs.Ino {
	t.Helper()
	var inos []fs.Ino
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		inos = inos[:0]
		for i := 0; i < n; i++ {
			a, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprint("e", i), fs.CreateRequest{Type: fs.TypeRegular, Exclusive: true})
			if err != nil {
				return err
			}
			inos = append(inos, a.Ino)
		}
		return nil
	})
	return inos
}

// TestSpanEdgeNearMaxFileSize writes, punches, truncates and copies at
// offsets next to MaxFileSize (records whose relative offsets are ~2^60),
// with thresholds lowered so the far data sits in split records.
func TestSpanEdgeNearMaxFileSize(t *testing.T) {
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	fs.SetCompactionForTest(f, 4, 8)
	inos := createFiles(t, f, 2)
	a, b := inos[0], inos[1]
	ra, rb := newSparseRef(), newSparseRef()
	const top uint64 = fs.MaxFileSize
	write := func(ino fs.Ino, ref *sparseRef, off uint64, data []byte) {
		t.Helper()
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, off, data) })
		ref.write(off, data)
	}
	// Near the top, then at the bottom, then many small extents in between
	// so that records split around both ends.
	write(a, ra, top-5000, pattern(1, 5000))
	write(a, ra, 0, pattern(2, 3000))
	for i := uint64(0); i < 24; i++ {
		write(a, ra, top-1<<20+i*8192, pattern(byte(3+i), 100))
		write(a, ra, i*8192+100_000, pattern(byte(40+i), 100))
	}
	requireSparse(t, f, a, ra, "after writes", top-4096, top-8192)
	// The last byte of the largest file, and one byte past it.
	write(a, ra, top-1, []byte{0x7f})
	if err := f.Do(context.Background(), fs.RootCred, func(tx *fs.Txn) error {
		return tx.Write(context.Background(), a, top, []byte{1})
	}); !errors.Is(err, fs.ErrFileTooBig) {
		t.Fatalf("write at MaxFileSize: %v, want ErrFileTooBig", err)
	}
	// Punch with a length that overflows off+n.
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, a, top-3000, ^uint64(0)) })
	for o := top - 3000; o < top; o++ {
		delete(ra.data, o)
	}
	requireSparse(t, f, a, ra, "after punch to the end", top-4096)
	// Copy the top range to b's start and b's start to near the top.
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		_, err := tx.CopyRange(ctx, a, top-1<<20, b, 10, 1<<20)
		return err
	})
	rb.write(10, ra.read(top-1<<20, 1<<20))
	requireSparse(t, f, b, rb, "after copying the top of a to b")
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		_, err := tx.CopyRange(ctx, b, 0, a, top-(1<<20)-77, 0)
		return err
	})
	ra.write(top-(1<<20)-77, rb.read(0, rb.size))
	requireSparse(t, f, a, ra, "after copying b to the top of a")
	// Truncate into the middle of the far records, then extend again.
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		sz := top - 1<<20 + 5*8192 + 50
		_, err := tx.SetAttr(ctx, a, fs.SetAttr{Size: &sz})
		return err
	})
	ra.truncate(top - 1<<20 + 5*8192 + 50)
	requireSparse(t, f, a, ra, "after truncating near the top")
	write(a, ra, top-10, pattern(9, 10))
	requireSparse(t, f, a, ra, "after extending to the top again", top-1<<20+5*8192)
	// Concat with a file that brings the total past MaxFileSize fails.
	if err := f.Do(context.Background(), fs.RootCred, func(tx *fs.Txn) error {
		return tx.Concat(context.Background(), b, []fs.Ino{a, b})
	}); !errors.Is(err, fs.ErrFileTooBig) {
		t.Fatalf("concat past MaxFileSize: %v, want ErrFileTooBig", err)
	}
	// Concat of a small file and a copy of the big one, shifted by b's size:
	// record copies with keys near the top.
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		sz := uint64(0)
		_, err := tx.SetAttr(ctx, b, fs.SetAttr{Size: &sz})
		if err != nil {
			return err
		}
		return tx.Write(ctx, b, 0, pattern(77, 1000))
	})
	rb = newSparseRef()
	rb.write(0, pattern(77, 1000))
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { // a := a[1000:] so b+a fits
		return tx.Punch(ctx, a, 0, 1000)
	})
	var c fs.Ino
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		at, _, err := tx.Create(ctx, fs.RootIno, "cat", fs.CreateRequest{Type: fs.TypeRegular, Exclusive: true})
		c = at.Ino
		return err
	})
	// a without its first 1000 bytes: copy it into d at 0.
	var d fs.Ino
	do(t, f, func(ctx context.Context, tx *fs.Txn) error {
		at, _, err := tx.Create(ctx, fs.RootIno, "tail", fs.CreateRequest{Type: fs.TypeRegular, Exclusive: true})
		if err != nil {
			return err
		}
		d = at.Ino
		_, err = tx.CopyRange(ctx, a, 1000, d, 0, 0)
		return err
	})
	rd := newSparseRef()
	rd.size = ra.size - 1000
	for o, v := range ra.data {
		if o >= 1000 {
			rd.data[o-1000] = v
		}
	}
	requireSparse(t, f, d, rd, "tail copy")
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Concat(ctx, c, []fs.Ino{b, d}) })
	rc := newSparseRef()
	rc.write(0, pattern(77, 1000))
	rc.size = 1000 + rd.size
	for o, v := range rd.data {
		rc.data[o+1000] = v
	}
	if rc.size != top {
		t.Fatalf("model: concatenation is %d bytes, want MaxFileSize", rc.size)
	}
	requireSparse(t, f, c, rc, "concat up to MaxFileSize", top-4096)
}

// TestSpanEdgeCopyRangeWraps: CopyRange to a destination offset where
// dstOff+n wraps past 2^64 must fail with ErrFileTooBig (Paste and Write
// check the wrap) and leave the destination unchanged.
func TestSpanEdgeCopyRangeWraps(t *testing.T) {
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	inos := createFiles(t, f, 2)
	src, dst := inos[0], inos[1]
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, src, 0, pattern(5, 10000)) })
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, dst, 0, pattern(6, 100)) })
	for _, dstOff := range []uint64{^uint64(0) - 10, ^uint64(0) - 9999, fs.MaxFileSize - 1, 1 << 63} {
		err := f.Do(context.Background(), fs.RootCred, func(tx *fs.Txn) error {
			_, err := tx.CopyRange(context.Background(), src, 0, dst, dstOff, 10000)
			return err
		})
		if !errors.Is(err, fs.ErrFileTooBig) {
			t.Errorf("CopyRange to offset %d: %v, want ErrFileTooBig", dstOff, err)
		}
	}
	ref := newSparseRef()
	ref.write(0, pattern(6, 100))
	requireSparse(t, f, dst, ref, "after refused copies")
}

// TestSpanEdgeTruncateInsideRecords truncates into the middle of a closed
// record, into a gap between records and exactly at record boundaries,
// then extends and writes past the cut: the cut bytes must read as zeros.
func TestSpanEdgeTruncateInsideRecords(t *testing.T) {
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	fs.SetCompactionForTest(f, 4, 8)
	inos := createFiles(t, f, 1)
	a := inos[0]
	build := func() *sparseRef {
		ref := newSparseRef()
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			sz := uint64(0)
			_, err := tx.SetAttr(ctx, a, fs.SetAttr{Size: &sz})
			return err
		})
		for i := uint64(0); i < 40; i++ {
			data := pattern(byte(i+1), 300)
			do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, a, i*4096, data) })
			ref.write(i*4096, data)
		}
		// a hole of whole records in the middle
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, a, 10*4096, 12*4096) })
		ref.truncate(ref.size) // no-op, keeps size
		for o := range ref.data {
			if o >= 10*4096 && o < 22*4096 {
				delete(ref.data, o)
			}
		}
		return ref
	}
	for _, size := range []uint64{1, 150, 4096, 4096*3 + 299, 4096 * 15, 4096*21 + 5, 4096*39 + 300 - 1, 4096 * 39} {
		ref := build()
		requireSparse(t, f, a, ref, "built")
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			sz := size
			_, err := tx.SetAttr(ctx, a, fs.SetAttr{Size: &sz})
			return err
		})
		ref.truncate(size)
		requireSparse(t, f, a, ref, fmt.Sprintf("truncate to %d", size))
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			sz := uint64(200_000)
			_, err := tx.SetAttr(ctx, a, fs.SetAttr{Size: &sz})
			return err
		})
		ref.size = 200_000
		requireSparse(t, f, a, ref, fmt.Sprintf("extend after truncate to %d", size), size&^4095, 4096*39)
		data := pattern(99, 5000)
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, a, size+7, data) })
		ref.write(size+7, data)
		requireSparse(t, f, a, ref, fmt.Sprintf("write after truncate to %d", size))
	}
}

// TestSpanEdgeConcatEmpty concatenates empty files (alone, around a
// non-empty one, into a non-empty destination, with no sources) and a
// file with itself.
func TestSpanEdgeConcatEmpty(t *testing.T) {
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	fs.SetCompactionForTest(f, 4, 8)
	inos := createFiles(t, f, 4)
	e1, e2, full, dst := inos[0], inos[1], inos[2], inos[3]
	data := make([]byte, 0, 40*1000)
	for i := 0; i < 40; i++ { // several records
		piece := pattern(byte(i+1), 1000)
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, full, uint64(i*1000), piece) })
		data = append(data, piece...)
	}
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, dst, 0, pattern(3, 7000)) })
	check := func(when string, ino fs.Ino, want []byte) {
		t.Helper()
		ref := newSparseRef()
		ref.write(0, want)
		ref.size = uint64(len(want))
		requireSparse(t, f, ino, ref, when)
	}
	cases := []struct {
		name string
		srcs []fs.Ino
		want []byte
	}{
		{"empties", []fs.Ino{e1, e2}, nil},
		{"none", nil, nil},
		{"empty-full-empty", []fs.Ino{e1, full, e2}, data},
		{"full-empty-full", []fs.Ino{full, e1, full}, append(bytes.Clone(data), data...)},
		{"empty-dst-empty", []fs.Ino{e1, dst, e2}, append(bytes.Clone(data), data...)},
		{"dst-dst", []fs.Ino{dst, dst}, append(append(bytes.Clone(data), data...), append(bytes.Clone(data), data...)...)},
		{"empty-only", []fs.Ino{e2}, nil},
	}
	for _, c := range cases {
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Concat(ctx, dst, c.srcs) })
		check(c.name, dst, c.want)
		check(c.name+": e1", e1, nil)
		check(c.name+": full", full, data)
	}
}

// TestSpanEdgeUpgradeHugeSparse converts stores of layouts 1 and 2 holding
// huge sparse files (data at 0, near 2^40 and at the last bytes below
// MaxFileSize; a file whose size is past its data; one with a size and
// no data) in batches of 1 and 3 records, so batches end inside files and
// between them: every file reads as before, Check is clean (Used), and
// writes after the upgrade land right (the open record).
func TestSpanEdgeUpgradeHugeSparse(t *testing.T) {
	for _, from := range []int{1, 2} {
		for _, batch := range []int{1, 3} {
			t.Run(fmt.Sprintf("layout%d-batch%d", from, batch), func(t *testing.T) {
				ctx := context.Background()
				tf := newTestFS(t, fsOpts{inlineMax: 64})
				f := tf.FS
				const top uint64 = fs.MaxFileSize
				inos := createFiles(t, f, 4)
				refs := []*sparseRef{newSparseRef(), newSparseRef(), newSparseRef(), newSparseRef()}
				write := func(i int, off uint64, data []byte) {
					t.Helper()
					do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, inos[i], off, data) })
					refs[i].write(off, data)
				}
				write(0, 0, pattern(1, 3000))
				write(0, 1<<40+12345, pattern(2, 300_000))
				write(0, top-5000, pattern(3, 5000))
				write(1, 1<<50, pattern(4, 70))
				write(1, 1<<50+1<<20, []byte("inline"))
				do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Allocate(ctx, inos[1], 0, 1<<55) })
				refs[1].size = 1 << 55
				do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Allocate(ctx, inos[2], 0, 1<<45) })
				refs[2].size = 1 << 45
				write(3, 1<<30, pattern(5, 1<<20))
				do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, inos[3], 1<<30+100, 1<<20-200) })
				for o := uint64(1<<30 + 100); o < 1<<30+1<<20-100; o++ {
					delete(refs[3].data, o)
				}
				for i := range inos {
					requireSparse(t, f, inos[i], refs[i], fmt.Sprintf("file %d before", i), top-8192)
				}
				var err error
				if from == 1 {
					err = fs.WriteLayout1ForTest(ctx, f)
				} else {
					err = fs.WriteLayout2ForTest(ctx, f)
				}
				if err != nil {
					t.Fatal(err)
				}
				restore := fs.SetUpgradeBatchForTest(batch)
				f2, err := fs.Open(ctx, fs.Config{KV: tf.KV, Slices: tf.Slices, Clock: fixedClock, InlineMax: 64, GCWait: time.Millisecond})
				restore()
				if err != nil {
					t.Fatalf("opening the layout %d store: %v", from, err)
				}
				t.Cleanup(func() { f2.Close() })
				for i := range inos {
					requireSparse(t, f2, inos[i], refs[i], fmt.Sprintf("file %d after the upgrade", i), top-8192)
				}
				for i := range inos {
					for _, off := range []uint64{0, 1 << 40, refs[i].size - 10, refs[i].size + 10} {
						if off+10 > top {
							continue
						}
						data := pattern(byte(i+9), 10)
						do(t, f2, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, inos[i], off, data) })
						refs[i].write(off, data)
					}
					requireSparse(t, f2, inos[i], refs[i], fmt.Sprintf("file %d after writes", i))
				}
			})
		}
	}
}

// TestSpanCheckDataPastRecordEnd: a closed span record whose extents reach
// past its last offset (they would overlap the next record's bytes, and
// reads through either record would disagree) is reported by Check and
// read as ErrCorrupt (meta.UnmarshalSpan validates extents against the
// key's bounds), never returned as data.
func TestSpanCheckDataPastRecordEnd(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	fs.SetCompactionForTest(f, 4, 8)
	ino := createFiles(t, f, 1)[0]
	for i := uint64(0); i < 40; i++ {
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			return tx.Write(ctx, ino, i*4096, pattern(byte(i+1), 1000))
		})
	}
	requireCheckClean(t, f)
	kt, err := tf.KV.Begin(ctx, kv.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer kt.Rollback()
	prefix := meta.SpanPrefix(uint64(ino))
	pairs, err := kt.Scan(ctx, prefix, kv.PrefixEnd(prefix), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) < 3 {
		t.Fatalf("%d span records, want several", len(pairs))
	}
	// Shorten the first record's key to end inside its data, leaving a
	// gap before the next record (so records do not overlap by keys).
	_, start, _, rec, err := meta.UnmarshalSpan(pairs[0].Key, pairs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Extents) < 2 {
		t.Fatalf("first record holds %d extents", len(rec.Extents))
	}
	if err := kt.Delete(pairs[0].Key); err != nil {
		t.Fatal(err)
	}
	if err := kt.Set(meta.SpanKey(uint64(ino), start, start+rec.Extents[0].Off+10), pairs[0].Value); err != nil {
		t.Fatal(err)
	}
	if err := kt.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f2, err := fs.Open(ctx, fs.Config{KV: tf.KV, Slices: tf.Slices, Clock: fixedClock, InlineMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	rep, err := f2.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range rep.Problems {
		found = found || strings.Contains(p, "outside a span")
	}
	if !found {
		t.Fatalf("Check did not report data past a record's end; problems:\n%s", joinLines(rep.Problems, 10))
	}
	err = f2.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		_, _, err := tx.Read(ctx, ino, start, make([]byte, 100))
		return err
	})
	if !errors.Is(err, fs.ErrCorrupt) {
		t.Fatalf("reading through the record: %v, want ErrCorrupt", err)
	}
}

// TestSpanEdgeManyRecords: one write, punch and copy each covering dozens
// of span records, starting and ending inside records, and copies of a
// file onto itself shifted forward and backward (overlapping ranges).
func TestSpanEdgeManyRecords(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	fs.SetCompactionForTest(f, 4, 8)
	ino := createFiles(t, f, 1)[0]
	var ref []byte
	put := func(off int, data []byte) {
		if end := off + len(data); end > len(ref) {
			ref = append(ref, make([]byte, end-len(ref))...)
		}
		copy(ref[off:], data)
	}
	verify := func(when string) {
		t.Helper()
		err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			got, err := readAll(ctx, tx, ino, uint64(len(ref)))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, ref) {
				k := 0
				for k < len(got) && got[k] == ref[k] {
					k++
				}
				return fmt.Errorf("differs from byte %d", k)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		requireCheckClean(t, f)
	}
	for i := 0; i < 400; i++ { // 400 extents 1 KiB apart: ~50 records
		data := pattern(byte(i)|1, 300)
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, uint64(i*1024), data) })
		put(i*1024, data)
	}
	verify("fragmented")
	if n := countKeys(t, tf.KV, meta.SpanPrefix(uint64(ino))); n < 20 {
		t.Fatalf("%d span records, want many", n)
	}
	big := pattern(200, 300_000)
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, 20_123, big) })
	put(20_123, big)
	verify("one write over many records")
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, ino, 5_555, 250_000) })
	clear(ref[5_555:255_555])
	verify("one punch over many records")
	for _, c := range []struct{ src, dst, n int }{{0, 777, 200_000}, {100_000, 3, 250_000}, {1000, 1000, 50_000}} {
		do(t, f, func(ctx context.Context, tx *fs.Txn) error {
			_, err := tx.CopyRange(ctx, ino, uint64(c.src), ino, uint64(c.dst), uint64(c.n))
			return err
		})
		n := min(c.n, len(ref)-c.src)
		put(c.dst, bytes.Clone(ref[c.src:c.src+n]))
		verify(fmt.Sprintf("copy %d -> %d (%d bytes) within the file", c.src, c.dst, c.n))
	}
}
