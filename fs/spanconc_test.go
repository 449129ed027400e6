package fs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv/faultkv"
	"github.com/txnfs/txnfs/meta"
)

// TestSpanConcurrentModel runs goroutines on two engines over one store
// (so each has its own span hints and decode cache, and sees the other's
// records change under its hints), doing transactions of 1-3 writes,
// punches, truncates, range copies and concatenations on three files with
// thresholds lowered (compaction past 4 extents, split past 8) so records
// split and merge all the time; some transactions abort after changing
// records (their hints name records that never existed).
//
// Every transaction first reads the whole files it touches, applies its
// operations to that copy, and checks the file's bytes against the copy
// before committing. For serializability, each committed transaction adds
// an edge (content before -> content after) per file it changed: in a
// serial history they form a path from the empty file to the final
// content, so every content but the first and last must be entered as
// often as it is left. At the end both engines must read the same bytes
// and Check (record invariants, Used) must be clean. Reproduce with the
// printed seed (TXNFS_SPANCONC_SEED); TXNFS_LONG=1 runs longer.
func TestSpanConcurrentModel(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String()+"/plain", func(t *testing.T) { spanConcModel(t, kind, false, 64) })
		// Writes up to 8 KiB inline: merged inline runs, inline bytes
		// moved into slices by compaction.
		t.Run(kind.String()+"/inline", func(t *testing.T) { spanConcModel(t, kind, false, 8192) })
		// The second engine's kv store fails 2% of reads and commits and
		// makes 20% of commits conflict (faultkv, no lost acknowledgements
		// so that a failed commit applied nothing): operations fail in the
		// middle of splits and merges, leaving hints and cached records of
		// writes that never happened.
		t.Run(kind.String()+"/kvfaults", func(t *testing.T) { spanConcModel(t, kind, true, 64) })
	}
}

