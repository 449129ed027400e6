package server_test

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// BenchmarkOps measures compounds per second over loopback for the
// workloads of issue 3, with 1 and 16 clients, as plain and transactional
// compounds. Run: go test ./nfs4/server -run XXX -bench Ops -benchtime 2s
func BenchmarkOps(b *testing.B) {
	small := bytes.Repeat([]byte("x"), 4<<10)
	big := bytes.Repeat([]byte("y"), 1<<20)
	type workload struct {
		name  string
		bytes int
		setup func(b *testing.B, c *testclient.Client)
		ops   func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4
	}
	file := func(id, i int64) string { return fmt.Sprintf("f-%d-%d", id, i) }
	loads := []workload{
		{name: "GETATTR", ops: func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4 {
			return []nfsv4.NfsArgop4{putroot(), getattr(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_OWNER)}
		}},
		{name: "LOOKUP", setup: func(b *testing.B, c *testclient.Client) { writeFile(b, c, "small", small) },
			ops: func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4 {
				return []nfsv4.NfsArgop4{putroot(), lookup("small"), getfh()}
			}},
		{name: "OPEN+READ+CLOSE/size=4KiB", bytes: len(small), setup: func(b *testing.B, c *testclient.Client) { writeFile(b, c, "small", small) },
			ops: func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4 {
				return []nfsv4.NfsArgop4{putroot(), openWith(c, "small", "r", nfsv4.OPEN4_SHARE_ACCESS_READ, 0, nil), read(current, 0, 4096), closeOp(current)}
			}},
		{name: "CREATE+WRITE+CLOSE/size=4KiB", bytes: len(small), ops: func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4 {
			return []nfsv4.NfsArgop4{putroot(), openCreate(c, file(id, i)), write(current, 0, small), closeOp(current)}
		}},
		// Each client overwrites its own file, as in the TC-NFS write
		// matrix (transactions on one shared file would truly conflict).
		{name: "WRITE/size=1MiB", bytes: len(big), setup: func(b *testing.B, c *testclient.Client) {
			for id := 0; id < 16; id++ {
				writeFile(b, c, fmt.Sprintf("big-%d", id), nil)
			}
		}, ops: func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4 {
			return []nfsv4.NfsArgop4{putroot(), lookup(fmt.Sprintf("big-%d", id)), write(anon, 0, big)}
		}},
		{name: "READ/size=1MiB", bytes: len(big), setup: func(b *testing.B, c *testclient.Client) { writeFile(b, c, "big", big) },
			ops: func(c *testclient.Client, id, i int64) []nfsv4.NfsArgop4 {
				return []nfsv4.NfsArgop4{putroot(), lookup("big"), read(anon, 0, 1<<20)}
			}},
	}
	for _, w := range loads {
		for _, clients := range []int{1, 16} {
			for _, txn := range []bool{false, true} {
				b.Run(fmt.Sprintf("op=%s/clients=%d/txn=%v", w.name, clients, txn), func(b *testing.B) {
					ts := startServer(b)
					cs := make([]*testclient.Client, clients)
					for i := range cs {
						cs[i] = ts.session(b, 1, fmt.Sprintf("bench-%d", i))
					}
					if w.setup != nil {
						w.setup(b, cs[0])
					}
					b.ReportAllocs()
					if w.bytes > 0 {
						b.SetBytes(int64(w.bytes))
					}
					var next atomic.Int64
					var wg sync.WaitGroup
					var failed atomic.Value
					b.ResetTimer()
					for id, c := range cs {
						wg.Add(1)
						go func(id int64, c *testclient.Client) {
							defer wg.Done()
							for {
								i := next.Add(1)
								if i > int64(b.N) {
									return
								}
								var rep *testclient.Reply
								var err error
								if txn {
									rep, err = c.Txn(w.ops(c, id, i)...)
								} else {
									rep, err = c.Compound(w.ops(c, id, i)...)
								}
								if err != nil || rep.Status != nfsv4.NFS4_OK {
									failed.Store(fmt.Sprintf("%v %+v", err, rep))
									return
								}
							}
						}(int64(id), c)
					}
					wg.Wait()
					b.StopTimer()
					if f := failed.Load(); f != nil {
						b.Fatal(f)
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "compounds/s")
				})
			}
		}
	}
}
