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