func spanConcModel(t *testing.T, kind storeKind, faults bool, inlineMax int) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TXNFS_SPANCONC_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (TXNFS_SPANCONC_SEED)", seed)
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{kind: kind, inlineMax: inlineMax})
	kv2 := tf.KV
	if faults {
		kv2 = faultkv.Wrap(tf.KV, faultkv.Options{Seed: int64(seed), ErrorRate: 0.02, ConflictRate: 0.2})
	}
	var f2 *fs.FS
	var err error
	for try := 0; try < 20; try++ { // Open itself may meet an injected error
		f2, err = fs.Open(ctx, fs.Config{KV: kv2, Slices: tf.Slices, Clock: fixedClock, InlineMax: inlineMax, GCWait: time.Millisecond})
		if err == nil || !errors.Is(err, fs.ErrIO) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f2.Close() })
	// A third engine, without faults, for the final reads.
	f3 := sibling(t, tf, inlineMax)
	engines := []*fs.FS{tf.FS, f2}
	for _, e := range engines {
		fs.SetCompactionForTest(e, 4, 8)
	}
	inos := createFiles(t, tf.FS, 3)
	const maxSize = 96 << 10
	type edge struct{ from, to [32]byte }
	var (
		mu                   sync.Mutex
		edges                [3][]edge
		committed, conflicts int
		aborted, ioErrors    int
	)
	workers, txns := 4, scale(150, 1500)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			f := engines[w%2]
			for k := 0; k < txns; k++ {
				if err := spanConcTxn(ctx, f, rng, inos, maxSize, func(file int, from, to []byte) {
					mu.Lock()
					edges[file] = append(edges[file], edge{sha256.Sum256(from), sha256.Sum256(to)})
					mu.Unlock()
				}, func(outcome string) {
					mu.Lock()
					switch outcome {
					case "committed":
						committed++
					case "conflict":
						conflicts++
					case "aborted":
						aborted++
					case "io":
						ioErrors++
					}
					mu.Unlock()
				}); err != nil {
					errc <- fmt.Errorf("worker %d txn %d: %w", w, k, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d committed, %d conflicts, %d aborted on purpose, %d failed with injected kv errors", committed, conflicts, aborted, ioErrors)
	if committed < workers*txns/4 {
		t.Fatalf("only %d of %d transactions committed", committed, workers*txns)
	}
	var finals [3][]byte
	for i, ino := range inos {
		for e, f := range []*fs.FS{tf.FS, f3} {
			var got []byte
			if err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				a, err := tx.GetAttr(ctx, ino)
				if err != nil {
					return err
				}
				got, err = readAll(ctx, tx, ino, a.Size)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if e == 0 {
				finals[i] = got
			} else if !bytes.Equal(got, finals[i]) {
				t.Fatalf("file %d: two engines read different bytes", i)
			}
		}
		// Degree balance of the history of file i.
		bal := map[[32]byte]int{}
		for _, e := range edges[i] {
			bal[e.from]--
			bal[e.to]++
		}
		start, end := sha256.Sum256(nil), sha256.Sum256(finals[i])
		bal[start]++
		bal[end]--
		for h, d := range bal {
			if d != 0 {
				t.Fatalf("file %d: committed transactions are not serial: content %x entered %+d times more than left (%d edges)",
					i, h[:6], d, len(edges[i]))
			}
		}
	}
	requireCheckClean(t, tf.FS)
}

// spanConcTxn runs one random transaction of TestSpanConcurrentModel and
// reports, through edge, each file it changed if it committed.
func spanConcTxn(ctx context.Context, f *fs.FS, rng *rand.Rand, inos []fs.Ino, maxSize int,
	edge func(file int, from, to []byte), outcome func(string)) error {
	err := spanConcTxn1(ctx, f, rng, inos, maxSize, edge, outcome)
	if errors.Is(err, fs.ErrIO) { // injected (faultkv): the transaction is gone
		outcome("io")
		return nil
	}
	return err
}

func spanConcTxn1(ctx context.Context, f *fs.FS, rng *rand.Rand, inos []fs.Ino, maxSize int,
	edge func(file int, from, to []byte), outcome func(string)) error {
	tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
	if err != nil {
		return err
	}
	defer tx.Abort()
	readFile := func(ino fs.Ino) ([]byte, error) {
		a, err := tx.GetAttr(ctx, ino)
		if err != nil {
			return nil, err
		}
		return readAll(ctx, tx, ino, a.Size)
	}
	dst := rng.IntN(len(inos))
	src := (dst + 1 + rng.IntN(len(inos)-1)) % len(inos)
	before, err := readFile(inos[dst])
	if err != nil {
		return err
	}
	srcData, err := readFile(inos[src])
	if err != nil {
		return err
	}
	ref := bytes.Clone(before)
	put := func(off int, data []byte) {
		if end := off + len(data); end > len(ref) {
			ref = append(ref, make([]byte, end-len(ref))...)
		}
		copy(ref[off:], data)
	}
	ino := inos[dst]
	nops := 1 + rng.IntN(3)
	for op := 0; op < nops; op++ {
		off := rng.IntN(maxSize)
		n := 1 + rng.IntN(3000)
		if rng.IntN(6) == 0 {
			n = 1 + rng.IntN(40000)
		}
		n = min(n, maxSize-off)
		switch r := rng.IntN(20); {
		case r < 11:
			data := pattern(byte(rng.IntN(255)+1), n)
			if err := tx.Write(ctx, ino, uint64(off), data); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			put(off, data)
		case r < 14:
			if err := tx.Punch(ctx, ino, uint64(off), uint64(n)); err != nil {
				return fmt.Errorf("punch: %w", err)
			}
			if off < len(ref) {
				clear(ref[off:min(off+n, len(ref))])
			}
		case r < 16:
			size := rng.IntN(len(ref) + 1)
			if rng.IntN(3) == 0 {
				size = rng.IntN(maxSize)
			}
			sz := uint64(size)
			if _, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: &sz}); err != nil {
				return fmt.Errorf("truncate: %w", err)
			}
			if size <= len(ref) {
				ref = ref[:size]
			} else {
				ref = append(ref, make([]byte, size-len(ref))...)
			}
		case r < 19:
			srcOff := rng.IntN(len(srcData) + 1)
			got, err := tx.CopyRange(ctx, inos[src], uint64(srcOff), ino, uint64(off), uint64(n))
			if err != nil {
				return fmt.Errorf("copy: %w", err)
			}
			if want := min(n, len(srcData)-srcOff); int(got) != want {
				return fmt.Errorf("CopyRange copied %d bytes, want %d", got, want)
			}
			if got > 0 {
				put(off, bytes.Clone(srcData[srcOff:srcOff+int(got)]))
			}
		default:
			// dst := src + dst (record copies are not used: dst is a source),
			// or dst := src (record copies), both cut back to maxSize.
			srcs, want := []fs.Ino{inos[src], ino}, append(bytes.Clone(srcData), ref...)
			if rng.IntN(2) == 0 {
				srcs, want = []fs.Ino{inos[src]}, bytes.Clone(srcData)
			}
			if err := tx.Concat(ctx, ino, srcs); err != nil {
				return fmt.Errorf("concat: %w", err)
			}
			ref = want
			if len(ref) > maxSize {
				sz := uint64(maxSize)
				if _, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: &sz}); err != nil {
					return fmt.Errorf("truncate: %w", err)
				}
				ref = ref[:maxSize]
			}
		}
	}
	got, err := readFile(ino)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, ref) {
		k := 0
		for k < min(len(got), len(ref)) && got[k] == ref[k] {
			k++
		}
		return fmt.Errorf("inside the transaction: %d bytes read, %d expected, first difference at %d", len(got), len(ref), k)
	}
	if rng.IntN(8) == 0 {
		tx.Abort()
		outcome("aborted")
		return nil
	}
	switch err := tx.Commit(ctx); {
	case errors.Is(err, fs.ErrConflict):
		outcome("conflict")
		return nil
	case err != nil:
		return fmt.Errorf("commit: %w", err)
	}
	outcome("committed")
	edge(dst, before, ref)
	return nil
}

