package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/internal/latencyproxy"
	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/nfs4/client"
)

var peers []*nfspeers.Peer

func TestMain(m *testing.M) {
	os.Exit(nfspeers.RunWithPeers(m, "nfs4client-test", &peers))
}

var dirSeq atomic.Int64

// forEachPeer runs fn against each peer with a fresh client and a fresh
// directory (path from the server root) to work in.
func forEachPeer(t *testing.T, fn func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string)) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			c, err := client.Dial(ctx, client.Config{Addr: p.Addr})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			name := fmt.Sprintf("t%d", dirSeq.Add(1))
			var cp client.Compound
			lookupPath(&cp, p.Root)
			cp.Mkdir(name, mode(0o755))
			mustOK(t, c, &cp)
			fn(t, p, c, path.Join(p.Root, name))
		})
	}
}

func mode(m uint32) nfsv4.Fattr4 {
	s := client.SetAttrs{SetMode: true, Mode: m}
	return s.Encode()
}

func lookupPath(cp *client.Compound, p string) {
	cp.PutRootFH()
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		if c != "" {
			cp.Lookup(c)
		}
	}
}

func mustOK(t *testing.T, c *client.Client, cp *client.Compound) *client.Reply {
	t.Helper()
	rep, err := c.Do(context.Background(), cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestSessionLimits(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		l := c.Limits()
		t.Logf("%s: %+v", p.Name, l)
		if l.MinorVersion < 1 || l.MaxRequestSize < 64<<10 || l.MaxOps < 8 || l.Slots < 1 {
			t.Fatalf("implausible limits %+v", l)
		}
	})
}

// TestOpenWriteReadCloseOneCompound checks the vNFS claim that OPEN,
// READ/WRITE and CLOSE fit one COMPOUND by using the current stateid.
func TestOpenWriteReadCloseOneCompound(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		data := bytes.Repeat([]byte("0123456789abcdef"), 1000)
		var cp client.Compound
		lookupPath(&cp, dir)
		cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE,
			Create: true, CreateAttrs: mode(0o640)})
		cp.Write(client.CurrentStateid, 0, data, true)
		cp.Close(client.CurrentStateid)
		before := c.Stats().Compounds
		mustOK(t, c, &cp)
		if n := c.Stats().Compounds - before; n != 1 {
			t.Fatalf("%d compounds, want 1", n)
		}
		cp = client.Compound{}
		lookupPath(&cp, dir)
		cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
		ri := cp.Read(client.CurrentStateid, 0, 1<<20)
		cp.Close(client.CurrentStateid)
		gi := cp.GetAttr(client.StatMask)
		rep := mustOK(t, c, &cp)
		got := rep.Results[ri].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4
		if !bytes.Equal(got.Data, data) || !got.Eof {
			t.Fatalf("read %d bytes eof=%v", len(got.Data), got.Eof)
		}
		a, err := client.DecodeAttrs(rep.Results[gi].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes)
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != uint64(len(data)) || a.Mode != 0o640 || a.Type != nfsv4.NF4REG {
			t.Fatalf("attrs %+v", a)
		}
	})
}

func TestFailureStopsCompound(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		var cp client.Compound
		lookupPath(&cp, dir)
		n := cp.Len()
		cp.Lookup("missing")
		cp.GetAttr(client.StatMask)
		rep, err := c.Do(context.Background(), &cp)
		if err != nil {
			t.Fatal(err)
		}
		if rep.FailedAt() != n || !errors.Is(rep.Err(), fs.ErrNotExist) {
			t.Fatalf("failed at %d (%v), want %d ENOENT", rep.FailedAt(), rep.Err(), n)
		}
	})
}

