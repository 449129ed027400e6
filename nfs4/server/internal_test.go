package server

import (
	"bytes"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/state"
)

// TestAttrMaskCoversEncoding checks, attribute by attribute, that the
// engine attributes attrMask selects are all encodeAttrs reads: encoding
// from the masked Attr (what GetAttrMask returns) gives the same bytes as
// from the full one.
func TestAttrMaskCoversEncoding(t *testing.T) {
	s := &Server{cfg: Config{MaxIO: 1 << 20}}
	var err error
	if s.st, err = newTestState(); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 123)
	full := fs.Attr{Ino: 42, Gen: 7, Type: fs.TypeRegular, Mode: 0o640, Nlink: 3, Uid: 1000, Gid: 100,
		Size: 12345, Used: 16384, Rdev: 5<<32 | 9, Change: 99,
		Atime: now, Mtime: now.Add(time.Second), Ctime: now.Add(2 * time.Second), Btime: now.Add(-time.Hour)}
	forEachBit(supportedAttrs(2), func(bit uint32) bool {
		if bmHas(writeOnlyAttrs, bit) {
			return true
		}
		mask := bmOf(bit)
		ac := &attrContext{minor: 2, handle: []byte("handle")}
		want := s.encodeAttrs(mask, &full, ac)
		masked := full.Mask(attrMask(mask))
		got := s.encodeAttrs(mask, &masked, ac)
		if !bytes.Equal(got.AttrVals, want.AttrVals) {
			t.Errorf("attribute %d: encoded from the masked attributes %x, want %x", bit, got.AttrVals, want.AttrVals)
		}
		return true
	})
	if attrMask(bmOf(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_FILEID)) != 0 {
		t.Error("type and fileid need no mutable attribute")
	}
}

func newTestState() (*state.Manager, error) {
	return state.New(state.Config{Clock: time.Now})
}

// TestQuickOps checks which compounds keep their connection while they
// run (rpc.Call.Release is not called): only metadata reads, small READs,
// OPEN without create and CLOSE. Anything that may write, wait for
// durability or move much data must release it, or pipelined requests of
// the connection would wait behind it.
func TestQuickOps(t *testing.T) {
	op := func(a nfsv4.NfsArgop4) decodedOp { return decodedOp{code: a.GetArgop(), arg: a} }
	quick := []nfsv4.NfsArgop4{
		&nfsv4.NfsArgop4_OP_PUTFH{}, &nfsv4.NfsArgop4_OP_LOOKUP{}, &nfsv4.NfsArgop4_OP_GETATTR{},
		&nfsv4.NfsArgop4_OP_GETFH{}, &nfsv4.NfsArgop4_OP_ACCESS{}, &nfsv4.NfsArgop4_OP_CLOSE{},
		&nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Count: 4096}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Openhow: &nfsv4.Openflag4_default{}}},
	}
	slow := []nfsv4.NfsArgop4{
		&nfsv4.NfsArgop4_OP_WRITE{}, &nfsv4.NfsArgop4_OP_COMMIT{}, &nfsv4.NfsArgop4_OP_CREATE{},
		&nfsv4.NfsArgop4_OP_REMOVE{}, &nfsv4.NfsArgop4_OP_RENAME{}, &nfsv4.NfsArgop4_OP_SETATTR{},
		&nfsv4.NfsArgop4_OP_READDIR{}, &nfsv4.NfsArgop4_OP_LOCK{}, &nfsv4.NfsArgop4_OP_COPY{},
		&nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Count: 1 << 20}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Openhow: &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{}}}},
	}
	all := []decodedOp{op(&nfsv4.NfsArgop4_OP_SEQUENCE{})}
	for _, a := range quick {
		all = append(all, op(a))
	}
	if !quickOps(all) {
		t.Fatal("a compound of quick operations is not quick")
	}
	for _, a := range slow {
		if quickOps(append(all[:len(all):len(all)], op(a))) {
			t.Errorf("a compound with %T is quick", a)
		}
	}
	if quickOps([]decodedOp{{code: OpAppendOffset}}) || quickOps([]decodedOp{{code: nfsv4.OP_ILLEGAL}}) {
		t.Error("private or illegal operations are quick")
	}
}
