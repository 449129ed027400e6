package client_test

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/internal/latencyproxy"
	"github.com/txnfs/txnfs/nfs4/client"
)

// TestLostReply loses the reply of each COMPOUND (the proxy forwards the
// request, drops the reply and resets the connection), so the client
// reconnects and resends it on the same slot and sequence id. COMPOUNDs
// with effects are sent with sa_cachethis and must get the cached reply
// (running them again would fail: EXIST, NOENT); a replay-safe read too
// large to cache must be run again and succeed. Without sa_cachethis,
// NFS-Ganesha answers the resend NFS4ERR_RETRY_UNCACHED_REP (ErrUncertain:
// the CI flake of TestCpTree/ganesha).
func TestLostReply(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			px, err := latencyproxy.New(p.Addr, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			c, err := client.Dial(ctx, client.Config{Addr: px.Addr(), NoRenew: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			lim := c.Limits()
			t.Logf("ca_maxresponsesize_cached %d", lim.MaxResponseSizeCached)
			name := fmt.Sprintf("lr%d", dirSeq.Add(1))
			dir := path.Join(p.Root, name)
			var cp client.Compound
			lookupPath(&cp, p.Root)
			cp.Mkdir(name, mode(0o755))
			mustOK(t, c, &cp)

			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
			steps := []struct {
				name  string
				build func(cp *client.Compound)
				cache bool // expected sa_cachethis
			}{
				{"mkdir", func(cp *client.Compound) {
					lookupPath(cp, dir)
					cp.Mkdir("d", mode(0o755))
					cp.GetFH()
				}, true},
				{"exclusive create+write+close", func(cp *client.Compound) {
					lookupPath(cp, dir)
					cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE,
						Create: true, Exclusive: true, CreateAttrs: mode(0o644)})
					cp.Write(client.CurrentStateid, 0, big, true)
					cp.Close(client.CurrentStateid)
					cp.GetAttr(client.StatMask)
				}, true},
				{"rename", func(cp *client.Compound) {
					lookupPath(cp, dir)
					cp.SaveFH()
					cp.Rename("f", "g")
				}, true},
				{"read 1 MiB (replay-safe)", func(cp *client.Compound) {
					lookupPath(cp, dir)
					cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "g", Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
					cp.Read(client.CurrentStateid, 0, 1<<20)
					cp.Close(client.CurrentStateid)
				}, false},
				{"remove", func(cp *client.Compound) {
					lookupPath(cp, dir)
					cp.Remove("g")
					cp.Remove("d")
				}, true},
			}
			for _, s := range steps {
				var cp client.Compound
				s.build(&cp)
				if got := client.CacheThisOf(&cp, lim); got != s.cache {
					t.Fatalf("%s: sa_cachethis %v, want %v", s.name, got, s.cache)
				}
				st0 := c.Stats()
				px.DropNextReply()
				rep, err := c.Do(ctx, &cp)
				if err != nil {
					t.Fatalf("%s after a lost reply: %v", s.name, err)
				}
				if err := rep.Err(); err != nil {
					t.Fatalf("%s after a lost reply (run twice?): %v", s.name, err)
				}
				st := c.Stats()
				if st.Compounds-st0.Compounds < 2 {
					t.Fatalf("%s: %d COMPOUNDs sent, want a resend", s.name, st.Compounds-st0.Compounds)
				}
				if b := client.ReplyBoundOf(&cp); b >= 0 && int(st.BytesIn-st0.BytesIn) > b {
					t.Errorf("%s: reply of %d bytes over its bound %d", s.name, st.BytesIn-st0.BytesIn, b)
				}
				if s.name[:4] == "read" {
					d := rep.Results[len(rep.Results)-2].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data
					if !bytes.Equal(d, big) {
						t.Fatalf("read %d bytes back", len(d))
					}
				}
			}
			// The directory is empty again: every step ran exactly once.
			cp = client.Compound{}
			lookupPath(&cp, p.Root)
			cp.Remove(name)
			mustOK(t, c, &cp)
			// The proxy left no drop armed.
			px.SetRTT(0)
			done := make(chan error, 1)
			go func() {
				var cp client.Compound
				cp.PutRootFH()
				_, err := c.Do(ctx, &cp)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("client hung after the lost replies")
			}
		})
	}
}