func TestTxn(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		var cp client.Compound
		cp.Txn = true
		lookupPath(&cp, dir)
		cp.Mkdir("a", mode(0o755))
		cp.LookupP()
		cp.Mkdir("a", mode(0o755)) // fails: EEXIST; the first mkdir must be undone
		_, err := c.Do(context.Background(), &cp)
		if !p.Txn {
			if !errors.Is(err, client.ErrTxnUnsupported) {
				t.Fatalf("got %v, want ErrTxnUnsupported", err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		// Nothing ran (or everything was rolled back): "a" is absent, and
		// the session is still usable.
		cp = client.Compound{}
		lookupPath(&cp, dir)
		cp.Lookup("a")
		rep, err := c.Do(context.Background(), &cp)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(rep.Err(), fs.ErrNotExist) {
			t.Fatalf("after failed txn: %v", rep.Err())
		}
	})
}

func TestConcurrentCompounds(t *testing.T) {
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		errs := make(chan error, 64)
		for i := 0; i < 64; i++ {
			go func() {
				var cp client.Compound
				lookupPath(&cp, dir)
				cp.GetAttr(client.StatMask)
				rep, err := c.Do(context.Background(), &cp)
				if err == nil {
					err = rep.Err()
				}
				errs <- err
			}()
		}
		for i := 0; i < 64; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestLeaseRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease period")
	}
	for _, p := range peers {
		if p.Name != "ganesha" {
			continue // txnfs lease is 90 s
		}
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			c, err := client.Dial(ctx, client.Config{Addr: p.Addr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			lease := c.Limits().Lease
			if lease > 15*time.Second {
				t.Skipf("lease %v too long to wait for", lease)
			}
			var cp client.Compound
			lookupPath(&cp, p.Root)
			cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "lease-test", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
			cp.GetFH()
			rep := mustOK(t, c, &cp)
			sid := rep.Results[len(rep.Results)-2].(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid
			fh := rep.Results[len(rep.Results)-1].(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
			time.Sleep(lease + lease/2)
			cp = client.Compound{}
			cp.PutFH(fh)
			cp.Write(sid, 0, []byte("x"), false)
			cp.Close(sid)
			mustOK(t, c, &cp) // the open state survived thanks to renewal
		})
	}
}

// TestReconnect drops the TCP connection between COMPOUNDs and while one
// is in flight: the client re-dials and the session (and its reply cache)
// carries on.
func TestReconnect(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			px, err := latencyproxy.New(p.Addr, 2*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			ctx := context.Background()
			c, err := client.Dial(ctx, client.Config{Addr: px.Addr()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			name := fmt.Sprintf("rc%d", dirSeq.Add(1))
			for i := 0; i < 5; i++ {
				px.DropConns()
				if i%2 == 1 {
					// Drop while the next request is in flight.
					go func() { time.Sleep(time.Millisecond); px.DropConns() }()
				}
				var cp client.Compound
				lookupPath(&cp, p.Root)
				cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE, Create: true})
				cp.Write(client.CurrentStateid, uint64(i), []byte{byte('a' + i)}, true)
				cp.Close(client.CurrentStateid)
				rep, err := c.Do(ctx, &cp)
				if errors.Is(err, client.ErrUncertain) && i%2 == 1 {
					// The connection dropped with the request in flight
					// and the server (Ganesha does) did not cache the
					// reply: a legal outcome. This round is idempotent,
					// so run it again.
					rep, err = c.Do(ctx, &cp)
				}
				if err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				if err := rep.Err(); err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
			}
			var cp client.Compound
			lookupPath(&cp, p.Root)
			cp.Lookup(name)
			cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
			ri := cp.Read(client.CurrentStateid, 0, 100)
			cp.Close(client.CurrentStateid)
			rep := mustOK(t, c, &cp)
			if got := rep.Results[ri].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data; string(got) != "abcde" {
				t.Fatalf("file holds %q", got)
			}
		})
	}
}

// TestPerCompoundCred: Compound.Cred replaces the client's AUTH_SYS
// identity for one COMPOUND: the server checks permissions for it and
// makes it the owner of what it creates.
func TestPerCompoundCred(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs the client to run as root (the default credential)")
	}
	forEachPeer(t, func(t *testing.T, p *nfspeers.Peer, c *client.Client, dir string) {
		ctx := context.Background()
		user := &client.Cred{UID: 4321, GID: 4321}
		// dir is root's, 0755: the user may not create in it.
		var cp client.Compound
		cp.Cred = user
		lookupPath(&cp, dir)
		cp.Mkdir("denied", mode(0o755))
		rep, err := c.Do(ctx, &cp)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(rep.Err(), syscall.EACCES) {
			t.Fatalf("mkdir as uid 4321 in a root 0755 directory: %v, want EACCES", rep.Err())
		}
		// Root opens the directory up; the user's directory is theirs.
		cp = client.Compound{}
		lookupPath(&cp, dir)
		s := client.SetAttrs{SetMode: true, Mode: 0o777}
		cp.SetAttr(client.AnonymousStateid, s.Encode())
		mustOK(t, c, &cp)
		cp = client.Compound{Cred: user}
		lookupPath(&cp, dir)
		cp.Mkdir("mine", mode(0o755))
		cp.GetAttr(client.StatMask)
		rep = mustOK(t, c, &cp)
		res := rep.Results[len(rep.Results)-1].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK)
		a, err := client.DecodeAttrs(res.Resok4.ObjAttributes)
		if err != nil {
			t.Fatal(err)
		}
		if uid, _ := a.Uid(); uid != 4321 {
			t.Fatalf("owner of a directory made as uid 4321: %q", a.Owner)
		}
	})
}

