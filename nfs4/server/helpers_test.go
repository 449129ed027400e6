package server_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

// fakeClock is a settable clock for lease tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type testServer struct {
	addr  string
	srv   *server.Server
	eng   *datadir.Engine
	clock *fakeClock
	dir   string
	stop  func()
}

// dialClient connects an nfs4/client Client (an NFSv4.1 session) to the
// server, closed when the test ends.
func (ts *testServer) dialClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Config{Addr: ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func startServer(t testing.TB) *testServer {
	t.Helper()
	return startServerDir(t, t.TempDir(), nil)
}

func startServerDir(t testing.TB, dir string, mod func(*server.Config)) *testServer {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("NFS4_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	eng, err := datadir.Open(ctx, datadir.Options{Dir: dir, NoSync: true, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	cfg := server.Config{FS: eng.FS, Logger: logger, Clock: clock.Now}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	ts := &testServer{addr: l.Addr().String(), srv: srv, eng: eng, clock: clock, dir: dir}
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			srv.Close()
			eng.Close()
		})
	}
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) dial(t testing.TB) *testclient.Client {
	t.Helper()
	c, err := testclient.Dial(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// session41 returns a client with a 4.1 session (4.2 if minor==2).
func (ts *testServer) session(t testing.TB, minor uint32, owner string) *testclient.Client {
	t.Helper()
	c := ts.dial(t)
	if err := c.NewSession(minor, owner); err != nil {
		t.Fatal(err)
	}
	return c
}

// ---- op builders ----

func putroot() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_PUTROOTFH{} }
func getfh() nfsv4.NfsArgop4   { return &nfsv4.NfsArgop4_OP_GETFH{} }
func savefh() nfsv4.NfsArgop4  { return &nfsv4.NfsArgop4_OP_SAVEFH{} }
func restorefh() nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_RESTOREFH{}
}
func lookupp() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_LOOKUPP{} }
func putfh(h []byte) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: h}}
}
func lookup(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: name}}
}
func getattr(bits ...uint32) nfsv4.NfsArgop4 {
	var bm []uint32
	for _, b := range bits {
		for uint32(len(bm)) <= b/32 {
			bm = append(bm, 0)
		}
		bm[b/32] |= 1 << (b % 32)
	}
	return &nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: bm}}
}
func remove(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_REMOVE{Opremove: nfsv4.Remove4args{Target: name}}
}
func rename(from, to string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: from, Newname: to}}
}
func mkdir(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: name}}
}
func symlink(name, target string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4LNK{Linkdata: []byte(target)}, Objname: name}}
}
func readlink() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_READLINK{} }
func link(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LINK{Oplink: nfsv4.Link4args{Newname: name}}
}

// openCreate opens name for read/write, creating it (UNCHECKED4).
func openCreate(c *testclient.Client, name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_BOTH,
		ShareDeny:   nfsv4.OPEN4_SHARE_DENY_NONE,
		Owner:       nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte("owner")},
		Openhow:     &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{}},
		Claim:       &nfsv4.OpenClaim4_CLAIM_NULL{File: name},
	}}
}

func openWith(c *testclient.Client, name string, owner string, access, deny uint32, how nfsv4.Createhow4) nfsv4.NfsArgop4 {
	var flag nfsv4.Openflag4 = &nfsv4.Openflag4_default{}
	if how != nil {
		flag = &nfsv4.Openflag4_OPEN4_CREATE{How: how}
	}
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		ShareAccess: access, ShareDeny: deny,
		Owner:   nfsv4.StateOwner4{Clientid: c.ClientID, Owner: []byte(owner)},
		Openhow: flag,
		Claim:   &nfsv4.OpenClaim4_CLAIM_NULL{File: name},
	}}
}

// current is the 4.1 "current stateid".
var current = nfsv4.Stateid4{Seqid: 1}

var anon = nfsv4.Stateid4{}

func write(sid nfsv4.Stateid4, off uint64, data []byte) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: sid, Offset: off, Stable: nfsv4.FILE_SYNC4, Data: data}}
}
func appendOffset() nfsv4.NfsArgop4 { return &testclient.AppendOffsetArgs{} }

func read(sid nfsv4.Stateid4, off uint64, n uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Stateid: sid, Offset: off, Count: n}}
}
func closeOp(sid nfsv4.Stateid4) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{OpenStateid: sid}}
}

// ---- result accessors ----

// okT(t)(c.Compound(...)) fails the test unless the compound succeeded.
func okT(t testing.TB) func(*testclient.Reply, error) *testclient.Reply {
	return func(rep *testclient.Reply, err error) *testclient.Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("compound status %d (results %d)", rep.Status, len(rep.Results))
		}
		return rep
	}
}

func wantStatus(t testing.TB, rep *testclient.Reply, err error, want nfsv4.Nfsstat4) *testclient.Reply {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != want {
		t.Fatalf("compound status %d, want %d", rep.Status, want)
	}
	return rep
}

func fhOf(t testing.TB, r nfsv4.NfsResop4) []byte {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
}

func openSid(t testing.TB, r nfsv4.NfsResop4) nfsv4.Stateid4 {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid
}

func readData(t testing.TB, r nfsv4.NfsResop4) ([]byte, bool) {
	t.Helper()
	ok := r.(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4
	return ok.Data, ok.Eof
}

func attrVals(t testing.TB, r nfsv4.NfsResop4) nfsv4.Fattr4 {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
}

// writeFile creates name under the root with data using one compound.
func writeFile(t testing.TB, c *testclient.Client, name string, data []byte) []byte {
	t.Helper()
	rep := okT(t)(c.Compound(putroot(), openCreate(c, name), write(current, 0, data), getfh(), closeOp(current)))
	return fhOf(t, rep.Results[3])
}

// readFile reads a whole (small) file under the root.
func readFile(t testing.TB, c *testclient.Client, name string) []byte {
	t.Helper()
	rep := okT(t)(c.Compound(putroot(), lookup(name), read(anon, 0, 1<<20)))
	d, _ := readData(t, rep.Results[2])
	return d
}
