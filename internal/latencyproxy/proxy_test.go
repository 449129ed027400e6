package latencyproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestRTT checks that a ping-pong through the proxy takes the configured
// round-trip time.
func TestRTT(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				for {
					b, err := r.ReadByte()
					if err != nil {
						return
					}
					c.Write([]byte{b})
				}
			}()
		}
	}()
	for _, rtt := range []time.Duration{0, 200 * time.Microsecond, 2 * time.Millisecond} {
		p, err := New(l.Addr().String(), rtt)
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan byte, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					got <- b[0]
					c.Write(b)
				}
			}()
		}
	}()
	p, err := New(l.Addr().String(), 0)
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
