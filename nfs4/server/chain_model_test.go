package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// dialNoRetry connects a client that never resends a COMPOUND on
// NFS4ERR_DELAY (a resent chained COMPOUND goes unchained: the model
// test compares first answers).
func dialNoRetry(t *testing.T, ts *testServer) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Config{Addr: ts.addr, RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// modelGen generates random chains of COMPOUNDs on a few names: OPEN by
// name (creating, truncating) with WRITE/SETATTR/CLOSE on the current
// stateid, exclusive creates, lookups, REMOVE, RENAME, OPEN denying
// writes, WRITE with the anonymous stateid.
type modelGen struct {
	rng    *rand.Rand
	names  []string
	owners []string // shared open-owners (besides unique ones)
	round  int
}

// sizeChange asks for the size and change attributes.
var sizeChange = client.MakeBitmap(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_CHANGE)

// compound returns a builder of COMPOUND i (chain set by the caller) and
// its description.
func (g *modelGen) compound(i int) (func(*client.Chain, uint64) *client.Compound, string) {
	r := g.rng
	name := g.names[r.IntN(len(g.names))]
	owner := fmt.Sprintf("u%d-%d", g.round, i)
	if r.IntN(4) == 0 {
		owner = g.owners[r.IntN(len(g.owners))]
	}
	data := bytes.Repeat([]byte{byte('a' + i%26)}, 1+r.IntN(6))
	off := uint64(r.IntN(12))
	var desc string
	var add func(cp *client.Compound, cid uint64)
	switch k := r.IntN(20); {
	case k < 8: // OPEN (maybe creating, maybe truncating), WRITE, maybe GETATTR and CLOSE
		create, trunc, getattr, closeIt := r.IntN(2) == 0, r.IntN(4) == 0, r.IntN(2) == 0, r.IntN(4) != 0
		desc = fmt.Sprintf("open(%s create=%v trunc=%v owner=%s) write(%d,%q) getattr=%v close=%v", name, create, trunc, owner, off, data, getattr, closeIt)
		add = func(cp *client.Compound, cid uint64) {
			var attrs nfsv4.Fattr4
			if trunc {
				attrs = (&client.SetAttrs{SetSize: true}).Encode()
			}
			cp.Open(cid, []byte(owner), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: create || trunc, CreateAttrs: attrs})
			if getattr {
				cp.GetAttr(sizeChange)
			}
			cp.Write(client.CurrentStateid, off, data, true)
			if getattr {
				cp.GetAttr(sizeChange)
			}
			if closeIt {
				cp.Close(client.CurrentStateid)
			}
		}
	case k < 10: // OPEN, SETATTR size, GETATTR, CLOSE
		size := uint64(r.IntN(10))
		desc = fmt.Sprintf("open(%s owner=%s) setattr(size=%d) getattr close", name, owner, size)
		add = func(cp *client.Compound, cid uint64) {
			cp.Open(cid, []byte(owner), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH})
			cp.SetAttr(client.CurrentStateid, (&client.SetAttrs{SetSize: true, Size: size}).Encode())
			cp.GetAttr(sizeChange)
			cp.Close(client.CurrentStateid)
		}
	case k < 12: // exclusive (GUARDED) create
		desc = fmt.Sprintf("open(%s guarded owner=%s) write(%d,%q) close", name, owner, off, data)
		add = func(cp *client.Compound, cid uint64) {
			cp.Open(cid, []byte(owner), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true, Exclusive: true})
			cp.Write(client.CurrentStateid, off, data, true)
			cp.Close(client.CurrentStateid)
		}
	case k < 13: // read-only: not speculation-safe (changes nothing)
		desc = fmt.Sprintf("lookup(%s) getattr", name)
		add = func(cp *client.Compound, cid uint64) {
			cp.Lookup(name)
			cp.GetAttr(sizeChange)
		}
	case k < 15:
		desc = fmt.Sprintf("remove(%s)", name)
		add = func(cp *client.Compound, cid uint64) { cp.Remove(name) }
	case k < 17:
		to := g.names[r.IntN(len(g.names))]
		desc = fmt.Sprintf("rename(%s,%s)", name, to)
		add = func(cp *client.Compound, cid uint64) {
			cp.SaveFH()
			cp.Rename(name, to)
		}
	case k < 18: // OPEN denying writes, closed again (or not)
		closeIt := r.IntN(2) == 0
		desc = fmt.Sprintf("open(%s deny-write owner=%s) close=%v", name, owner, closeIt)
		add = func(cp *client.Compound, cid uint64) {
			cp.Add(&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
				ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_READ | nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
				ShareDeny:   nfsv4.OPEN4_SHARE_DENY_WRITE,
				Owner:       nfsv4.StateOwner4{Clientid: cid, Owner: []byte(owner)},
				Openhow:     &nfsv4.Openflag4_default{},
				Claim:       &nfsv4.OpenClaim4_CLAIM_NULL{File: name},
			}})
			if closeIt {
				cp.Close(client.CurrentStateid)
			}
		}
	default: // WRITE with the anonymous stateid
		desc = fmt.Sprintf("lookup(%s) anonymous write(%d,%q)", name, off, data)
		add = func(cp *client.Compound, cid uint64) {
			cp.Lookup(name)
			cp.Write(nfsv4.Stateid4{}, off, data, true)
		}
	}
	return func(ch *client.Chain, cid uint64) *client.Compound {
		cp := &client.Compound{Chain: ch}
		cp.PutRootFH()
		add(cp, cid)
		return cp
	}, desc
}

