package server_test

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestChangeInfoConcurrentCreates has clients create files in one
// directory concurrently with plain compounds (grouped runs whose commits
// conflict and replay) and checks every reply's change_info: atomic, and
// the [before, after] intervals of all creations are disjoint and each
// ends above its start — the values of the execution that committed,
// not of an execution the engine replayed. The directory's change
// attribute read afterwards is the largest after.
func TestChangeInfoConcurrentCreates(t *testing.T) {
	ts := startServer(t)
	c0 := ts.session(t, 1, "cinfo-setup")
	dir := fhOf(t, okT(t)(c0.Compound(putroot(), mkdir("d"), getfh())).Results[2])
	const clients, per = 6, 15
	type span struct{ before, after uint64 }
	var mu sync.Mutex
	var spans []span
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := 0; w < clients; w++ {
		c := ts.session(t, 1, fmt.Sprintf("cinfo-%d", w))
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				rep, err := c.Compound(putfh(dir), openCreate(c, fmt.Sprintf("f-%d-%d", w, i)), closeOp(current))
				if err != nil || rep.Status != nfsv4.NFS4_OK {
					errs <- fmt.Errorf("create: %v %+v", err, rep)
					return
				}
				ci := rep.Results[1].(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Cinfo
				if !ci.Atomic {
					errs <- fmt.Errorf("change_info not atomic: %+v", ci)
					return
				}
				mu.Lock()
				spans = append(spans, span{ci.Before, ci.After})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].before < spans[j].before })
	for i, s := range spans {
		if s.after <= s.before {
			t.Fatalf("change_info %d..%d does not advance", s.before, s.after)
		}
		if i > 0 && s.before < spans[i-1].after {
			t.Fatalf("change_info %d..%d overlaps %d..%d", spans[i-1].before, spans[i-1].after, s.before, s.after)
		}
	}
	rep := okT(t)(c0.Compound(putfh(dir), getattr(nfsv4.FATTR4_CHANGE)))
	vals := attrVals(t, rep.Results[1]).AttrVals
	if got := binary.BigEndian.Uint64(vals); got != spans[len(spans)-1].after {
		t.Fatalf("directory change %d, last change_info after %d", got, spans[len(spans)-1].after)
	}
}
