package rpc

import (
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// TestReleaseAfterWaiting: a request that arrived while the call before
// it ran without releasing the connection (the client had sent one call
// at a time so far) waited for that call to end; the client now has two
// calls in flight, so that request's Release must let the next request be
// read at once. Otherwise a client keeping two calls in flight, each sent
// a little after the other, has every call wait for the one before it to
// end, forever (nothing else marks the connection as overlapping: each
// request is read alone, after the previous call ended).
func TestReleaseAfterWaiting(t *testing.T) {
	c, s := serveStepper(t)
	c.Write(call(1, 98, rpcv2.OpaqueAuth{}, nil))
	<-s.at                                        // Release found nothing waiting: holds the connection
	c.Write(call(2, 98, rpcv2.OpaqueAuth{}, nil)) // waits in the socket until call 1 ends
	noReplyYet(t, c, "call 2 behind call 1")
	s.done <- struct{}{}
	wantReply(t, c, 1, "call 1")
	<-s.at // call 2 runs, past its Release (it waited: the client overlaps calls)
	c.Write(call(3, 1, rpcv2.OpaqueAuth{}, nil))
	wantReply(t, c, 3, "call 3 (fast, read while call 2 runs)")
	s.done <- struct{}{}
	wantReply(t, c, 2, "call 2")
}

// BenchmarkTwoInFlight: a client that keeps two calls in flight, each
// sent 200 µs (up to a timer tick) after a reply, as two threads with a
// little work between their calls, of a handler that releases and takes
// 5 ms. Once the client is seen to overlap, two calls run at a time
// (about 3 ms a call); while it is not, every call waits for the one
// before it (5 ms: no request is ever buffered behind the one read, so
// nothing else marks the connection).
func BenchmarkTwoInFlight(b *testing.B) {
	c := serveAndDial(b, Config{Handler: echo{}})
	send := func(xid uint32) { c.Write(call(xid, 94, rpcv2.OpaqueAuth{}, nil)) }
	b.ResetTimer()
	send(1)
	time.Sleep(200 * time.Microsecond) // the first call runs
	sent := uint32(1)
	if b.N > 1 {
		send(2)
		sent = 2
	}
	for range b.N {
		readReply(b, c)
		if int(sent) < b.N {
			time.Sleep(200 * time.Microsecond)
			sent++
			send(sent)
		}
	}
}
