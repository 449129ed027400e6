package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// BenchmarkOpenClose measures OPEN + CLOSE of one file while the server
// holds `others` opens of other files: with the opens indexed by file it
// does not grow with them (it scanned every state before). Run:
//
//	go test ./nfs4/internal/state -run XXX -bench OpenClose
func BenchmarkOpenClose(b *testing.B) {
	for _, others := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			ck := &clock{t: time.Unix(1000, 0)}
			m, err := New(Config{Clock: ck.now, Lease: time.Hour, Slots: 4})
			if err != nil {
				b.Fatal(err)
			}
			r, st := m.ExchangeID([]byte("bench"), [8]byte{1}, "p", false, 1)
			if st != OK {
				b.Fatal(st)
			}
			if _, st := m.CreateSession(r.ClientID, r.Seq, "p", ChannelAttrs{MaxRequests: 8, MaxOps: 8}); st != OK {
				b.Fatal(st)
			}
			c, _ := m.Client(r.ClientID)
			for i := 0; i < others; i++ {
				if _, _, st := m.Open(c, []byte("o"), uint64(1_000_000+i), nfsv4.OPEN4_SHARE_ACCESS_READ, 0); st != OK {
					b.Fatal(st)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id, _, st := m.Open(c, []byte("o"), 7, nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0)
				if st != OK {
					b.Fatal(st)
				}
				if _, st := m.Close(id, 1, 7); st != OK {
					b.Fatal(st)
				}
			}
		})
	}
}
