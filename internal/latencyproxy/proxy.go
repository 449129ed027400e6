// Package latencyproxy is a userspace TCP proxy that delays traffic to
// emulate a network round-trip time on loopback (this machine has no
// netem). Each direction delays every chunk it forwards by half the RTT,
// preserving order, so a request/reply exchange takes RTT longer; bytes are
// not rate-limited. Delays are kept with nanosleep(2) on a dedicated
// thread with 1 µs timer slack, so sub-millisecond RTTs (0.2 ms) are
// accurate to some tens of microseconds without burning CPU.
//
// Toxiproxy's latency toxic has millisecond granularity and adds jitter
// from its per-chunk goroutine hand-offs; vNFS's lowest RTT (0.2 ms)
// needs finer control, hence this small proxy.
package latencyproxy

import (
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from a loopback listener to a target.
type Proxy struct {
	target string
	l      net.Listener
	delay  atomic.Int64 // one-way, nanoseconds

	// dropReply counts armed DropNextReply calls.
	dropReply atomic.Int64
	// down: SetDown(true) is in effect.
	down atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// New starts a proxy to target with the given round-trip time.
func New(target string, rtt time.Duration) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, l: l, conns: map[net.Conn]struct{}{}}
	p.SetRTT(rtt)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetRTT changes the added round-trip time (for new data).
func (p *Proxy) SetRTT(rtt time.Duration) { p.delay.Store(int64(rtt / 2)) }

// RTT returns the added round-trip time.
func (p *Proxy) RTT() time.Duration { return time.Duration(2 * p.delay.Load()) }

// DropConns closes every proxied connection (clients see a reset).
func (p *Proxy) DropConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// SetDown emulates an unreachable server: while down, every proxied
// connection is closed and new ones are closed as soon as they are
// accepted (clients see a reset); SetDown(false) ends the outage.
func (p *Proxy) SetDown(down bool) {
	p.down.Store(down)
	if down {
		p.DropConns()
	}
}

// DropNextReply arms the proxy to drop the next bytes it receives from
// the target (a reply) instead of forwarding them, and to close that
// connection: the target has processed the request, the client never
// sees the answer and finds its connection reset. Tests use it to check
// retransmission after a lost reply. Each call drops one reply.
func (p *Proxy) DropNextReply() { p.dropReply.Add(1) }

// takeDrop consumes one armed DropNextReply.
func (p *Proxy) takeDrop() bool {
	for {
		v := p.dropReply.Load()
		if v <= 0 {
			return false
		}
		if p.dropReply.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// Close stops the proxy and closes all connections.
func (p *Proxy) Close() error {
	err := p.l.Close()
	p.DropConns()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		for _, x := range []net.Conn{c, s} {
			if tc, ok := x.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			p.track(x, true)
		}
		pr := &pair{c: c, s: s}
		pr.open.Store(2)
		p.wg.Add(2)
		go p.pipe(pr, c, s, false)
		go p.pipe(pr, s, c, true)
	}
}

// pair is a proxied connection: the client's and the target's side. Each
// direction ends on its own: an end of stream (FIN) is passed on as a
// half-close, so the other direction keeps flowing (a client that shuts
// down its sending side still gets its replies); any other error closes
// both sides. Both are closed once both directions have ended.
type pair struct {
	c, s net.Conn
	open atomic.Int32 // directions still forwarding
}

// ended is called by each direction when it stops.
func (pr *pair) ended(p *Proxy) {
	if pr.open.Add(-1) == 0 {
		for _, x := range []net.Conn{pr.c, pr.s} {
			x.Close()
			p.track(x, false)
		}
	}
}

type chunk struct {
	data []byte
	due  time.Time
	buf  *[pipeBuf]byte // data's buffer, to reuse; nil for a copy
}

const (
	// pipeBuf is the size of the buffers a pipe reads into.
	pipeBuf = 256 << 10
	// pipeKeep is how many written buffers a pipe keeps for reuse.
	pipeKeep = 8
	// pipeCopyMax: chunks up to this size are copied out of the read
	// buffer (an allocation of their size, not zeroed, and a copy cost
	// less than a fresh zeroed buffer when many small ones are in
	// flight); larger ones are queued in it.
	pipeCopyMax = 32 << 10
)

// pipe forwards src to dst, delaying each chunk; fromTarget is the
// direction of replies.
//
// BenchmarkBulk (process CPU per byte, client and server included, 256
// KiB replies at 0.2 ms; 4 alternating runs): 1.09–1.20 ns with a copy
// of every chunk into a new allocation, 0.67–0.74 with the recycled
// buffers, 0.21–0.32 without the proxy. Tried and not kept: splice(2)
// through kernel pipes (the bytes held in a pipe until due, never in user
// space): 0.84–0.99 ns against 0.71–0.93 for recycled buffers in the same
// runs; each splice moves a socket buffer's pages one pipe slot at a time,
// and loopback TCP copies them anyway.
func (p *Proxy) pipe(pr *pair, src, dst net.Conn, fromTarget bool) {
	defer p.wg.Done()
	defer pr.ended(p)
	q := make(chan chunk, 1024)
	// Large chunks are queued in the buffer they were read into, which
	// comes back from the writer once written: their bytes are copied
	// only by the kernel (read, then write), and a buffer is allocated
	// only while more than pipeKeep of them are in flight. (A sync.Pool
	// would be emptied by every GC cycle, and a fresh 256 KiB buffer
	// costs its zeroing.)
	free := make(chan *[pipeBuf]byte, pipeKeep)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		setTimerSlack(1000)
		defer setTimerSlack(0)
		failed := false
		for ch := range q {
			if !failed {
				wait(ch.due)
				_, err := dst.Write(ch.data)
				if failed = err != nil; failed {
					// Nothing more can be delivered: end both
					// directions (the reader sees its src closed).
					dst.Close()
					src.Close()
				}
			}
			if ch.buf != nil {
				select {
				case free <- ch.buf:
				default:
				}
			}
		}
	}()
	var buf *[pipeBuf]byte
	for {
		if buf == nil {
			select {
			case buf = <-free:
			default:
				buf = new([pipeBuf]byte)
			}
		}
		n, err := src.Read(buf[:])
		if n > 0 && fromTarget && p.takeDrop() {
			n, err = 0, net.ErrClosed
		}
		if n > 0 {
			ch := chunk{due: time.Now().Add(time.Duration(p.delay.Load()))}
			if n <= pipeCopyMax {
				ch.data = append([]byte(nil), buf[:n]...)
			} else {
				ch.data, ch.buf, buf = buf[:n], buf, nil
			}
			q <- ch
		}
		if err != nil {
			close(q)
			<-done
			st, sok := src.(*net.TCPConn)
			dt, dok := dst.(*net.TCPConn)
			if errors.Is(err, io.EOF) && sok && dok {
				dt.CloseWrite()
				st.CloseRead()
			} else {
				dst.Close()
				src.Close()
			}
			return
		}
	}
}

// wait sleeps until t. Go timers have about a millisecond of slack on
// Linux, so short waits use nanosleep(2) on the calling thread (locked by
// the writer goroutine, whose timer slack is set to 1 µs).
func wait(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if d > 5*time.Millisecond {
		time.Sleep(d - time.Millisecond)
		d = time.Until(t)
		if d <= 0 {
			return
		}
	}
	nanosleep(d)
}

// Calibrate adjusts the added delay so that ping, a request/reply exchange
// through the proxy, takes target (the proxy's own hand-offs add tens of
// microseconds, which matter at sub-millisecond RTTs). It returns the
// ping time measured at the final setting. Pass a ping that does little
// work at the server (an NFS SEQUENCE-only COMPOUND).
//
// The ping time is the 10th percentile of 41 pings, not their median: on
// a machine busy with other jobs most pings also wait for a CPU, by
// milliseconds, and calibrating on the median took that wait for the
// proxy's overhead — the added delay went down to a third of the target
// at a load average of 12, and the reported RTT moved between runs by
// ±35% (docs/vnfs.md "Files, session 13"). For the same reason the
// delay is never lowered below half the target: the proxy's own
// overhead is tens of microseconds.
func (p *Proxy) Calibrate(target time.Duration, ping func() error) (time.Duration, error) {
	measure := func() (time.Duration, error) {
		const n = 41
		ds := make([]time.Duration, n)
		for i := range ds {
			start := time.Now()
			if err := ping(); err != nil {
				return 0, err
			}
			ds[i] = time.Since(start)
		}
		slices.Sort(ds)
		return ds[n/10], nil
	}
	p.SetRTT(target)
	got, err := measure()
	for i := 0; i < 4 && err == nil; i++ {
		miss := got - target
		if miss < target/50 && miss > -target/50 {
			break
		}
		p.SetRTT(max(target/2, p.RTT()-miss))
		got, err = measure()
	}
	return got, err
}
