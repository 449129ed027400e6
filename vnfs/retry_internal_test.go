package vnfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/datadir"
	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// startServer starts a txnfs server for internal tests.
func startServer(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	e, err := datadir.Open(ctx, datadir.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{FS: e.FS})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	t.Cleanup(func() {
		cancel()
		l.Close()
		srv.Close()
		<-done
		e.Close()
	})
	return l.Addr().String()
}

// refuser makes the server appear to refuse, with NFS4ERR_DELAY, a random
// REMOVE or CREATE of some COMPOUNDs: the COMPOUND is sent only up to that
// operation, and the reply ends with it failed, as a server that could not
// serialize the operation answers. A name is refused at most maxRefusals
// times (fewer than the client's retries): an item resent alone would
// otherwise be refused more often than maxDelayRetries once in ~1,000
// runs, and the call would fail as it should.
type refuser struct {
	c       *client.Client
	mu      sync.Mutex
	r       *rand.Rand
	refused int
	byName  map[string]int
}

const maxRefusals = 4

// refusedName is the name a REMOVE or CREATE acts on.
func refusedName(op nfsv4.NfsArgop4) string {
	switch op := op.(type) {
	case *nfsv4.NfsArgop4_OP_REMOVE:
		return op.Opremove.Target
	case *nfsv4.NfsArgop4_OP_CREATE:
		return op.Opcreate.Objname
	}
	return ""
}

func (f *refuser) do(ctx context.Context, cp *client.Compound) (*client.Reply, error) {
	ops := cp.Ops()
	var cand []int
	for i, op := range ops {
		switch op.(type) {
		case *nfsv4.NfsArgop4_OP_REMOVE, *nfsv4.NfsArgop4_OP_CREATE:
			cand = append(cand, i)
		}
	}
	f.mu.Lock()
	k := -1
	if len(cand) > 0 && f.r.IntN(2) == 0 {
		k = cand[f.r.IntN(len(cand))]
		if f.byName == nil {
			f.byName = map[string]int{}
		}
		if name := refusedName(ops[k]); f.byName[name] < maxRefusals {
			f.byName[name]++
			f.refused++
		} else {
			k = -1
		}
	}
	f.mu.Unlock()
	if k < 0 {
		return f.c.Do(ctx, cp)
	}
	part := client.Compound{Tag: cp.Tag, TxnID: cp.TxnID, Chain: cp.Chain}
	for _, op := range ops[:k] {
		part.Add(op)
	}
	if cp.Chain != nil {
		// The server must see the COMPOUND stop early, as it would
		// with the refusal: a bad handle fails it there.
		part.PutFH([]byte("not a handle"))
	}
	rep, err := f.c.Do(ctx, &part)
	if err == nil && cp.Chain != nil && len(rep.Results) == k+1 && rep.Statuses[k] != nfsv4.NFS4_OK {
		rep.Results, rep.Statuses, rep.Status = rep.Results[:k], rep.Statuses[:k], nfsv4.NFS4_OK
	}
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		return rep, err
	}
	var res nfsv4.NfsResop4 = &nfsv4.NfsResop4_OP_REMOVE{Opremove: &nfsv4.Remove4res_default{Status: nfsv4.NFS4ERR_DELAY}}
	if _, ok := ops[k].(*nfsv4.NfsArgop4_OP_CREATE); ok {
		res = &nfsv4.NfsResop4_OP_CREATE{Opcreate: &nfsv4.Create4res_default{Status: nfsv4.NFS4ERR_DELAY}}
	}
	rep.Results = append(rep.Results, res)
	rep.Statuses = append(rep.Statuses, nfsv4.NFS4ERR_DELAY)
	rep.Status = nfsv4.NFS4ERR_DELAY
	return rep, nil
}

// TestDelayRetried: items refused with NFS4ERR_DELAY are sent again, in
// order and unordered, so that mkdir, rename and remove vectors split
// over many COMPOUNDs succeed whole and leave exactly what they should;
// with retries off, the same refusals fail the call.
func TestDelayRetried(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, unordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("unordered=%v", unordered), func(t *testing.T) {
			fsys, err := Dial(ctx, Config{Addr: addr, MaxOps: 24})
			if err != nil {
				t.Fatal(err)
			}
			defer fsys.Close()
			n := fsys.(*nfsFS)
			top := fmt.Sprintf("/u%v", unordered)
			if _, err := n.VMkdir(ctx, []MkdirItem{{Path: top, Mode: 0o755}}); err != nil {
				t.Fatal(err)
			}
			const dirs, files = 30, 400
			var mk []MkdirItem
			for d := 0; d < dirs; d++ {
				mk = append(mk, MkdirItem{Path: fmt.Sprintf("%s/d%02d", top, d), Mode: 0o755})
			}
			ios := make([]IO, files)
			var paths []string
			for i := range ios {
				paths = append(paths, fmt.Sprintf("%s/d%02d/f%03d", top, i%dirs, i))
				ios[i] = IO{File: P(paths[i]), Data: []byte("x"), Flags: Create}
			}
			ref := &refuser{c: n.c, r: rand.New(rand.NewPCG(seed, 7))}
			var f FS = n
			if unordered {
				f = n.Unordered()
			}
			n.sh.do = ref.do
			if k, err := f.VMkdir(ctx, mk); err != nil || k != dirs {
				t.Fatalf("mkdir: %d, %v", k, err)
			}
			n.sh.do = nil
			if _, err := Unordered(n).VWrite(ctx, ios); err != nil {
				t.Fatal(err)
			}
			n.sh.do = ref.do
			ren := make([]RenameItem, files/2)
			for i := range ren {
				ren[i] = RenameItem{Old: paths[i], New: paths[i] + ".r"}
			}
			if k, err := f.VRename(ctx, ren); err != nil || k != len(ren) {
				t.Fatalf("rename: %d, %v", k, err)
			}
			rm := append([]string(nil), paths[files/2:]...)
			for i := range ren {
				rm = append(rm, ren[i].New)
			}
			if k, err := f.VRemove(ctx, rm); err != nil || k != len(rm) {
				t.Fatalf("remove: %d, %v", k, err)
			}
			n.sh.do = nil
			if err := n.VListDir(ctx, []string{top}, ListOptions{Recursive: true}, func(e DirEntry) error {
				if e.Attr.Type != TypeDir {
					t.Errorf("left: %s/%s", e.Dir, e.Name)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if ref.refused == 0 || DelayRetries(n) == 0 {
				t.Fatalf("no refusals injected (%d) or retried (%d)", ref.refused, DelayRetries(n))
			}
			t.Logf("%d COMPOUNDs refused, %d resends", ref.refused, DelayRetries(n))

			// Without retries the refusal is the caller's error.
			defer maxDelayRetriesForTest(maxDelayRetriesForTest(0))
			ref.r = rand.New(rand.NewPCG(seed, 8))
			n.sh.do = func(ctx context.Context, cp *client.Compound) (*client.Reply, error) {
				ref.mu.Lock()
				ref.r = rand.New(rand.NewPCG(0, 0)) // IntN(2) == 0 below
				ref.mu.Unlock()
				return ref.do(ctx, cp)
			}
			var mk2 []MkdirItem
			for d := 0; d < 40; d++ {
				mk2 = append(mk2, MkdirItem{Path: fmt.Sprintf("%s/e%02d", top, d), Mode: 0o755})
			}
			if _, err := f.VMkdir(ctx, mk2); !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("without retries: %v, want EAGAIN", err)
			}
			n.sh.do = nil
		})
	}
}