// normResult describes a result the same way on two servers: status and
// what a client sees, without the server-specific values (stateid
// "other" fields, file handles).
func normResult(r nfsv4.NfsResop4, st nfsv4.Nfsstat4) string {
	s := fmt.Sprintf("op%d:%d", r.GetResop(), st)
	if st != nfsv4.NFS4_OK {
		return s
	}
	switch r := r.(type) {
	case *nfsv4.NfsResop4_OP_OPEN:
		ok := r.Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4
		s += fmt.Sprintf(" seqid=%d cinfo=%v rflags=%d attrset=%v", ok.Stateid.Seqid, ok.Cinfo, ok.Rflags, ok.Attrset)
	case *nfsv4.NfsResop4_OP_GETATTR:
		a, err := client.DecodeAttrs(r.Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes)
		s += fmt.Sprintf(" size=%d change=%d err=%v", a.Size, a.Change, err)
	case *nfsv4.NfsResop4_OP_WRITE:
		ok := r.Opwrite.(*nfsv4.Write4res_NFS4_OK).Resok4
		s += fmt.Sprintf(" count=%d committed=%d", ok.Count, ok.Committed)
	case *nfsv4.NfsResop4_OP_CLOSE:
		s += fmt.Sprintf(" %v", r.Opclose.(*nfsv4.Close4res_NFS4_OK).OpenStateid)
	case *nfsv4.NfsResop4_OP_SETATTR:
		s += fmt.Sprintf(" set=%v", r.Opsetattr.Attrsset)
	case *nfsv4.NfsResop4_OP_REMOVE:
		s += fmt.Sprintf(" cinfo=%v", r.Opremove.(*nfsv4.Remove4res_NFS4_OK).Resok4.Cinfo)
	}
	return s
}

func normReply(rep *client.Reply) []string {
	out := make([]string, len(rep.Results))
	for i, r := range rep.Results {
		out[i] = normResult(r, rep.Statuses[i])
	}
	return out
}

// openSids returns the stateids of a reply's successful OPENs.
func openSids(rep *client.Reply) []nfsv4.Stateid4 {
	var out []nfsv4.Stateid4
	for i, r := range rep.Results {
		if o, ok := r.(*nfsv4.NfsResop4_OP_OPEN); ok && rep.Statuses[i] == nfsv4.NFS4_OK {
			out = append(out, o.Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid)
		}
	}
	return out
}

// modelState describes the names' files and the given stateids'
// validity on one server.
func modelState(t *testing.T, c *client.Client, names []string, sids []nfsv4.Stateid4) string {
	t.Helper()
	var b strings.Builder
	{
		var cp client.Compound
		cp.PutRootFH()
		cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_CHANGE))
		rep, err := c.Do(context.Background(), &cp)
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("root: %v %v", err, rep)
		}
		fmt.Fprintf(&b, "root %s\n", normResult(rep.Results[1], rep.Statuses[1]))
	}
	for _, name := range names {
		var cp client.Compound
		cp.PutRootFH()
		cp.Lookup(name)
		cp.GetAttr(sizeChange)
		cp.Read(nfsv4.Stateid4{Other: [12]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, Seqid: 0xffffffff}, 0, 1024)
		rep, err := c.Do(context.Background(), &cp)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:", name)
		for i, r := range rep.Results {
			fmt.Fprintf(&b, " %s", normResult(r, rep.Statuses[i]))
			if rd, ok := r.(*nfsv4.NfsResop4_OP_READ); ok && rep.Statuses[i] == nfsv4.NFS4_OK {
				fmt.Fprintf(&b, " data=%q", rd.Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data)
			}
		}
		b.WriteString("\n")
	}
	if len(sids) > 0 {
		var cp client.Compound
		cp.Add(&nfsv4.NfsArgop4_OP_TEST_STATEID{OptestStateid: nfsv4.TestStateid4args{TsStateids: sids}})
		rep, err := c.Do(context.Background(), &cp)
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("TEST_STATEID: %v %v", err, rep)
		}
		fmt.Fprintf(&b, "stateids %v\n", rep.Results[0].(*nfsv4.NfsResop4_OP_TEST_STATEID).OptestStateid.(*nfsv4.TestStateid4res_NFS4_OK).TsrResok4.TsrStatusCodes)
	}
	return b.String()
}

