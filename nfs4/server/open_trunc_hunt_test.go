package server_test

import (
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestOpenTruncateRespectsShareDeny: an OPEN whose createattrs truncate
// an existing file (UNCHECKED4, size 0) that another open-owner holds
// with OPEN4_SHARE_DENY_WRITE fails with SHARE_DENIED and leaves the
// file alone. (It truncated the file, then failed the share check.)
func TestOpenTruncateRespectsShareDeny(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "trunc-deny")
	writeFile(t, c, "f", []byte("keep me"))
	okT(t)(c.Compound(putroot(), openWith(c, "f", "holder", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE, nil)))
	r, err := c.Compound(putroot(), openWith(c, "f", "truncator", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE,
		&nfsv4.Createhow4_UNCHECKED4{Createattrs: sizeAttr(0)}))
	wantStatus(t, r, err, nfsv4.NFS4ERR_SHARE_DENIED)
	if d := readFile(t, c, "f"); string(d) != "keep me" {
		t.Fatalf("after the denied OPEN: %q, want the file unchanged", d)
	}
	// The holder's own truncating OPEN is not denied by its reservation.
	okT(t)(c.Compound(putroot(), openWith(c, "f", "holder", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE,
		&nfsv4.Createhow4_UNCHECKED4{Createattrs: sizeAttr(0)})))
	if d := readFile(t, c, "f"); len(d) != 0 {
		t.Fatalf("after the holder's truncating OPEN: %q, want empty", d)
	}
}

// TestOpenExclusiveRetransmitDoesNotTruncate: an EXCLUSIVE4_1 OPEN whose
// createattrs hold size 0, sent again with the same verifier after the
// file was written (a retransmission the reply cache did not answer,
// RFC 8881 §18.16.3), succeeds without applying the attributes again: the
// file keeps its data. (Its size 0 truncated the file.)
func TestOpenExclusiveRetransmitDoesNotTruncate(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "excl-trunc")
	how := &nfsv4.Createhow4_EXCLUSIVE4_1{ChCreateboth: nfsv4.Creatverfattr{CvaVerf: [8]byte{7, 7, 7}, CvaAttrs: sizeAttr(0)}}
	okT(t)(c.Compound(putroot(), openWith(c, "x", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, how), write(current, 0, []byte("data")), closeOp(current)))
	okT(t)(c.Compound(putroot(), openWith(c, "x", "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, 0, how), closeOp(current)))
	if d := readFile(t, c, "x"); string(d) != "data" {
		t.Fatalf("after the resent exclusive OPEN: %q, want \"data\"", d)
	}
}

// TestOpenTruncateNeedsWriteAccess: a truncating OPEN (UNCHECKED4, size
// 0) of an existing file the caller may only read fails with ACCESS, also
// when it asks only for read access, and of a directory with ISDIR; both
// leave the object alone.
func TestOpenTruncateNeedsWriteAccess(t *testing.T) {
	ts := startServer(t)
	root := ts.session(t, 1, "trunc-root")
	writeFile(t, root, "f", []byte("keep me")) // 0644, owned by root
	okT(t)(root.Compound(putroot(), mkdir("d"), openCreate(root, "inside"), closeOp(current)))
	user := ts.session(t, 1, "trunc-user")
	user.Uid, user.Gid = 1000, 1000
	for _, access := range []uint32{nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_ACCESS_READ} {
		r, err := user.Compound(putroot(), openWith(user, "f", "o", access, 0, &nfsv4.Createhow4_UNCHECKED4{Createattrs: sizeAttr(0)}))
		wantStatus(t, r, err, nfsv4.NFS4ERR_ACCESS)
	}
	if d := readFile(t, root, "f"); string(d) != "keep me" {
		t.Fatalf("after the refused OPENs: %q", d)
	}
	r, err := root.Compound(putroot(), openWith(root, "d", "o", nfsv4.OPEN4_SHARE_ACCESS_WRITE, 0, &nfsv4.Createhow4_UNCHECKED4{Createattrs: sizeAttr(0)}))
	wantStatus(t, r, err, nfsv4.NFS4ERR_ISDIR)
	okT(t)(root.Compound(putroot(), lookup("d"), lookup("inside")))
}

// TestAnonIORespectsShareDeny: I/O under the special stateids honours the
// share reservations of the file's opens (RFC 8881 §8.2.3, §9.7): while
// another owner holds the file with DENY_WRITE, WRITE and SETATTR(size)
// with the anonymous stateid fail with LOCKED and change nothing; while
// one holds it with DENY_READ, READ with the all-zeros stateid fails with
// LOCKED, and with the all-ones (READ bypass) stateid it reads. Closing
// the holder lifts the refusal. (Found by D11: an anonymous SETATTR
// emptied a file held with DENY_WRITE.)
func TestAnonIORespectsShareDeny(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "anon-deny")
	writeFile(t, c, "f", []byte("keep me"))
	bypass := nfsv4.Stateid4{Seqid: 0xffffffff, Other: [12]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	truncate := &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: anon, ObjAttributes: sizeAttr(0)}}

	hold := func(deny uint32) nfsv4.Stateid4 {
		t.Helper()
		r := okT(t)(c.Compound(putroot(), openWith(c, "f", "holder", nfsv4.OPEN4_SHARE_ACCESS_READ, deny, nil)))
		return r.Results[1].(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid
	}
	release := func(sid nfsv4.Stateid4) {
		t.Helper()
		okT(t)(c.Compound(putroot(), lookup("f"), closeOp(sid)))
	}

	sid := hold(nfsv4.OPEN4_SHARE_DENY_WRITE)
	for _, op := range []nfsv4.NfsArgop4{write(anon, 0, []byte("XXXX")), truncate, write(bypass, 0, []byte("XXXX"))} {
		r, err := c.Compound(putroot(), lookup("f"), op)
		wantStatus(t, r, err, nfsv4.NFS4ERR_LOCKED)
	}
	okT(t)(c.Compound(putroot(), lookup("f"), read(anon, 0, 100))) // DENY_WRITE does not deny reading
	if d := readFile(t, c, "f"); string(d) != "keep me" {
		t.Fatalf("after the refused anonymous writes: %q, want the file unchanged", d)
	}
	release(sid)

	sid = hold(nfsv4.OPEN4_SHARE_DENY_READ)
	r, err := c.Compound(putroot(), lookup("f"), read(anon, 0, 100))
	wantStatus(t, r, err, nfsv4.NFS4ERR_LOCKED)
	okT(t)(c.Compound(putroot(), lookup("f"), read(bypass, 0, 100)))
	release(sid)

	okT(t)(c.Compound(putroot(), lookup("f"), truncate))
	if d := readFile(t, c, "f"); len(d) != 0 {
		t.Fatalf("after the anonymous truncation with no holder: %q, want empty", d)
	}
}
