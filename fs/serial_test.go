package fs_test

// Serializability tests in the style of TC-NFS §4: concurrent writers each
// change a whole set of files and directories in one transaction while
// readers check that they see all of a transaction or none of it, never a
// mix; concurrent whole-file writers never produce a mixed file.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txnfs/txnfs/fs"
)

// runConcurrently runs writers and readers; readers loop until every
// writer has finished (no sleeps), and each reader runs at least once
// after the last writer so it sees the final state too.
func runConcurrently(t *testing.T, writers []func() error, readers []func() error) {
	t.Helper()
	var wg sync.WaitGroup
	var done atomic.Bool
	errs := make(chan error, len(writers)+len(readers))
	var wwg sync.WaitGroup
	for _, w := range writers {
		wg.Add(1)
		wwg.Add(1)
		go func() {
			defer wg.Done()
			defer wwg.Done()
			if err := w(); err != nil {
				errs <- err
			}
		}()
	}
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				last := done.Load()
				if err := r(); err != nil {
					errs <- err
					return
				}
				if last {
					return
				}
			}
		}()
	}
	wwg.Wait()
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func mustLookup(ctx context.Context, tx *fs.Txn, p string) (fs.Attr, error) {
	a, err := tx.LookupPath(ctx, p)
	if err != nil {
		return a, fmt.Errorf("lookup %s: %w", p, err)
	}
	return a, nil
}

// overwrite replaces a file's content.
func overwrite(ctx context.Context, tx *fs.Txn, ino fs.Ino, data []byte) error {
	if _, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: u64p(0)}); err != nil {
		return err
	}
	return tx.Write(ctx, ino, 0, data)
}

func readFile(ctx context.Context, tx *fs.Txn, ino fs.Ino) ([]byte, error) {
	a, err := tx.GetAttr(ctx, ino)
	if err != nil {
		return nil, err
	}
	return readAll(ctx, tx, ino, a.Size)
}

// TestSerialStampedSets: K writers repeatedly stamp a set of M files and
// a marker directory with (writer, generation) in one transaction each;
// readers in read-only transactions must always find one stamp on all.
func TestSerialStampedSets(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			f := newTestFS(t, fsOpts{kind: kind, clock: nil, inlineMax: 8})
			const files = 6
			writersN, gens, readersN := 3, scale(15, 100), 2
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				d, _, err := tx.Create(ctx, fs.RootIno, "set", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
				if err != nil {
					return err
				}
				for i := 0; i < files; i++ {
					a, _, err := tx.Create(ctx, d.Ino, fmt.Sprintf("f%d", i), fs.CreateRequest{Type: fs.TypeRegular})
					if err != nil {
						return err
					}
					if err := tx.Write(ctx, a.Ino, 0, []byte("init")); err != nil {
						return err
					}
				}
				_, _, err = tx.Create(ctx, d.Ino, "stamp-init", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
				return err
			})
			var writers, readers []func() error
			for w := 0; w < writersN; w++ {
				writers = append(writers, func() error {
					for g := 0; g < gens; g++ {
						stamp := fmt.Sprintf("w%dg%d", w, g)
						err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
							d, err := mustLookup(ctx, tx, "/set")
							if err != nil {
								return err
							}
							ents, eof, err := tx.ReadDir(ctx, d.Ino, fs.ReadDirRequest{})
							if err != nil || !eof {
								return fmt.Errorf("readdir: %v eof=%v", err, eof)
							}
							for _, e := range ents {
								if strings.HasPrefix(e.Name, "stamp-") {
									if err := tx.Rmdir(ctx, d.Ino, e.Name); err != nil {
										return err
									}
								}
							}
							for i := 0; i < files; i++ {
								a, err := tx.Lookup(ctx, d.Ino, fmt.Sprintf("f%d", i))
								if err != nil {
									return err
								}
								// Different lengths per stamp so a torn
								// size shows too.
								data := []byte(strings.Repeat(stamp+";", 1+(g+w)%5*20))
								if err := overwrite(ctx, tx, a.Ino, data); err != nil {
									return err
								}
							}
							_, _, err = tx.Create(ctx, d.Ino, "stamp-"+stamp, fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
							return err
						})
						if err != nil {
							return fmt.Errorf("writer %d gen %d: %w", w, g, err)
						}
					}
					return nil
				})
			}
			var reads atomic.Int64
			for r := 0; r < readersN; r++ {
				readers = append(readers, func() error {
					return f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
						d, err := mustLookup(ctx, tx, "/set")
						if err != nil {
							return err
						}
						ents, err := readDirAll(ctx, tx, d.Ino, 2)
						if err != nil {
							return err
						}
						var stamps []string
						for _, e := range ents {
							if s, ok := strings.CutPrefix(e.Name, "stamp-"); ok {
								stamps = append(stamps, s)
							}
						}
						if len(stamps) != 1 {
							return fmt.Errorf("reader sees stamp directories %v", stamps)
						}
						for i := 0; i < files; i++ {
							a, err := tx.Lookup(ctx, d.Ino, fmt.Sprintf("f%d", i))
							if err != nil {
								return err
							}
							b, err := readFile(ctx, tx, a.Ino)
							if err != nil {
								return err
							}
							got := strings.SplitN(string(b), ";", 2)[0]
							if got != stamps[0] || (got != "init" && strings.Trim(string(b), stamps[0]+";") != "") {
								return fmt.Errorf("reader: stamp dir %s but f%d holds %.40q (%d bytes): a mix of transactions",
									stamps[0], i, b, len(b))
							}
						}
						reads.Add(1)
						return nil
					})
				})
			}
			runConcurrently(t, writers, readers)
			t.Logf("%d consistent reads", reads.Load())
			requireCheckClean(t, f.FS)
		})
	}
}

