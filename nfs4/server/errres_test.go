package server_test

import (
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestSetattrErrorResultOpcode: a SETATTR answered with an error before
// it runs (here NFS4ERR_OP_NOT_IN_SESSION: a 4.1 COMPOUND without
// SEQUENCE) must be a SETATTR result (RFC 8881 §16.2.3: resop matches
// argop), status and empty attrsset — SETATTR4res is the one result
// whose failure arm is not void, and errRes, decoding (opcode, status)
// alone, made it an OP_ILLEGAL result.
func TestSetattrErrorResultOpcode(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	setattr := &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{ObjAttributes: nfsv4.Fattr4{Attrmask: []uint32{}}}}
	rep, err := c.CompoundRaw(1, false, setattr)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != nfsv4.NFS4ERR_OP_NOT_IN_SESSION || len(rep.Results) != 1 {
		t.Fatalf("status %d, %d results", rep.Status, len(rep.Results))
	}
	if op := rep.Results[0].GetResop(); op != nfsv4.OP_SETATTR {
		t.Fatalf("result opcode %d, want OP_SETATTR (%d)", op, nfsv4.OP_SETATTR)
	}
}
