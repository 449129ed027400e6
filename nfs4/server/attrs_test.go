package server

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
)

// TestEncodeAttrsMatchesGenerated checks the hand-written encodings of
// encodeAttrs against the generated writers, attribute by attribute, for
// random attribute values (seeded; the seed is logged).
func TestEncodeAttrsMatchesGenerated(t *testing.T) {
	s := &Server{cfg: Config{MaxIO: 1 << 20}, fsid: 0x0123456789abcdef}
	var err error
	if s.st, err = newTestState(); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("TXNFS_ATTR_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (TXNFS_ATTR_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ref := func(bit uint32, a *fs.Attr) []byte {
		var w bytes.Buffer
		switch bit {
		case nfsv4.FATTR4_TYPE:
			nfsv4.WriteFattr4Type(&w, nfsType(a.Type))
		case nfsv4.FATTR4_CHANGE:
			nfsv4.WriteFattr4Change(&w, a.Change)
		case nfsv4.FATTR4_SIZE:
			nfsv4.WriteFattr4Size(&w, a.Size)
		case nfsv4.FATTR4_FSID:
			nfsv4.WriteFattr4Fsid(&w, &nfsv4.Fsid4{Major: s.fsid})
		case nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MOUNTED_ON_FILEID:
			nfsv4.WriteFattr4Fileid(&w, uint64(a.Ino))
		case nfsv4.FATTR4_MODE:
			nfsv4.WriteFattr4Mode(&w, a.Mode&fs.ModePerm)
		case nfsv4.FATTR4_NUMLINKS:
			nfsv4.WriteFattr4Numlinks(&w, a.Nlink)
		case nfsv4.FATTR4_OWNER:
			nfsv4.WriteFattr4Owner(&w, strconv.FormatUint(uint64(a.Uid), 10))
		case nfsv4.FATTR4_OWNER_GROUP:
			nfsv4.WriteFattr4OwnerGroup(&w, strconv.FormatUint(uint64(a.Gid), 10))
		case nfsv4.FATTR4_RAWDEV:
			nfsv4.WriteFattr4Rawdev(&w, &nfsv4.Specdata4{Specdata1: uint32(a.Rdev >> 32), Specdata2: uint32(a.Rdev)})
		case nfsv4.FATTR4_SPACE_USED:
			nfsv4.WriteFattr4SpaceUsed(&w, a.Used)
		case nfsv4.FATTR4_TIME_ACCESS:
			tm := nfsTime(a.Atime)
			nfsv4.WriteFattr4TimeAccess(&w, &tm)
		case nfsv4.FATTR4_TIME_CREATE:
			tm := nfsTime(a.Btime)
			nfsv4.WriteFattr4TimeCreate(&w, &tm)
		case nfsv4.FATTR4_TIME_METADATA:
			tm := nfsTime(a.Ctime)
			nfsv4.WriteFattr4TimeMetadata(&w, &tm)
		case nfsv4.FATTR4_TIME_MODIFY:
			tm := nfsTime(a.Mtime)
			nfsv4.WriteFattr4TimeModify(&w, &tm)
		default:
			return nil
		}
		return w.Bytes()
	}
	types := []fs.FileType{fs.TypeRegular, fs.TypeDirectory, fs.TypeSymlink, fs.TypeFIFO}
	anyTime := func() time.Time {
		if rng.IntN(8) == 0 {
			return time.Time{}
		}
		return time.Unix(rng.Int64N(1<<40)-1<<39, rng.Int64N(1e9))
	}
	checked := 0
	for i := 0; i < 200; i++ {
		a := fs.Attr{Ino: fs.Ino(rng.Uint64()), Gen: rng.Uint64(), Type: types[rng.IntN(len(types))],
			Mode: rng.Uint32(), Nlink: rng.Uint32(), Uid: rng.Uint32() >> rng.IntN(32), Gid: rng.Uint32() >> rng.IntN(32),
			Size: rng.Uint64(), Used: rng.Uint64(), Rdev: rng.Uint64(), Change: rng.Uint64(),
			Atime: anyTime(), Mtime: anyTime(), Ctime: anyTime(), Btime: anyTime()}
		forEachBit(supportedAttrs(2), func(bit uint32) bool {
			want := ref(bit, &a)
			if want == nil {
				return true
			}
			got := s.encodeAttrs(bmOf(bit), &a, &attrContext{minor: 2})
			if !bytes.Equal(got.AttrVals, want) {
				t.Fatalf("attribute %d of %+v: encoded %x, generated writer %x", bit, a, got.AttrVals, want)
			}
			checked++
			return true
		})
	}
	if checked < 200*15 {
		t.Fatalf("checked %d encodings", checked)
	}
}