// TestSerialCreateRemoveSets is TC-NFS's first serializability test: a
// writer creates a set of files and directories in one transaction and
// removes them in another, over and over; readers must see all or none.
func TestSerialCreateRemoveSets(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	const n = 8
	rounds := scale(30, 300)
	names := func(i int) (dir, name string) { return fmt.Sprintf("/d%d", i%3), fmt.Sprintf("n%d", i) }
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		for i := 0; i < 3; i++ {
			if _, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprintf("d%d", i), fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	})
	writer := func() error {
		for r := 0; r < rounds; r++ {
			err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				for i := 0; i < n; i++ {
					dp, name := names(i)
					d, err := mustLookup(ctx, tx, dp)
					if err != nil {
						return err
					}
					typ := fs.TypeRegular
					if i%2 == 1 {
						typ = fs.TypeDirectory
					}
					if _, _, err := tx.Create(ctx, d.Ino, name, fs.CreateRequest{Type: typ, Mode: 0o755, Exclusive: true}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("create round %d: %w", r, err)
			}
			err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				for i := 0; i < n; i++ {
					dp, name := names(i)
					d, err := mustLookup(ctx, tx, dp)
					if err != nil {
						return err
					}
					if err := tx.Remove(ctx, d.Ino, name); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("remove round %d: %w", r, err)
			}
		}
		return nil
	}
	reader := func() error {
		return f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			found := 0
			for i := 0; i < n; i++ {
				dp, name := names(i)
				_, err := tx.LookupPath(ctx, dp+"/"+name)
				switch {
				case err == nil:
					found++
				case !errors.Is(err, fs.ErrNotExist):
					return err
				}
			}
			if found != 0 && found != n {
				return fmt.Errorf("reader sees %d of %d entries of one transaction", found, n)
			}
			return nil
		})
	}
	runConcurrently(t, []func() error{writer}, []func() error{reader, reader})
	requireCheckClean(t, f.FS)
}

