package fs_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/txnfs/txnfs/fs"
)

// TestSpanSeekHugeSparse: SEEK_DATA from 0 in a file of 2^50 bytes whose
// only data is at its end, and SEEK_HOLE in it, answer at once: Seek
// costs what the file holds (its span records), not its length (a walk
// over 64 MiB regions takes 2^24 kv scans here, 2^34 at MaxFileSize).
func TestSpanSeekHugeSparse(t *testing.T) {
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	ino := createFiles(t, f, 1)[0]
	const size uint64 = 1 << 50
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, 100, []byte("head")) })
	do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, size-100, pattern(1, 100)) })
	type res struct {
		off uint64
		eof bool
		err error
	}
	cases := []struct {
		from   uint64
		whence fs.Whence
		want   uint64
		eof    bool
	}{
		{1000, fs.SeekData, size - 100, false},
		{0, fs.SeekHole, 0, false},
		{100, fs.SeekHole, 104, false},
		{size - 100, fs.SeekHole, size, true},
		{size - 50, fs.SeekData, size - 50, false},
	}
	for _, c := range cases {
		done := make(chan res, 1)
		go func() {
			var r res
			r.err = f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
				r.off, r.eof, err = tx.Seek(ctx, ino, c.from, c.whence)
				return err
			})
			done <- r
		}()
		select {
		case r := <-done:
			if r.err != nil || r.off != c.want || r.eof != c.eof {
				t.Fatalf("Seek(%d, %v) = %d, %v, %v; want %d, %v", c.from, c.whence, r.off, r.eof, r.err, c.want, c.eof)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Seek(%d, %v) in a 2^50-byte sparse file: no answer after 10 s", c.from, c.whence)
		}
	}
}

// TestSpanSeekModel compares Seek (data and hole, from random offsets)
// with the data ranges Yank reports, over files fragmented into many
// span records by random writes, punches, truncates and copies with
// thresholds lowered (split past 8 extents). Reproduce with the printed
// seed (TXNFS_SPANSEEK_SEED).
func TestSpanSeekModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TXNFS_SPANSEEK_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (TXNFS_SPANSEEK_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	ctx := context.Background()
	tf := newTestFS(t, fsOpts{inlineMax: 64})
	f := tf.FS
	fs.SetCompactionForTest(f, 4, 8)
	inos := createFiles(t, f, 2)
	const maxSize = 1 << 20
	for step := 0; step < 300; step++ {
		ino := inos[rng.IntN(2)]
		off := uint64(rng.IntN(maxSize))
		n := uint64(1 + rng.IntN(20000))
		switch r := rng.IntN(10); {
		case r < 6:
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				return tx.Write(ctx, ino, off, pattern(byte(step)|1, int(n)))
			})
		case r < 8:
			do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, ino, off, n) })
		case r < 9:
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				sz := off + n
				_, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: &sz})
				return err
			})
		default:
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				_, err := tx.CopyRange(ctx, inos[0], off/2, inos[1], off, n)
				return err
			})
		}
		if step%10 != 9 {
			continue
		}
		for _, ino := range inos {
			ranges, err := fs.DataRangesForTest(ctx, f, ino)
			if err != nil {
				t.Fatal(err)
			}
			var size uint64
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				a, err := tx.GetAttr(ctx, ino)
				size = a.Size
				return err
			})
			probes := []uint64{0, size, size + 5}
			for _, r := range ranges {
				probes = append(probes, r[0], r[1], r[0]-1, r[1]-1, r[0]+1)
			}
			for i := 0; i < 20 && size > 0; i++ {
				probes = append(probes, rng.Uint64N(size))
			}
			for _, from := range probes {
				for _, whence := range []fs.Whence{fs.SeekData, fs.SeekHole} {
					wantOff, wantEOF := seekRef(ranges, size, from, whence)
					var got uint64
					var eof bool
					err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
						got, eof, err = tx.Seek(ctx, ino, from, whence)
						return err
					})
					if err != nil || got != wantOff || eof != wantEOF {
						t.Fatalf("step %d: Seek(%d, %v) of a %d-byte file = %d, %v, %v; want %d, %v (data %s)",
							step, from, whence, size, got, eof, err, wantOff, wantEOF, fmtRanges(ranges))
					}
				}
			}
		}
	}
	requireCheckClean(t, f)
}

// seekRef is Seek computed from a file's data ranges.
func seekRef(ranges [][2]uint64, size, from uint64, whence fs.Whence) (uint64, bool) {
	if from >= size {
		return size, true
	}
	for _, r := range ranges {
		if r[1] <= from {
			continue
		}
		if whence == fs.SeekData {
			return max(r[0], from), false
		}
		if r[0] > from {
			return from, false
		}
		from = r[1]
	}
	if whence == fs.SeekHole && from < size {
		return from, false
	}
	return size, true
}

func fmtRanges(rs [][2]uint64) string {
	if len(rs) > 12 {
		return fmt.Sprintf("%v ... (%d ranges)", rs[:12], len(rs))
	}
	return fmt.Sprint(rs)
}