// TestChainModel compares chained COMPOUNDs, sent concurrently (in a
// random order, with random delays), with the same COMPOUNDs sent one by one,
// unchained, in the chain's order to a second server: every reply (per
// operation: status, stateid seqid, change_info, sizes, change
// attributes, counts), the chain's stop (a COMPOUND after a failed one is
// refused), the files' contents and attributes and the validity of every
// stateid an OPEN returned must be the same. Random chains on three names
// (OPEN/WRITE/SETATTR/CLOSE on the current stateid, exclusive creates,
// REMOVE, RENAME, OPEN denying writes, anonymous WRITEs, lookups).
// TXNFS_SEED=n replays a seed; the seed is printed on failure.
func TestChainModel(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TXNFS_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (TXNFS_SEED=%d replays it)", seed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	srv, ref := startServer(t), startServer(t)
	cs, cr := dialNoRetry(t, srv), dialNoRetry(t, ref)
	for round := range rounds {
		g := &modelGen{rng: rng, round: round, owners: []string{"p0", "p1"}}
		for _, n := range []string{"a", "b", "c"} {
			g.names = append(g.names, fmt.Sprintf("r%d%s", round, n))
		}
		for _, name := range g.names {
			if rng.IntN(3) != 0 {
				data := bytes.Repeat([]byte{'0' + byte(rng.IntN(10))}, rng.IntN(9))
				putFile(t, cs, name, data)
				putFile(t, cr, name, data)
			}
		}
		n := 2 + rng.IntN(8)
		builds, descs := make([]func(*client.Chain, uint64) *client.Compound, n), make([]string, n)
		for i := range n {
			builds[i], descs[i] = g.compound(i)
		}
		id := cs.NewChainID()
		cps := make([]*client.Compound, n)
		for i := range n {
			cps[i] = builds[i](&client.Chain{ID: id, Seq: uint32(i), Last: i == n-1}, cs.ClientID())
		}
		delays := make([]time.Duration, n)
		for i := range delays {
			delays[i] = time.Duration(rng.IntN(3000)) * time.Microsecond
		}
		if rng.IntN(2) == 0 {
			delays[0] += 20 * time.Millisecond // the others wait for it
		}
		reps, errs := sendDelayed(cs, cps, delays)
		var sidsS, sidsR []nfsv4.Stateid4
		stopped := false
		var log strings.Builder
		for i := range n {
			fmt.Fprintf(&log, "  %d: %s\n", i, descs[i])
		}
		for i := range n {
			if stopped {
				if !errors.Is(errs[i], client.ErrChainRefused) {
					t.Fatalf("round %d: COMPOUND %d after a failed one: %v %v, want refused\n%s", round, i, errs[i], reps[i], log.String())
				}
				continue
			}
			if errs[i] != nil {
				t.Fatalf("round %d: COMPOUND %d: %v\n%s", round, i, errs[i], log.String())
			}
			want, err := cr.Do(context.Background(), builds[i](nil, cr.ClientID()))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := normReply(reps[i]), normReply(want); !slicesEqual(got, want) {
				t.Fatalf("round %d: COMPOUND %d replied\n  %v\nserially\n  %v\nchain:\n%s", round, i, got, want, log.String())
			}
			sidsS, sidsR = append(sidsS, openSids(reps[i])...), append(sidsR, openSids(want)...)
			stopped = want.Status != nfsv4.NFS4_OK
		}
		if got, want := modelState(t, cs, g.names, sidsS), modelState(t, cr, g.names, sidsR); got != want {
			t.Fatalf("round %d: state after the chain\n%s\nserially\n%s\nchain:\n%s", round, got, want, log.String())
		}
	}
}

// sendDelayed sends cps concurrently, each after its delay, and returns
// their outcomes.
func sendDelayed(c *client.Client, cps []*client.Compound, delays []time.Duration) ([]*client.Reply, []error) {
	reps, errs := make([]*client.Reply, len(cps)), make([]error, len(cps))
	var wg sync.WaitGroup
	for i := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delays[i])
			reps[i], errs[i] = c.Do(context.Background(), cps[i])
		}()
	}
	wg.Wait()
	return reps, errs
}

func putFile(t *testing.T, c *client.Client, name string, data []byte) {
	t.Helper()
	var cp client.Compound
	cp.PutRootFH()
	cp.Open(c.ClientID(), []byte("setup"), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	cp.Write(client.CurrentStateid, 0, data, true)
	cp.Close(client.CurrentStateid)
	if rep, err := c.Do(context.Background(), &cp); err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("writing %s: %v %v", name, err, rep)
	}
}

func getFile(t *testing.T, c *client.Client, name string) []byte {
	t.Helper()
	var cp client.Compound
	cp.PutRootFH()
	cp.Open(c.ClientID(), []byte("reader"), client.OpenArgs{Name: name, Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	ri := cp.Read(client.CurrentStateid, 0, 1<<16)
	cp.Close(client.CurrentStateid)
	rep, err := c.Do(context.Background(), &cp)
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("reading %s: %v %v", name, err, rep)
	}
	return rep.Results[ri].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
