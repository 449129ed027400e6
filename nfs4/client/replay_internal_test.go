package client

import (
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestReplayClassification pins which COMPOUNDs are resent as new
// requests after NFS4ERR_RETRY_UNCACHED_REP (replaySafe) and which ask the
// server to cache their reply (cacheThis, against a 64 KiB limit).
func TestReplayClassification(t *testing.T) {
	lim := Limits{MaxResponseSizeCached: 64 << 10}
	open := func(cp *Compound, create bool) {
		cp.Open(1, []byte("o"), OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_READ, Create: create})
	}
	for _, c := range []struct {
		name        string
		build       func(cp *Compound)
		safe, cache bool
	}{
		{"lookup+getattr", func(cp *Compound) { cp.PutRootFH(); cp.Lookup("a"); cp.GetAttr(StatMask) }, true, false},
		{"readdir 1 MiB", func(cp *Compound) { cp.PutRootFH(); cp.Readdir(0, [8]byte{}, 1<<20, 1<<20, StatMask) }, true, false},
		{"open+read+close", func(cp *Compound) {
			cp.PutRootFH()
			open(cp, false)
			cp.Read(CurrentStateid, 0, 1<<20)
			cp.Close(CurrentStateid)
		}, true, false},
		{"open without close", func(cp *Compound) { cp.PutRootFH(); open(cp, false); cp.Read(CurrentStateid, 0, 10) }, false, true},
		{"close of another stateid", func(cp *Compound) {
			cp.PutRootFH()
			open(cp, false)
			cp.Close(nfsv4.Stateid4{Seqid: 3})
		}, false, true},
		{"open create+write+close", func(cp *Compound) {
			cp.PutRootFH()
			open(cp, true)
			cp.Write(CurrentStateid, 0, make([]byte, 1<<20), false)
			cp.Close(CurrentStateid)
		}, false, true},
		{"create+getfh", func(cp *Compound) { cp.PutRootFH(); cp.Mkdir("d", nfsv4.Fattr4{}); cp.GetFH() }, false, true},
		{"remove", func(cp *Compound) { cp.PutRootFH(); cp.Remove("x") }, false, true},
		{"transactional lookup", func(cp *Compound) { cp.Txn = true; cp.PutRootFH(); cp.Lookup("a") }, false, true},
		{"remove+read 1 MiB", func(cp *Compound) {
			cp.PutRootFH()
			cp.Remove("x")
			open(cp, false)
			cp.Read(CurrentStateid, 0, 1<<20)
			cp.Close(CurrentStateid)
		}, false, false},
		{"remove+getattr acl", func(cp *Compound) {
			cp.PutRootFH()
			cp.Remove("x")
			cp.GetAttr(MakeBitmap(nfsv4.FATTR4_ACL))
		}, false, false},
		{"setattr+getattr owner", func(cp *Compound) {
			cp.PutRootFH()
			cp.SetAttr(AnonymousStateid, nfsv4.Fattr4{})
			cp.GetAttr(StatMask)
		}, false, true},
		{"seek", func(cp *Compound) {
			cp.PutRootFH()
			cp.Add(&nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaStateid: AnonymousStateid, SaWhat: nfsv4.NFS4_CONTENT_HOLE}})
		}, true, false},
		{"deallocate+getattr", func(cp *Compound) {
			cp.PutRootFH()
			cp.Add(&nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{DaStateid: AnonymousStateid, DaLength: 10}})
			cp.GetAttr(StatMask)
		}, false, true},
		{"256 removes", func(cp *Compound) {
			cp.PutRootFH()
			for i := 0; i < 255; i++ {
				cp.Remove("x")
			}
		}, false, true},
		{"60 creates with stat", func(cp *Compound) {
			for i := 0; i < 60; i++ {
				cp.PutRootFH()
				open(cp, true)
				cp.Close(CurrentStateid)
				cp.GetAttr(StatMask) // owner strings: ~2.2 KiB each
			}
		}, false, false},
	} {
		var cp Compound
		c.build(&cp)
		if got := replaySafe(&cp); got != c.safe {
			t.Errorf("%s: replaySafe %v, want %v", c.name, got, c.safe)
		}
		if got := cacheThis(&cp, lim); got != c.cache {
			t.Errorf("%s: cacheThis %v, want %v (bound %d)", c.name, got, c.cache, replyBound(&cp))
		}
	}
	if b := attrsBound(MakeBitmap(nfsv4.FATTR4_SEC_LABEL + 1)); b != -1 {
		t.Errorf("unknown attribute bounded by %d", b)
	}
}