// TestSerialWholeFileWriters is TC-NFS's second serializability test:
// writers each overwrite a 1 MiB file with their own byte (in several
// writes, in one transaction); readers, reading in chunks in one read-only
// transaction, never see a mixture.
func TestSerialWholeFileWriters(t *testing.T) {
	for _, inline := range []int{-1, fs.DefaultInlineMax} {
		t.Run(fmt.Sprintf("inline=%d", inline), func(t *testing.T) {
			ctx := context.Background()
			f := newTestFS(t, fsOpts{inlineMax: inline})
			const size = 1 << 20
			var ino fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "f", fs.CreateRequest{Type: fs.TypeRegular})
				ino = a.Ino
				if err != nil {
					return err
				}
				return tx.Write(ctx, ino, 0, bytes.Repeat([]byte{'0'}, size))
			})
			iters := scale(4, 30)
			var writers []func() error
			for w := 0; w < 3; w++ {
				b := byte('a' + w)
				writers = append(writers, func() error {
					for i := 0; i < iters; i++ {
						err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
							// Different chunkings so pieces of slices overlap.
							chunk := []int{size, 256 << 10, 4096 * 3, 1000}[(i+w)%4]
							if chunk == 1000 && i%2 == 0 {
								// Mostly overwrite, sometimes rewrite from empty.
								if _, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: u64p(0)}); err != nil {
									return err
								}
								chunk = 64 << 10
							}
							for off := 0; off < size; off += chunk {
								if err := tx.Write(ctx, ino, uint64(off), bytes.Repeat([]byte{b}, min(chunk, size-off))); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							return err
						}
					}
					return nil
				})
			}
			reader := func() error {
				return f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
					buf := make([]byte, 100_000)
					var first byte
					var total int
					for off := 0; ; {
						n, eof, err := tx.Read(ctx, ino, uint64(off), buf)
						if err != nil {
							return err
						}
						for i, c := range buf[:n] {
							if off == 0 && i == 0 {
								first = c
							}
							if c != first {
								return fmt.Errorf("mixed file: byte %d is %q, byte 0 is %q", off+i, c, first)
							}
						}
						off += n
						total = off
						if eof {
							break
						}
					}
					if total != size {
						return fmt.Errorf("file has %d bytes, want %d", total, size)
					}
					return nil
				})
			}
			runConcurrently(t, writers, []func() error{reader, reader})
			requireCheckClean(t, f.FS)
		})
	}
}

// TestSerialIncrements: concurrent read-modify-write increments of a
// counter file in Do lose no update.
func TestSerialIncrements(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{kind: storeMem})
	var ino fs.Ino
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "counter", fs.CreateRequest{Type: fs.TypeRegular})
		ino = a.Ino
		if err != nil {
			return err
		}
		return tx.Write(ctx, ino, 0, []byte("0"))
	})
	workers, each := 4, scale(25, 250)
	var explicitOK atomic.Int64
	var ws []func() error
	for w := 0; w < workers; w++ {
		ws = append(ws, func() error {
			incr := func(tx *fs.Txn) error {
				b, err := readFile(ctx, tx, ino)
				if err != nil {
					return err
				}
				n, err := strconv.Atoi(string(b))
				if err != nil {
					return fmt.Errorf("counter holds %q", b)
				}
				return overwrite(ctx, tx, ino, []byte(strconv.Itoa(n+1)))
			}
			for i := 0; i < each; i++ {
				if w%2 == 0 {
					if err := f.Do(ctx, fs.RootCred, incr); err != nil {
						return err
					}
					continue
				}
				// Explicit transactions: the caller retries ErrConflict.
				for {
					tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
					if err != nil {
						return err
					}
					if err := incr(tx); err != nil {
						tx.Abort()
						return err
					}
					err = tx.Commit(ctx)
					if err == nil {
						explicitOK.Add(1)
						break
					}
					if !errors.Is(err, fs.ErrConflict) {
						return err
					}
				}
			}
			return nil
		})
	}
	runConcurrently(t, ws, nil)
	var got []byte
	f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) { got, err = readFile(ctx, tx, ino); return err })
	if want := strconv.Itoa(workers * each); string(got) != want {
		t.Fatalf("counter = %s, want %s: lost updates", got, want)
	}
}