// TestSpanPasteStaleSourceConflicts: a Paste checks that its source still
// references the slices, reading the source's span record through a hint
// (a point read; the source's inode is not read). A concurrent
// transaction on another engine overwrites the yanked range (the record
// is rewritten, compacted, and the slices lose their last reference) and
// commits first: the Paste must not commit with the stale slices. After
// garbage collection the destination reads either its old bytes (the
// Paste failed) or the yanked ones, never an error.
func TestSpanPasteStaleSourceConflicts(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f1 := tf.FS
	f2 := sibling(t, tf, 64)
	for _, e := range []*fs.FS{f1, f2} {
		fs.SetCompactionForTest(e, 2, 8)
	}
	inos := createFiles(t, f1, 2)
	a, b := inos[0], inos[1]
	orig := pattern(3, 20000)
	do(t, f1, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, a, 0, orig) })
	do(t, f1, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, b, 0, pattern(4, 100)) })
	var s fs.Slices
	do(t, f1, func(ctx context.Context, tx *fs.Txn) (err error) { s, err = tx.Yank(ctx, a, 0, 20000); return err })
	tx, err := f1.Begin(ctx, fs.RootCred, fs.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	if err := tx.Paste(ctx, b, 0, s); err != nil {
		t.Fatal(err)
	}
	// Overwrite a's whole range on the other engine, several times so the
	// record's list is compacted and the old slice is dropped.
	for i := 0; i < 4; i++ {
		do(t, f2, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, a, 0, pattern(byte(10+i), 20000)) })
	}
	commitErr := tx.Commit(ctx)
	pasted := commitErr == nil
	if commitErr != nil && !errors.Is(commitErr, fs.ErrConflict) && !errors.Is(commitErr, fs.ErrBadSlice) {
		t.Fatalf("Paste commit: %v, want success, ErrConflict or ErrBadSlice", commitErr)
	}
	for i := 0; i < 2; i++ {
		if _, err := f1.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := pattern(4, 100)
	if pasted {
		want = orig
	}
	err = f1.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
		got, err := readAll(ctx, tx, b, uint64(len(want)))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("b reads other bytes (pasted %v)", pasted)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("paste committed: %v (%v)", pasted, commitErr)
	requireCheckClean(t, f1)
}

