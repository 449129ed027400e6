package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// TestSpaceUsedTracksChanges checks space_used after every kind of change
// to a file's data: a plain GETATTR (read-only snapshot), one in a
// transaction that changed nothing and one in a transaction that changed
// another file must agree, and the engine's consistency check must find
// the inode's Used equal to what its extent records hold (the engine
// keeps Used in the inode, updated by every data change).
func TestSpaceUsedTracksChanges(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 2, "used")
	src := bytes.Repeat([]byte("0123456789"), 20000)
	writeFile(t, c, "src", src)
	writeFile(t, c, "f", bytes.Repeat([]byte("f"), 5000))
	writeFile(t, c, "g", nil)

	usedOf := func(rep *testclient.Reply) uint64 {
		v := attrVals(t, rep.Last()).AttrVals
		if len(v) != 8 {
			t.Fatalf("space_used: %d bytes", len(v))
		}
		return binary.BigEndian.Uint64(v)
	}
	plain := func() uint64 {
		return usedOf(okT(t)(c.Compound(putroot(), lookup("f"), getattr(nfsv4.FATTR4_SPACE_USED))))
	}
	mode := &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: anon, ObjAttributes: nfsv4.Fattr4{
		Attrmask: []uint32{0, 1 << (nfsv4.FATTR4_MODE - 32)}, AttrVals: []byte{0, 0, 1, 0xa4}}}}
	check := func(step string) uint64 {
		t.Helper()
		first := plain()
		clean := usedOf(okT(t)(c.Txn(putroot(), lookup("f"), getattr(nfsv4.FATTR4_SPACE_USED))))
		dirty := usedOf(okT(t)(c.Txn(putroot(), lookup("g"), mode, putroot(), lookup("f"), getattr(nfsv4.FATTR4_SPACE_USED))))
		if clean != first || dirty != first {
			t.Fatalf("%s: space_used %d in a plain compound, %d in a transaction, %d in one that changed another file",
				step, first, clean, dirty)
		}
		rep, err := ts.eng.FS.Check(context.Background())
		if err != nil || !rep.OK() {
			t.Fatalf("%s: engine check: %v %v", step, err, rep.Problems)
		}
		return first
	}
	fromSrc := func(op nfsv4.NfsArgop4) {
		okT(t)(c.Compound(putroot(), lookup("src"), savefh(), putroot(), lookup("f"), op))
	}
	setSize := func(n uint64) {
		okT(t)(c.Compound(putroot(), lookup("f"), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: anon, ObjAttributes: sizeAttr(n)}}))
	}

	seen := map[uint64]bool{check("created"): true}
	steps := []struct {
		name string
		do   func()
	}{
		{"write past the end", func() { okT(t)(c.Compound(putroot(), lookup("f"), write(anon, 100000, make([]byte, 70000)))) }},
		{"overwrite", func() { okT(t)(c.Compound(putroot(), lookup("f"), write(anon, 0, make([]byte, 9000)))) }},
		{"truncate", func() { setSize(3000) }},
		{"truncate to 0", func() { setSize(0) }},
		{"extend by SETATTR", func() { setSize(50000) }},
		{"write", func() { okT(t)(c.Compound(putroot(), lookup("f"), write(anon, 0, make([]byte, 70000)))) }},
		{"deallocate", func() {
			okT(t)(c.Compound(putroot(), lookup("f"), &nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{DaOffset: 8192, DaLength: 16384}}))
		}},
		{"clone", func() {
			fromSrc(&nfsv4.NfsArgop4_OP_CLONE{Opclone: nfsv4.Clone4args{ClSrcOffset: 0, ClDstOffset: 200000, ClCount: 65536}})
		}},
		{"copy", func() {
			fromSrc(&nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{CaSrcOffset: 0, CaDstOffset: 0, CaCount: 150000, CaSynchronous: true}})
		}},
		{"allocate", func() {
			okT(t)(c.Compound(putroot(), lookup("f"), &nfsv4.NfsArgop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4args{AaOffset: 0, AaLength: 400000}}))
		}},
		{"append", func() {
			okT(t)(c.Compound(putroot(), openCreate(c, "f"), write(current, math.MaxUint64, make([]byte, 12345)), closeOp(current)))
		}},
		{"transactional write", func() { okT(t)(c.Txn(putroot(), lookup("f"), write(anon, 500000, make([]byte, 4096)))) }},
		// A transaction that writes, reads space_used of its own
		// uncommitted state and aborts, then a different write.
		{"aborted transactional write", func() {
			r, err := c.Txn(putroot(), lookup("f"), write(anon, 1<<20, make([]byte, 300000)), getattr(nfsv4.FATTR4_SPACE_USED), lookup("nonexistent"))
			if err != nil || r.Status == nfsv4.NFS4_OK {
				t.Fatalf("transaction: %v, %v; want a failure", r, err)
			}
			okT(t)(c.Compound(putroot(), lookup("f"), write(anon, 600000, make([]byte, 5000))))
		}},
	}
	for _, s := range steps {
		s.do()
		seen[check(s.name)] = true
	}
	if len(seen) < 6 {
		t.Fatalf("space_used took only %d values over the steps: the steps do not change it", len(seen))
	}
}
