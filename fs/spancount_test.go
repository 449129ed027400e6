package fs_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// inodeSpans reads inode ino's record straight from the kv store and
// returns its Spans and OpenStart.
func inodeSpans(t *testing.T, s kv.Store, ino fs.Ino) (uint64, uint64) {
	t.Helper()
	ctx := context.Background()
	kt, err := s.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kt.Rollback()
	b, err := kt.Get(ctx, meta.InodeKey(uint64(ino)))
	if err != nil {
		t.Fatalf("inode %d: %v", ino, err)
	}
	var n meta.Inode
	if err := meta.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	return n.Spans, n.OpenStart
}

// TestSpanCount: inode records count their span records (layout 4) through
// writes, splits, clones and truncation; removing a file deletes its
// records whether its count is known (no scan) or not (a layout-3 inode,
// scanned); Check verifies the counts. Layout 3 is upgraded to 4 in Open
// without converting anything.
func TestSpanCount(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			tf := newTestFS(t, fsOpts{kind: kind, inlineMax: 64})
			f := tf.FS
			create := func(f *fs.FS, name string) fs.Ino {
				var a fs.Attr
				do(t, f, func(ctx context.Context, tx *fs.Txn) (err error) {
					a, _, err = tx.Create(ctx, fs.RootIno, name, fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
					return err
				})
				return a.Ino
			}
			write := func(f *fs.FS, ino fs.Ino, off uint64, b []byte) {
				do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, off, b) })
			}
			empty := create(f, "empty")
			small := create(f, "small")
			write(f, small, 0, pattern(1, 12<<10))
			offset := create(f, "offset") // its only record starts past 0
			write(f, offset, 1<<20, pattern(2, 5000))
			frag := create(f, "frag") // strided writes: many records
			for i := uint64(0); i < 600; i++ {
				write(f, frag, i*8192, pattern(byte(i), 100))
			}
			clone := create(f, "clone")
			write(f, clone, 0, []byte("head"))
			do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Copy(ctx, frag, clone) })
			want := map[fs.Ino]uint64{empty: 1, small: 2, offset: 2}
			for ino, w := range want {
				if got, _ := inodeSpans(t, tf.KV, ino); got != w {
					t.Fatalf("inode %d: Spans %d, want %d", ino, got, w)
				}
			}
			if got, start := inodeSpans(t, tf.KV, offset); got != 2 || start == 0 {
				t.Fatalf("offset file: Spans %d OpenStart %d, want 2 and a start past 0", got, start)
			}
			for _, ino := range []fs.Ino{frag, clone} {
				if got, _ := inodeSpans(t, tf.KV, ino); got < 4 {
					t.Fatalf("inode %d: Spans %d, want several records", ino, got)
				}
			}
			requireCheckClean(t, f)

			// Known counts: removal deletes by key (empty, small, offset)
			// or scans (frag).
			for _, name := range []string{"empty", "small", "offset"} {
				do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Remove(ctx, fs.RootIno, name) })
			}
			requireCheckClean(t, f)

			// Layout 3: counts unknown, then upgraded by Open.
			again := create(f, "again")
			write(f, again, 0, pattern(3, 3000))
			if err := fs.WriteLayout3ForTest(ctx, f); err != nil {
				t.Fatal(err)
			}
			f2 := sibling(t, tf, 64)
			kt, err := tf.KV.Begin(ctx, kv.TxnOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := kt.Get(ctx, meta.MiscKey(meta.LayoutKey))
			kt.Rollback()
			if err != nil || !bytes.Equal(b, []byte{0, 0, 0, 0, 0, 0, 0, meta.LayoutCurrent}) {
				t.Fatalf("layout record after Open of a layout-3 store: %x, %v", b, err)
			}
			if got, _ := inodeSpans(t, tf.KV, again); got != 0 {
				t.Fatalf("layout-3 inode decodes with Spans %d, want 0 (unknown)", got)
			}
			requireCheckClean(t, f2)
			// A write keeps an unknown count unknown; truncation to 0
			// makes it known.
			write(f2, again, 1<<20, []byte("more"))
			if got, _ := inodeSpans(t, tf.KV, again); got != 0 {
				t.Fatalf("a write made an unknown count %d", got)
			}
			zero := uint64(0)
			do(t, f2, func(ctx context.Context, tx *fs.Txn) error {
				return tx.SetAttrOnly(ctx, again, fs.SetAttr{Size: &zero})
			})
			write(f2, again, 0, []byte("x"))
			if got, _ := inodeSpans(t, tf.KV, again); got != 2 {
				t.Fatalf("after truncation to 0 and a write: Spans %d, want 2", got)
			}
			requireCheckClean(t, f2)
			for _, name := range []string{"frag", "clone", "again"} {
				do(t, f2, func(ctx context.Context, tx *fs.Txn) error { return tx.Remove(ctx, fs.RootIno, name) })
			}
			requireCheckClean(t, f2)
			if n := countKeys(t, tf.KV, meta.AllSpansPrefix()); n != 0 {
				t.Fatalf("%d span records left after every file was removed", n)
			}
		})
	}
}

// TestTruncateToZeroReadsNoSpans: truncating a file whose inode counts
// its span records to size 0 deletes them by key, and a write after it
// in the same transaction (an NFS OPEN with size 0, then WRITE) reads no
// span record either: with every read of span records failing, both
// succeed, and the file holds just the new data.
func TestTruncateToZeroReadsNoSpans(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			var failing atomic.Bool
			tf := newTestFS(t, fsOpts{kind: kind, inlineMax: 64, wrapKV: func(s kv.Store) kv.Store {
				return &failingGets{Store: s, prefix: meta.AllSpansPrefix(), on: &failing}
			}})
			f := tf.FS
			var ino fs.Ino
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
				ino = a.Ino
				return err
			})
			do(t, f, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, ino, 0, pattern(1, 12<<10)) })
			if got, _ := inodeSpans(t, tf.KV, ino); got != 2 {
				t.Fatalf("Spans %d, want 2", got)
			}
			failing.Store(true)
			zero := uint64(0)
			want := pattern(2, 100)
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				if err := tx.SetAttrOnly(ctx, ino, fs.SetAttr{Size: &zero}); err != nil {
					return err
				}
				return tx.Write(ctx, ino, 0, want)
			})
			failing.Store(false)
			buf := make([]byte, 200)
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				n, _, err := tx.Read(ctx, ino, 0, buf)
				if err == nil && !bytes.Equal(buf[:n], want) {
					t.Errorf("read %d bytes after truncation and write, want the %d written", n, len(want))
				}
				return err
			})
			requireCheckClean(t, f)
		})
	}
}