// TestSerialWriteSkew: each transaction reads two counters and decrements
// one of them only if their sum stays >= 0. Snapshot isolation would let
// the sum go negative (write skew); serializability must not.
func TestSerialWriteSkew(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	var x, y fs.Ino
	const start = 20
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		for i, p := range []*fs.Ino{&x, &y} {
			a, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprintf("c%d", i), fs.CreateRequest{Type: fs.TypeRegular})
			if err != nil {
				return err
			}
			*p = a.Ino
			if err := tx.Write(ctx, a.Ino, 0, []byte(strconv.Itoa(start/2))); err != nil {
				return err
			}
		}
		return nil
	})
	readInt := func(tx *fs.Txn, ino fs.Ino) (int, error) {
		b, err := readFile(ctx, tx, ino)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(b))
	}
	var ws []func() error
	for w := 0; w < 4; w++ {
		ws = append(ws, func() error {
			for i := 0; i < start; i++ {
				err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
					a, err := readInt(tx, x)
					if err != nil {
						return err
					}
					b, err := readInt(tx, y)
					if err != nil {
						return err
					}
					if a+b < 1 {
						return nil
					}
					target, v := x, a
					if (w+i)%2 == 1 {
						target, v = y, b
					}
					return overwrite(ctx, tx, target, []byte(strconv.Itoa(v-1)))
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	reader := func() error {
		return f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			a, err := readInt(tx, x)
			if err != nil {
				return err
			}
			b, err := readInt(tx, y)
			if err != nil {
				return err
			}
			if a+b < 0 {
				return fmt.Errorf("write skew: x=%d y=%d", a, b)
			}
			return nil
		})
	}
	runConcurrently(t, ws, []func() error{reader})
	if err := reader(); err != nil {
		t.Fatal(err)
	}
	var a, b int
	f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
		if a, err = readInt(tx, x); err != nil {
			return err
		}
		b, err = readInt(tx, y)
		return err
	})
	if a+b != 0 {
		t.Fatalf("after %d decrements of %d: x+y = %d, want 0", 4*start, start, a+b)
	}
}

