package server_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/nfs4/server"
)

// TestInPlaceWritesConcurrent: four clients at once overwrite their own
// file with aligned 512 KiB WRITE payloads (written in place from the
// request record — an UNSTABLE WRITE alone —, or lent to a background
// write when another WRITE follows or the compound syncs before its
// reply, which may then run past the commit) in plain and transactional
// compounds, some of which fail
// after the WRITE (REMOVE on a file: NFS4ERR_NOTDIR): a plain one keeps
// the WRITE (the run is executed again without the failing operation), a
// transactional one keeps nothing. Each file must read back as the last
// data kept: a record buffer reused (by this connection or another)
// while a write still reads it would show up as another pattern.
func TestInPlaceWritesConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	reg.MustRegister(ts.eng.Metrics())
	const half = 512 << 10
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		c := ts.session(t, 1, fmt.Sprintf("inplace-%d", w))
		fh := writeFile(t, c, fmt.Sprintf("f%d", w), []byte("x"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := []byte("x")
			apply := func(off int, data []byte) { // what a kept WRITE makes of the file
				if n := off + len(data); n > len(want) {
					want = append(want, make([]byte, n-len(want))...)
				}
				copy(want[off:], data)
			}
			for i := range 24 {
				a := bytes.Repeat([]byte{byte(w*64 + i)}, half)
				b := bytes.Repeat([]byte{byte(w*64 + i + 32)}, half)
				var st nfsv4.Nfsstat4
				switch i % 4 {
				case 0: // one UNSTABLE WRITE, in place (twice: the second payload is aligned)
					for range 2 {
						w := write(anon, 0, a)
						w.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Stable = nfsv4.UNSTABLE4
						r, err := c.Compound(putfh(fh), w)
						if err != nil {
							errs <- err
							return
						}
						if st = r.Status; st != nfsv4.NFS4_OK {
							break
						}
					}
					apply(0, a)
				case 1: // two FILE_SYNC WRITEs: both lent, the last past its commit
					r, err := c.Compound(putfh(fh), write(anon, 0, a), write(anon, half, b))
					if err != nil {
						errs <- err
						return
					}
					st = r.Status
					apply(0, a)
					apply(half, b)
				case 2: // a WRITE, then a failing operation: the WRITE stays
					r, err := c.Compound(putfh(fh), write(anon, half, b), remove("nothing"))
					if err != nil {
						errs <- err
						return
					}
					if r.Status != nfsv4.NFS4ERR_NOTDIR {
						errs <- fmt.Errorf("client %d step %d: %v, want NOTDIR", w, i, r.Status)
						return
					}
					st = nfsv4.NFS4_OK
					apply(half, b)
				case 3: // the same in a transaction: nothing stays
					r, err := c.Txn(putfh(fh), write(anon, 0, a), remove("nothing"))
					if err != nil {
						errs <- err
						return
					}
					if r.Status == nfsv4.NFS4_OK {
						errs <- fmt.Errorf("client %d step %d: transaction committed", w, i)
						return
					}
					st = nfsv4.NFS4_OK
				}
				if st != nfsv4.NFS4_OK {
					errs <- fmt.Errorf("client %d step %d: %v", w, i, st)
					return
				}
				r, err := c.Compound(putfh(fh), read(anon, 0, 2*half))
				if err != nil {
					errs <- err
					return
				}
				got, _ := readData(t, r.Results[1])
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("client %d step %d: file differs from the WRITEs kept (%d bytes, want %d)", w, i, len(got), len(want))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	hit, _ := alignedWrites(t, reg)
	unstaged, lent := slicePuts(t, reg)
	t.Logf("aligned payloads %v, unstaged puts %v, lent %v", hit, unstaged, lent)
	if unstaged == 0 || lent == 0 {
		t.Errorf("unstaged %v, lent %v: the test did not write in place and lent", unstaged, lent)
	}
}
