package nfspeers

import (
	"context"
	"time"

	"github.com/txnfs/txnfs/internal/latencyproxy"
	"github.com/txnfs/txnfs/nfs4/client"
)

// Link is a peer reached through a latency-injecting proxy.
type Link struct {
	Peer  *Peer
	Proxy *latencyproxy.Proxy
	// Addr is the proxy's address (use it instead of Peer.Addr).
	Addr string
	// RTT is the measured round-trip time of a SEQUENCE-only COMPOUND
	// through the proxy (the proxy is calibrated so that it is close to
	// the RTT asked for).
	RTT time.Duration
}

// NewLink starts a proxy in front of p adding rtt.
func NewLink(ctx context.Context, p *Peer, rtt time.Duration) (*Link, error) {
	px, err := latencyproxy.New(p.Addr, rtt)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, client.Config{Addr: px.Addr(), NoRenew: true})
	if err != nil {
		px.Close()
		return nil, err
	}
	defer c.Close()
	got, err := px.Calibrate(rtt, func() error {
		var cp client.Compound
		_, err := c.Do(ctx, &cp)
		return err
	})
	if err != nil {
		px.Close()
		return nil, err
	}
	return &Link{Peer: p, Proxy: px, Addr: px.Addr(), RTT: got}, nil
}

// Close stops the proxy.
func (l *Link) Close() error { return l.Proxy.Close() }