// TestSerialRenameShuffle: files move between directories by concurrent
// renames (and exchanges); readers always count every file exactly once.
func TestSerialRenameShuffle(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	const nfiles, ndirs = 10, 3
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		for d := 0; d < ndirs; d++ {
			a, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprintf("d%d", d), fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
			if err != nil {
				return err
			}
			for i := d; i < nfiles; i += ndirs {
				if _, _, err := tx.Create(ctx, a.Ino, fmt.Sprintf("f%d", i), fs.CreateRequest{Type: fs.TypeRegular}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	var ws []func() error
	for w := 0; w < 3; w++ {
		rng := rand.New(rand.NewPCG(uint64(w), 1))
		ws = append(ws, func() error {
			for i := 0; i < scale(40, 400); i++ {
				fi := rng.IntN(nfiles)
				to := rng.IntN(ndirs)
				exchange := rng.IntN(4) == 0
				err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
					name := fmt.Sprintf("f%d", fi)
					for from := 0; from < ndirs; from++ {
						src, err := mustLookup(ctx, tx, fmt.Sprintf("/d%d", from))
						if err != nil {
							return err
						}
						if _, err := tx.Lookup(ctx, src.Ino, name); errors.Is(err, fs.ErrNotExist) {
							continue
						} else if err != nil {
							return err
						}
						dst, err := mustLookup(ctx, tx, fmt.Sprintf("/d%d", to))
						if err != nil {
							return err
						}
						if exchange {
							// Swap directories: d<from> <-> d<to>.
							return tx.Rename(ctx, fs.RootIno, fmt.Sprintf("d%d", from), fs.RootIno, fmt.Sprintf("d%d", to), fs.RenameFlags{Exchange: true})
						}
						return tx.Rename(ctx, src.Ino, name, dst.Ino, name, fs.RenameFlags{NoReplace: from != to})
					}
					return fmt.Errorf("file %s is nowhere", name)
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	reader := func() error {
		return f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			var all []string
			for d := 0; d < ndirs; d++ {
				a, err := mustLookup(ctx, tx, fmt.Sprintf("/d%d", d))
				if err != nil {
					return err
				}
				ents, err := readDirAll(ctx, tx, a.Ino, 3)
				if err != nil {
					return err
				}
				for _, e := range ents {
					all = append(all, e.Name)
				}
			}
			sort.Strings(all)
			if len(all) != nfiles {
				return fmt.Errorf("reader counts %d files, want %d: %v", len(all), nfiles, all)
			}
			for i := 1; i < len(all); i++ {
				if all[i] == all[i-1] {
					return fmt.Errorf("file %s seen twice", all[i])
				}
			}
			return nil
		})
	}
	runConcurrently(t, ws, []func() error{reader, reader})
	requireCheckClean(t, f.FS)
}

// appendRecord builds a self-describing record: length, crc, writer,
// sequence, payload.
func appendRecord(w, i int, rng *rand.Rand) []byte {
	payload := make([]byte, rng.IntN(200))
	for k := range payload {
		payload[k] = byte(w*31 + i + k)
	}
	rec := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	rec = binary.BigEndian.AppendUint32(rec, crc32.ChecksumIEEE(payload))
	rec = binary.BigEndian.AppendUint32(rec, uint32(w))
	rec = binary.BigEndian.AppendUint32(rec, uint32(i))
	return append(rec, payload...)
}

// TestSerialAppends: concurrent appenders through FS.Append (group
// commit) and Txn.Append (in Do) never overwrite each other: the file's
// length is the sum of the records, each record is intact, found exactly
// once, at the offset its append returned.
func TestSerialAppends(t *testing.T) {
	for _, kind := range []storeKind{storeMem, storePebble} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := context.Background()
			f := newTestFS(t, fsOpts{kind: kind})
			var ino fs.Ino
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				a, _, err := tx.Create(ctx, fs.RootIno, "log", fs.CreateRequest{Type: fs.TypeRegular})
				ino = a.Ino
				return err
			})
			const writers = 6
			each := scale(60, 600)
			type placed struct {
				off uint64
				rec []byte
			}
			results := make([][]placed, writers)
			var ws []func() error
			for w := 0; w < writers; w++ {
				rng := rand.New(rand.NewPCG(uint64(w), 2))
				ws = append(ws, func() error {
					for i := 0; i < each; i++ {
						rec := appendRecord(w, i, rng)
						var off uint64
						var err error
						if w%3 == 2 {
							err = f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
								off, err = tx.Append(ctx, ino, rec)
								return err
							})
						} else {
							off, err = f.Append(ctx, fs.RootCred, ino, rec)
						}
						if err != nil {
							return fmt.Errorf("append %d/%d: %w", w, i, err)
						}
						results[w] = append(results[w], placed{off, rec})
					}
					return nil
				})
			}
			runConcurrently(t, ws, nil)
			var data []byte
			f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) { data, err = readFile(ctx, tx, ino); return err })
			var total int
			byOff := map[uint64][]byte{}
			for _, rs := range results {
				for _, p := range rs {
					total += len(p.rec)
					if _, dup := byOff[p.off]; dup {
						t.Fatalf("two appends returned offset %d", p.off)
					}
					byOff[p.off] = p.rec
				}
			}
			if len(data) != total {
				t.Fatalf("file has %d bytes, appended %d", len(data), total)
			}
			seen := map[[2]uint32]bool{}
			for off := 0; off < len(data); {
				if len(data)-off < 16 {
					t.Fatalf("truncated record header at %d", off)
				}
				n := int(binary.BigEndian.Uint32(data[off:]))
				crc := binary.BigEndian.Uint32(data[off+4:])
				id := [2]uint32{binary.BigEndian.Uint32(data[off+8:]), binary.BigEndian.Uint32(data[off+12:])}
				if off+16+n > len(data) || crc32.ChecksumIEEE(data[off+16:off+16+n]) != crc {
					t.Fatalf("corrupt record at %d (writer %d seq %d)", off, id[0], id[1])
				}
				if seen[id] {
					t.Fatalf("record %v found twice", id)
				}
				seen[id] = true
				if rec, ok := byOff[uint64(off)]; !ok || !bytes.Equal(rec, data[off:off+16+n]) {
					t.Fatalf("record at %d is not the one whose append returned %d", off, off)
				}
				off += 16 + n
			}
			if len(seen) != writers*each {
				t.Fatalf("found %d records, appended %d", len(seen), writers*each)
			}
			requireCheckClean(t, f.FS)
		})
	}
}