// TestSpanConcurrentAppendAtEnd: workers on two engines append fixed-size
// blocks to one file with AppendAtEnd (placed at the end as of commit,
// replayed on conflict) while the open record splits every few appends
// (thresholds lowered): every block appears exactly once, whole, each
// worker's blocks in order, and Check is clean.
func TestSpanConcurrentAppendAtEnd(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f2 := sibling(t, tf, 64)
	engines := []*fs.FS{tf.FS, f2}
	for _, e := range engines {
		fs.SetCompactionForTest(e, 4, 8)
	}
	ino := createFiles(t, tf.FS, 1)[0]
	const workers, blocks, bsize = 4, 40, 700
	block := func(w, k int) []byte {
		b := pattern(byte(w*50+k)|1, bsize)
		b[0], b[1] = byte(w), byte(k)
		return b
	}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			f := engines[w%2]
			for k := 0; k < blocks; k++ {
				if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error { return tx.AppendAtEnd(ctx, ino, block(w, k)) }); err != nil {
					errc <- fmt.Errorf("worker %d block %d: %w", w, k, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var got []byte
	if err := tf.FS.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
		got, err = readAll(ctx, tx, ino, workers*blocks*bsize)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	next := make([]int, workers)
	for off := 0; off < len(got); off += bsize {
		w, k := int(got[off]), int(got[off+1])
		if w >= workers {
			t.Fatalf("block at %d: worker %d", off, w)
		}
		if k != next[w] || !bytes.Equal(got[off:off+bsize], block(w, k)) {
			t.Fatalf("block at %d: worker %d block %d, want that worker's block %d, whole", off, w, k, next[w])
		}
		next[w]++
	}
	t.Logf("%d span records", countKeys(t, tf.KV, meta.SpanPrefix(uint64(ino))))
	requireCheckClean(t, tf.FS)
}

// TestSpanHintsTwoEngines: engine 1 remembers the bounds of a file's span
// records (hints) and caches their decodings; engine 2 then merges,
// splits, truncates, punches and rewrites the same file (the remembered
// keys disappear, or come back with other contents). Every read through
// engine 1 must match engine 2's bytes, after each change.
func TestSpanHintsTwoEngines(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f1 := tf.FS
	f2 := sibling(t, tf, 64)
	for _, e := range []*fs.FS{f1, f2} {
		fs.SetCompactionForTest(e, 4, 8)
	}
	ino := createFiles(t, f1, 1)[0]
	var ref []byte
	put := func(off int, data []byte) {
		if end := off + len(data); end > len(ref) {
			ref = append(ref, make([]byte, end-len(ref))...)
		}
		copy(ref[off:], data)
	}
	readBoth := func(when string) {
		t.Helper()
		for e, f := range []*fs.FS{f1, f2} {
			err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
				// Read in small pieces so each goes through a hint.
				for off := 0; off < len(ref); off += 700 {
					buf := make([]byte, 700)
					n, _, err := tx.Read(ctx, ino, uint64(off), buf)
					if err != nil {
						return err
					}
					if !bytes.Equal(buf[:n], ref[off:min(off+700, len(ref))]) {
						return fmt.Errorf("bytes at %d differ", off)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: engine %d: %v", when, e+1, err)
			}
		}
	}
	write := func(f *fs.FS, off int, data []byte) {
		t.Helper()
		do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, uint64(off), data) })
		put(off, data)
	}
	for i := 0; i < 60; i++ { // many records, all remembered by engine 1
		write(f1, i*2048, pattern(byte(i)|1, 500))
	}
	readBoth("fragmented by engine 1")
	steps := []struct {
		name string
		run  func()
	}{
		{"engine 2 rewrites sequentially (merges)", func() {
			for off := 0; off < len(ref); off += 16 << 10 {
				write(f2, off, pattern(byte(off>>10)|1, min(16<<10, len(ref)-off)))
			}
		}},
		{"engine 2 fragments again (splits)", func() {
			for i := 0; i < 60; i++ {
				write(f2, i*2048+700, pattern(byte(i+100)|1, 300))
			}
		}},
		{"engine 2 truncates into a record", func() {
			size := len(ref)/2 + 333
			do(t, f2, func(ctx context.Context, tx *fs.Txn) error {
				sz := uint64(size)
				_, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: &sz})
				return err
			})
			ref = ref[:size]
		}},
		{"engine 2 punches records away", func() {
			do(t, f2, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, ino, 5000, 30000) })
			clear(ref[5000:35000])
		}},
		{"engine 2 rebuilds the same fragmentation with other bytes", func() {
			do(t, f2, func(ctx context.Context, tx *fs.Txn) error {
				sz := uint64(0)
				_, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: &sz})
				return err
			})
			ref = nil
			for i := 0; i < 60; i++ {
				write(f2, i*2048, pattern(byte(i+7)|1, 500))
			}
		}},
		{"engine 2 concatenates the file with itself", func() {
			do(t, f2, func(ctx context.Context, tx *fs.Txn) error { return tx.Concat(ctx, ino, []fs.Ino{ino, ino}) })
			ref = append(ref, ref...)
		}},
	}
	for _, s := range steps {
		s.run()
		readBoth(s.name)
		requireCheckClean(t, f1)
	}
}
