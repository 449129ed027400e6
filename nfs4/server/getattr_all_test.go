package server_test

import (
	"context"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// TestGetattrEveryAttribute asks, over NFSv4.1, for every attribute the
// server says it supports, of the root, a file, a directory and a
// symbolic link: each reply returns them all but the write-only ones,
// and nfs4/client decodes every value (the generated writers on one
// side, the generated readers on the other).
func TestGetattrEveryAttribute(t *testing.T) {
	ts := startServer(t)
	c := ts.dialClient(t)
	do := func(cp *client.Compound) *client.Reply {
		t.Helper()
		rep, err := c.Do(context.Background(), cp)
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("%v %v", err, rep)
		}
		return rep
	}
	var setup client.Compound
	setup.PutRootFH()
	setup.Open(c.ClientID(), []byte("o"), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	setup.Write(client.CurrentStateid, 0, []byte("data"), true)
	setup.Close(client.CurrentStateid)
	setup.PutRootFH()
	setup.Mkdir("d", nfsv4.Fattr4{Attrmask: []uint32{}})
	setup.PutRootFH()
	setup.Symlink("l", "f", nfsv4.Fattr4{Attrmask: []uint32{}})
	do(&setup)
	var q client.Compound
	q.PutRootFH()
	gi := q.GetAttr(client.MakeBitmap(nfsv4.FATTR4_SUPPORTED_ATTRS))
	a, err := client.DecodeAttrs(do(&q).Results[gi].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes)
	if err != nil {
		t.Fatal(err)
	}
	all := a.Supported
	want := append(client.Bitmap(nil), all...)
	for _, wo := range []uint32{nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET} {
		if want.Has(wo) {
			want[wo/32] &^= 1 << (wo % 32)
		}
	}
	for _, name := range []string{"", "f", "d", "l"} {
		var cp client.Compound
		cp.PutRootFH()
		if name != "" {
			cp.Lookup(name)
		}
		gi := cp.GetAttr(all)
		f := do(&cp).Results[gi].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
		if _, err := client.DecodeAttrs(f); err != nil {
			t.Errorf("%q: %v", name, err)
		}
		for i := range want {
			got := uint32(0)
			if i < len(f.Attrmask) {
				got = f.Attrmask[i]
			}
			if got != want[i] {
				t.Errorf("%q: attribute word %d: %#x returned, want %#x", name, i, got, want[i])
			}
		}
	}
}