// TestSerialNoSpuriousAborts: concurrent explicit transactions that
// conflict in the kv store (they all update the same directory) but whose
// operations would return the same results when replayed must all commit:
// WTF §2.6's zero spurious aborts.
func TestSerialNoSpuriousAborts(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	var dir fs.Ino
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "shared", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
		dir = a.Ino
		return err
	})
	var ws []func() error
	var conflicts atomic.Int64
	for w := 0; w < 4; w++ {
		ws = append(ws, func() error {
			for i := 0; i < scale(30, 300); i++ {
				tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
				if err != nil {
					return err
				}
				a, _, err := tx.Create(ctx, dir, fmt.Sprintf("w%d-%d", w, i), fs.CreateRequest{Type: fs.TypeRegular, Exclusive: true})
				if err != nil {
					return err
				}
				if err := tx.Write(ctx, a.Ino, 0, pattern(byte(w), 5000)); err != nil {
					return err
				}
				if _, err := tx.Append(ctx, a.Ino, []byte("tail")); err != nil {
					return err
				}
				if err := tx.Commit(ctx); err != nil {
					conflicts.Add(1)
					return fmt.Errorf("worker %d txn %d: %w (spurious abort: no replayed result can differ)", w, i, err)
				}
			}
			return nil
		})
	}
	runConcurrently(t, ws, nil)
	requireCheckClean(t, f.FS)
}

// TestSerialReadDirPaging lists a directory a page per transaction (as an
// NFS client does, READDIR by READDIR) while other transactions add,
// remove and rename other entries: every entry present and untouched
// throughout is listed exactly once. (An entry removed and re-added, or
// renamed, during the listing may be missed or listed twice, as POSIX
// readdir allows.)
func TestSerialReadDirPaging(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	var dir fs.Ino
	const stable = 20
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "d", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
		dir = a.Ino
		if err != nil {
			return err
		}
		for i := 0; i < stable; i++ {
			if _, _, err := tx.Create(ctx, dir, fmt.Sprintf("stable-%02d", i), fs.CreateRequest{Type: fs.TypeRegular}); err != nil {
				return err
			}
			if _, _, err := tx.Create(ctx, dir, fmt.Sprintf("mv-%02d-a", i), fs.CreateRequest{Type: fs.TypeRegular}); err != nil {
				return err
			}
		}
		return nil
	})
	churn := func() error {
		rng := rand.New(rand.NewPCG(7, 7))
		for i := 0; i < scale(200, 2000); i++ {
			name := fmt.Sprintf("tmp-%d", rng.IntN(30))
			mv := rng.IntN(stable)
			err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				if rng.IntN(3) == 0 {
					a, b := fmt.Sprintf("mv-%02d-a", mv), fmt.Sprintf("mv-%02d-b", mv)
					if err := tx.Rename(ctx, dir, a, dir, b, fs.RenameFlags{}); errors.Is(err, fs.ErrNotExist) {
						return tx.Rename(ctx, dir, b, dir, a, fs.RenameFlags{})
					} else {
						return err
					}
				}
				err := tx.Remove(ctx, dir, name)
				if errors.Is(err, fs.ErrNotExist) {
					_, _, err = tx.Create(ctx, dir, name, fs.CreateRequest{Type: fs.TypeRegular})
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	lister := func() error {
		seen := map[string]int{}
		var cookie uint64
		for {
			var ents []fs.DirEntry
			var eof bool
			err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
				ents, eof, err = tx.ReadDir(ctx, dir, fs.ReadDirRequest{Cookie: cookie, Limit: 3})
				return err
			})
			if err != nil {
				return err
			}
			for _, e := range ents {
				if e.Cookie <= cookie {
					return fmt.Errorf("cookie %d after cookie %d", e.Cookie, cookie)
				}
				seen[e.Name]++
				cookie = e.Cookie
			}
			if eof {
				break
			}
		}
		for i := 0; i < stable; i++ {
			if n := seen[fmt.Sprintf("stable-%02d", i)]; n != 1 {
				return fmt.Errorf("stable-%02d, untouched throughout, listed %d times", i, n)
			}
		}
		return nil
	}
	runConcurrently(t, []func() error{churn}, []func() error{lister, lister})
}

