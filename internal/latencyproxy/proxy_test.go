package latencyproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestRTT checks that a ping-pong through the proxy takes the configured
// round-trip time.
func TestRTT(t *testing.T) {
	addr := serveTCP(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			c.Write([]byte{b})
		}
	})
	for _, rtt := range []time.Duration{0, 200 * time.Microsecond, 2 * time.Millisecond} {
		p, err := New(addr, rtt)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		const n = 50
		start := time.Now()
		for i := 0; i < n; i++ {
			c.Write([]byte{byte(i)})
			if _, err := c.Read(b); err != nil {
				t.Fatal(err)
			}
		}
		got := time.Since(start) / n
		t.Logf("rtt %v: measured %v", rtt, got)
		// A lower bound is exact; the upper bound is loose because the
		// machine may be busy (Calibrate absorbs the proxy's overhead).
		if got < rtt || got > rtt+20*time.Millisecond {
			t.Errorf("rtt %v: measured %v", rtt, got)
		}
		c.Close()
		p.Close()
	}
}

// TestDropNextReply: an armed proxy forwards the request, discards the
// reply and resets the connection; the next connection works normally.
func TestDropNextReply(t *testing.T) {
	got := make(chan byte, 10)
	addr := serveTCP(t, func(c net.Conn) {
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			got <- b[0]
			c.Write(b)
		}
	})
	p, err := New(addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, drop := range []bool{false, true, false} {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if drop {
			p.DropNextReply()
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte{byte(i)})
		if b := <-got; b != byte(i) {
			t.Fatalf("server got %d, want %d", b, i)
		}
		b := make([]byte, 1)
		_, err = c.Read(b)
		switch {
		case drop && err == nil:
			t.Fatalf("round %d: reply %d came through", i, b[0])
		case drop && errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("round %d: connection not closed", i)
		case !drop && (err != nil || b[0] != byte(i)):
			t.Fatalf("round %d: %v %v", i, b, err)
		}
		c.Close()
	}
}

// BenchmarkBulk measures the proxy's CPU per byte for bulk replies at a
// 0.2 ms RTT: the client keeps 8 one-byte requests outstanding, each
// answered with 256 KiB (like pipelined NFS READs). Reported: MB/s and
// the process's CPU (user+system, client and server included, which do
// the same work whatever the proxy does) in ns per byte.
func BenchmarkBulk(b *testing.B) {
	const reply, window = 256 << 10, 8
	addr := serveTCP(b, func(c net.Conn) {
		data := make([]byte, reply)
		req := make([]byte, 1)
		for {
			if _, err := c.Read(req); err != nil {
				return
			}
			if _, err := c.Write(data); err != nil {
				return
			}
		}
	})
	p, err := New(addr, 200*time.Microsecond)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.Run("proxy", func(b *testing.B) { benchBulk(b, p.Addr()) })
	// The same without the proxy: the client's and server's share.
	b.Run("direct", func(b *testing.B) { benchBulk(b, addr) })
}

func benchBulk(b *testing.B, addr string) {
	const reply, window = 256 << 10, 8
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, reply)
	b.SetBytes(reply)
	b.ResetTimer()
	cpu0, start := procCPU(), time.Now()
	sent := 0
	for i := 0; i < b.N; i++ {
		for sent < b.N && sent < i+window {
			if _, err := c.Write([]byte{1}); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	cpu, wall := procCPU()-cpu0, time.Since(start)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*reply), "cpu-ns/B")
	b.ReportMetric(float64(cpu)/float64(wall), "cpus")
}

// procCPU is the user and system CPU time this process used so far.
func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBulkIntegrity sends random bytes in writes of random sizes through
// the proxy to an echo server and checks that they come back unchanged
// and in order (the proxy recycles its buffers: a buffer reused before
// its bytes were written would corrupt the stream).
func TestBulkIntegrity(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	addr := serveTCP(t, func(c net.Conn) {
		defer c.Close()
		b := make([]byte, 64<<10)
		for {
			n, err := c.Read(b)
			if _, werr := c.Write(b[:n]); werr != nil || err != nil {
				return
			}
		}
	})
	p, err := New(addr, 200*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var conns []net.Conn
	for range 2 { // two connections share the proxy's buffers
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		conns = append(conns, c)
	}
	data := make([]byte, 8<<20)
	rng.Read(data)
	var sizes [][]int
	for range conns {
		var s []int
		for n := 0; n < len(data); {
			k := min(len(data)-n, 1+rng.Intn([]int{100, 5000, 600 << 10}[rng.Intn(3)]))
			s = append(s, k)
			n += k
		}
		sizes = append(sizes, s)
	}
	errs := make(chan error, 2*len(conns))
	for i, c := range conns {
		go func() {
			n := 0
			for _, k := range sizes[i] {
				if _, err := c.Write(data[n : n+k]); err != nil {
					errs <- err
					return
				}
				n += k
			}
			errs <- nil
		}()
		go func() {
			// Not to EOF: the proxy closes a connection when either
			// side ends its stream (no half-close).
			got := make([]byte, len(data))
			_, err := io.ReadFull(c, got)
			if err == nil && !bytes.Equal(got, data) {
				i := 0
				for got[i] == data[i] {
					i++
				}
				err = fmt.Errorf("echo differs from byte %d on", i)
			}
			errs <- err
		}()
	}
	for range 2 * len(conns) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// serveTCP listens on a loopback port until the test ends, running handle
// in a goroutine for each connection; it returns the address.
func serveTCP(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l.Addr().String()
}

// TestHalfClose: a client that shuts down its sending side (FIN) still
// gets the replies the target sends after seeing the end of the request,
// and both connections are closed once both directions have ended.
func TestHalfClose(t *testing.T) {
	addr := serveTCP(t, func(c net.Conn) {
		defer c.Close()
		req, err := io.ReadAll(c) // until the client's FIN
		if err != nil {
			return
		}
		time.Sleep(5 * time.Millisecond) // the reply comes after the FIN has passed the proxy
		c.Write(bytes.ToUpper(req))
	})
	p, err := New(addr, 200*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("request"))
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "REQUEST" {
		t.Fatalf("reply after half-close: %q, %v (want \"REQUEST\")", got, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.conns)
		p.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d proxied connections still open after both directions ended", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCalibrateUnderLoad: on a busy machine most pings also wait for a
// CPU. Calibrate must not take that wait for the proxy's overhead: with
// 60% of the pings late by twice the target, the added delay stays near
// the target (less the fixed overhead) and the reported RTT is the
// target's, not the delayed pings'. (Calibrating on the median drove the
// delay to zero.)
func TestCalibrateUnderLoad(t *testing.T) {
	p, err := New("127.0.0.1:1", 0) // no connection is made
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const target, overhead = 4 * time.Millisecond, 500 * time.Microsecond
	i := 0
	ping := func() error {
		d := p.RTT() + overhead
		if i%5 < 3 {
			d += 2 * target // waiting for a CPU
		}
		i++
		time.Sleep(d)
		return nil
	}
	got, err := p.Calibrate(target, ping)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("added delay %v, measured %v", p.RTT(), got)
	if d := p.RTT(); d <= target/2 || d > target {
		t.Errorf("added delay %v, want about %v", d, target-overhead)
	}
	if got < target-target/4 || got > target+target/4 {
		t.Errorf("measured RTT %v, want about %v", got, target)
	}
}
