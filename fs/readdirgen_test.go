package fs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txnfs/txnfs/fs"
)

// TestReadDirCookieEntries: a listing without attributes takes the inode
// number, type and generation from the cookie index (layout 4) and gives
// the same answers as one with attributes, on whole and paged listings,
// after renames and hard links, and over cookie values written before
// layout 4 (bare names: the entry and, for WithGen, the inode are read).
func TestReadDirCookieEntries(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			tf := newTestFS(t, fsOpts{kind: kind})
			f := tf.FS
			var dir fs.Ino
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "d", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
				dir = a.Ino
				return err
			})
			mk := func(f *fs.FS, name string, typ fs.FileType) {
				do(t, f, func(ctx context.Context, tx *fs.Txn) error {
					_, _, err := tx.Create(ctx, dir, name, fs.CreateRequest{Type: typ, Mode: 0o644, Target: "t"})
					return err
				})
			}
			for i := 0; i < 12; i++ {
				mk(f, fmt.Sprintf("f%02d", i), []fs.FileType{fs.TypeRegular, fs.TypeDirectory, fs.TypeSymlink}[i%3])
			}
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				return tx.Rename(ctx, dir, "f00", dir, "renamed", fs.RenameFlags{})
			})
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				return tx.Rename(ctx, dir, "f01", dir, "f02", fs.RenameFlags{Exchange: true})
			})
			do(t, f, func(ctx context.Context, tx *fs.Txn) error {
				a, err := tx.Lookup(ctx, dir, "f03")
				if err != nil {
					return err
				}
				_, err = tx.Link(ctx, a.Ino, dir, "hardlink")
				return err
			})
			// compare lists dir every way and checks each against the
			// attributes.
			compare := func(f *fs.FS, wantGen bool, want int) {
				t.Helper()
				err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
					for _, limit := range []int{0, 1, 5} {
						for _, req := range []fs.ReadDirRequest{{WithAttr: true}, {WithGen: true}, {}} {
							var cookie uint64
							n := 0
							for {
								req.Cookie, req.Limit = cookie, limit
								ents, eof, err := tx.ReadDir(ctx, dir, req)
								if err != nil {
									return err
								}
								for _, e := range ents {
									a, err := tx.Lookup(ctx, dir, e.Name)
									if err != nil {
										return err
									}
									if e.Ino != a.Ino || e.Type != a.Type {
										return fmt.Errorf("%+v: entry %q: ino %d type %v, want %d %v", req, e.Name, e.Ino, e.Type, a.Ino, a.Type)
									}
									genSet := req.WithAttr || req.WithGen || wantGen
									if (genSet && e.Gen != a.Gen) || (e.Gen != 0 && e.Gen != a.Gen) {
										return fmt.Errorf("%+v: entry %q: gen %d, inode's %d", req, e.Name, e.Gen, a.Gen)
									}
									if (e.Attr != nil) != req.WithAttr {
										return fmt.Errorf("%+v: entry %q: attributes %v", req, e.Name, e.Attr)
									}
									cookie = e.Cookie
									n++
								}
								if eof {
									break
								}
							}
							if n != want {
								return fmt.Errorf("%+v limit %d: %d entries, want %d", req, limit, n, want)
							}
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			compare(f, true, 13)
			requireCheckClean(t, f)
			if err := fs.WriteLayout3ForTest(ctx, f); err != nil {
				t.Fatal(err)
			}
			f2 := sibling(t, tf, 0)
			compare(f2, false, 13)
			mk(f2, "new", fs.TypeRegular) // a layout-4 value among older ones
			compare(f2, false, 14)
			requireCheckClean(t, f2)
		})
	}
}
