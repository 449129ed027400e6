//go:build linux

package fuse

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestLendReadBuffers checks that large WRITEs' request buffers are taken
// from go-fuse for their slice writes (bufLender): it fails when go-fuse's
// internals change so that the lender finds nothing to take, and it checks
// that what was written from lent buffers, by concurrent writers and with
// more writes than buffers may be out at once (so buffers go back to
// go-fuse and are read into again), reads back intact through another
// mount of the engine (from the slice files: 1 MiB slices are not kept in
// the memory tier; not from the writer's page cache).
func TestLendReadBuffers(t *testing.T) {
	e := newEnv(t, envOptions{group: true})
	a, ma := e.mount()
	b, _ := e.mount()
	if !ma.hugeBufs {
		t.Skip("the request buffers are not on huge pages here (TestHugeReadBuffers): nothing is lent")
	}
	if ma.lender == nil {
		t.Fatal("newBufLender found no go-fuse request pool to hook (go-fuse's internals changed?)")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const writers, perWriter = 4, 3 * maxLent
	before := lentBuffers.Load()
	want := make([][]byte, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		r := rand.New(rand.NewPCG(seed, uint64(w)))
		want[w] = make([]byte, perWriter<<20)
		for i := range want[w] {
			want[w][i] = byte(r.Uint32())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(a, fmt.Sprintf("w%d", w)))
			if err != nil {
				errs <- err
				return
			}
			for i := range perWriter {
				if _, err := f.Write(want[w][i<<20 : (i+1)<<20]); err != nil {
					errs <- err
					return
				}
			}
			errs <- f.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := lentBuffers.Load() - before
	t.Logf("%d of %d writes from lent request buffers", n, writers*perWriter)
	if n < int64(perWriter) {
		t.Fatalf("%d writes from lent request buffers, want most of %d", n, writers*perWriter)
	}
	check := func(dir string) {
		for w := range writers {
			got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%d", w)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want[w]) {
				for i := 0; i < len(want[w]); i += 1 << 20 {
					if i >= len(got) || !bytes.Equal(got[i:min(i+1<<20, len(got))], want[w][i:i+1<<20]) {
						t.Fatalf("%s: writer %d: MiB %d reads back different (%d bytes read)", dir, w, i>>20, len(got))
					}
				}
			}
		}
	}
	check(b)
}
