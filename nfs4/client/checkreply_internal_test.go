package client

import (
	"errors"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestCheckReply checks that replies that cannot answer a COMPOUND (too
// few or too many results, another operation's result, a failed result
// before the last or under status NFS4_OK) are ErrTransport, and that
// replies a server may send (all results; a prefix ending in the failing
// operation, possibly as OP_ILLEGAL; none with a failing status) pass.
// Before checkReply, such replies reached callers that index results by
// operation and assert their types (vnfs's scalar READ took
// rep.Results[1].(*nfsv4.NfsResop4_OP_READ) after rep.Err() == nil), and
// a misbehaving server made the client panic.
func TestCheckReply(t *testing.T) {
	ops := []nfsv4.NfsArgop4{
		&nfsv4.NfsArgop4_OP_PUTROOTFH{},
		&nfsv4.NfsArgop4_OP_READ{},
		&nfsv4.NfsArgop4_OP_GETFH{},
	}
	putroot := &nfsv4.NfsResop4_OP_PUTROOTFH{Opputrootfh: nfsv4.Putrootfh4res{Status: nfsv4.NFS4_OK}}
	read := &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{}}
	readErr := &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_default{Status: nfsv4.NFS4ERR_ACCESS}}
	getfh := &nfsv4.NfsResop4_OP_GETFH{Opgetfh: &nfsv4.Getfh4res_NFS4_OK{}}
	illegal := &nfsv4.NfsResop4_OP_ILLEGAL{Opillegal: nfsv4.Illegal4res{Status: nfsv4.NFS4ERR_OP_ILLEGAL}}
	ok, acc, ill := nfsv4.NFS4_OK, nfsv4.NFS4ERR_ACCESS, nfsv4.NFS4ERR_OP_ILLEGAL
	for _, tc := range []struct {
		name     string
		status   nfsv4.Nfsstat4
		results  []nfsv4.NfsResop4
		statuses []nfsv4.Nfsstat4
		good     bool
	}{
		{"all", ok, []nfsv4.NfsResop4{putroot, read, getfh}, []nfsv4.Nfsstat4{ok, ok, ok}, true},
		{"failed at READ", acc, []nfsv4.NfsResop4{putroot, readErr}, []nfsv4.Nfsstat4{ok, acc}, true},
		{"READ unknown", ill, []nfsv4.NfsResop4{putroot, illegal}, []nfsv4.Nfsstat4{ok, ill}, true},
		{"refused whole", nfsv4.NFS4ERR_RESOURCE, nil, nil, true},
		{"OK, too few", ok, []nfsv4.NfsResop4{putroot}, []nfsv4.Nfsstat4{ok}, false},
		{"OK, none", ok, nil, nil, false},
		{"too many", ok, []nfsv4.NfsResop4{putroot, read, getfh, getfh}, []nfsv4.Nfsstat4{ok, ok, ok, ok}, false},
		{"wrong op", ok, []nfsv4.NfsResop4{putroot, getfh, getfh}, []nfsv4.Nfsstat4{ok, ok, ok}, false},
		{"wrong failing op", acc, []nfsv4.NfsResop4{putroot, getfh}, []nfsv4.Nfsstat4{ok, acc}, false},
		{"OP_ILLEGAL not last", acc, []nfsv4.NfsResop4{illegal, readErr}, []nfsv4.Nfsstat4{ill, acc}, false},
		{"OK with failed READ", ok, []nfsv4.NfsResop4{putroot, readErr, getfh}, []nfsv4.Nfsstat4{ok, acc, ok}, false},
		{"OK with failed last", ok, []nfsv4.NfsResop4{putroot, read, getfh}, []nfsv4.Nfsstat4{ok, ok, acc}, false},
		{"failed before the last", acc, []nfsv4.NfsResop4{putroot, readErr, getfh}, []nfsv4.Nfsstat4{ok, acc, ok}, false},
	} {
		err := checkReply(ops, &Reply{Status: tc.status, Results: tc.results, Statuses: tc.statuses})
		if tc.good && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.good && !errors.Is(err, ErrTransport) {
			t.Errorf("%s: got %v, want ErrTransport", tc.name, err)
		}
		if err != nil {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}