// TestHardOutage: while the server is unreachable (the proxy resets every
// connection) a Hard client's COMPOUND waits and completes once the server
// is back, a call whose context ends first fails with the context's and
// the transport's error, and a default (soft) client fails with
// ErrTransport.
func TestHardOutage(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			px, err := latencyproxy.New(p.Addr, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			ctx := context.Background()
			var logs strings.Builder
			var logMu sync.Mutex
			hard, err := client.Dial(ctx, client.Config{Addr: px.Addr(), Hard: true,
				Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer closeQuickly(t, hard)
			soft, err := client.Dial(ctx, client.Config{Addr: px.Addr()})
			if err != nil {
				t.Fatal(err)
			}
			defer closeQuickly(t, soft)
			getattr := func() *client.Compound {
				var cp client.Compound
				lookupPath(&cp, p.Root)
				cp.GetAttr(client.StatMask)
				return &cp
			}
			px.SetDown(true)
			if _, err := soft.Do(ctx, getattr()); !errors.Is(err, client.ErrTransport) {
				t.Fatalf("soft client during the outage: %v, want ErrTransport", err)
			}
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = hard.Do(short, getattr())
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrTransport) {
				t.Fatalf("hard client whose context ends during the outage: %v, want DeadlineExceeded and ErrTransport", err)
			}
			done := make(chan error, 1)
			go func() {
				rep, err := hard.Do(ctx, getattr())
				if err == nil {
					err = rep.Err()
				}
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("hard client returned during the outage: %v", err)
			case <-time.After(time.Second):
			}
			px.SetDown(false)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("hard client after the outage: %v", err)
				}
			case <-time.After(3 * client.HardRetryMax):
				t.Fatal("hard client did not complete after the server came back")
			}
			logMu.Lock()
			l := logs.String()
			logMu.Unlock()
			if strings.Count(l, "not responding") != 1 || strings.Count(l, "server OK") != 1 {
				t.Fatalf("want one outage warning and one recovery line, log:\n%s", l)
			}
		})
	}
}

// closeQuickly closes c and checks that Close does not wait for the
// session slots that transport failures retired (it waited its whole
// 5 s timeout for them before).
func closeQuickly(t *testing.T, c *client.Client) {
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestSlotWaiterAfterRetiredSlots: a COMPOUND waiting for a free session
// slot while the COMPOUNDs holding every slot fail with a transport error
// (each retires its slot: the session is then replaced) returns instead of
// waiting for ever for a slot of the dead session, and the client works
// again once the server is back. (It waited for ever: TestCrashChainDurability
// hung, its clients' COMPOUNDs in line for slots when the server was killed.)
func TestSlotWaiterAfterRetiredSlots(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			// The proxy's round trip keeps the slot holders in flight
			// while the waiter lines up.
			px, err := latencyproxy.New(p.Addr, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			ctx := context.Background()
			const slots = 2
			c, err := client.Dial(ctx, client.Config{Addr: px.Addr(), Slots: slots})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			getattr := func() *client.Compound {
				var cp client.Compound
				lookupPath(&cp, p.Root)
				cp.GetAttr(client.StatMask)
				return &cp
			}
			px.SetRTT(10 * time.Second)
			sent := c.Stats().Compounds
			holders := make(chan error, slots)
			for range slots {
				go func() {
					_, err := c.Do(ctx, getattr())
					holders <- err
				}()
			}
			for start := time.Now(); c.Stats().Compounds < sent+slots; time.Sleep(time.Millisecond) {
				if time.Since(start) > 10*time.Second {
					t.Fatal("the slot holders did not send their COMPOUNDs")
				}
			}
			// Bounded so that the test fails instead of hanging.
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			waiter := make(chan error, 1)
			go func() {
				_, err := c.Do(wctx, getattr())
				waiter <- err
			}()
			// The waiter lines up for a slot (a later start only makes
			// the test pass without checking anything: it then finds
			// the session replaced before waiting).
			time.Sleep(100 * time.Millisecond)
			px.SetDown(true)
			for range slots {
				if err := <-holders; !errors.Is(err, client.ErrTransport) {
					t.Fatalf("slot holder when the server went down: %v, want ErrTransport", err)
				}
			}
			if err := <-waiter; errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the COMPOUND waiting for a slot of the dead session waited for ever: %v", err)
			} else if !errors.Is(err, client.ErrTransport) {
				t.Fatalf("the COMPOUND waiting for a slot: %v, want ErrTransport (the server is down)", err)
			}
			px.SetDown(false)
			px.SetRTT(0)
			if rep, err := c.Do(ctx, getattr()); err != nil || rep.Err() != nil {
				t.Fatalf("after the outage: %v, %v", err, rep)
			}
		})
	}
}