// TestSerialAppendTruncate: group-committed appends racing with
// truncations never land at a stale offset: the file always parses as
// whole records, each at the offset its append returned.
func TestSerialAppendTruncate(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	var ino fs.Ino
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		a, _, err := tx.Create(ctx, fs.RootIno, "log", fs.CreateRequest{Type: fs.TypeRegular})
		ino = a.Ino
		return err
	})
	type key [2]uint32
	var mu sync.Mutex
	offsets := map[key]uint64{}
	var ws []func() error
	for w := 0; w < 4; w++ {
		rng := rand.New(rand.NewPCG(uint64(w), 9))
		ws = append(ws, func() error {
			for i := 0; i < scale(100, 1000); i++ {
				rec := appendRecord(w, i, rng)
				off, err := f.Append(ctx, fs.RootCred, ino, rec)
				if err != nil {
					return err
				}
				mu.Lock()
				offsets[key{uint32(w), uint32(i)}] = off
				mu.Unlock()
			}
			return nil
		})
	}
	ws = append(ws, func() error {
		for i := 0; i < scale(20, 200); i++ {
			if err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				_, err := tx.SetAttr(ctx, ino, fs.SetAttr{Size: u64p(0)})
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	})
	parse := func() error {
		return f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			data, err := readFile(ctx, tx, ino)
			if err != nil {
				return err
			}
			for off := 0; off < len(data); {
				if len(data)-off < 16 {
					return fmt.Errorf("torn record header at %d of %d", off, len(data))
				}
				n := int(binary.BigEndian.Uint32(data[off:]))
				if off+16+n > len(data) || crc32.ChecksumIEEE(data[off+16:off+16+n]) != binary.BigEndian.Uint32(data[off+4:]) {
					return fmt.Errorf("torn or overlapping record at %d", off)
				}
				off += 16 + n
			}
			return nil
		})
	}
	runConcurrently(t, ws, []func() error{parse})
	var data []byte
	f.View(ctx, fs.RootCred, func(tx *fs.Txn) (err error) { data, err = readFile(ctx, tx, ino); return err })
	for off := 0; off < len(data); {
		n := int(binary.BigEndian.Uint32(data[off:]))
		k := key{binary.BigEndian.Uint32(data[off+8:]), binary.BigEndian.Uint32(data[off+12:])}
		if got, ok := offsets[k]; !ok || got != uint64(off) {
			t.Fatalf("record %v is at %d, its append returned %d", k, off, got)
		}
		off += 16 + n
	}
	requireCheckClean(t, f.FS)
}
