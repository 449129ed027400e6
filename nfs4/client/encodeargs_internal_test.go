package client

import (
	"bytes"
	"math/rand"
	"runtime"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	xdr "github.com/buildbarn/go-xdr/pkg/runtime"
)

// generatedArgs is the COMPOUND4args encoding by the generated encoders
// alone, as encodeArgsJoin built it before WRITE data was sent by
// reference.
func generatedArgs(t *testing.T, tag string, minor uint32, chain *Chain, seq *nfsv4.Sequence4args, ops []nfsv4.NfsArgop4) []byte {
	t.Helper()
	var b bytes.Buffer
	xdr.WriteUTF8String(&b, 1024, tag)
	xdr.WriteUnsignedInt(&b, minor)
	n := len(ops) + 1
	if chain != nil {
		n++
	}
	xdr.WriteUnsignedInt(&b, uint32(n))
	if chain != nil {
		chainArg(chain).WriteTo(&b)
	}
	op := nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: *seq}
	if _, err := op.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if _, err := op.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// TestEncodeArgsWriteByReference: a COMPOUND whose large WRITEs' data is
// sent by reference encodes to the same bytes as the generated encoders',
// for data lengths around minRefWrite and not multiples of 4, and the
// data segments are the caller's slices.
func TestEncodeArgsWriteByReference(t *testing.T) {
	seed := rand.Int63()
	rng := rand.New(rand.NewSource(seed))
	defer func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	}()
	seq := &nfsv4.Sequence4args{SaSequenceid: 7, SaSlotid: 1, SaHighestSlotid: 3}
	for round := 0; round < 200; round++ {
		var c Compound
		var datas [][]byte
		for i := rng.Intn(8); i >= 0; i-- {
			switch rng.Intn(3) {
			case 0:
				c.Open(1, []byte("owner"), OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE, Create: true})
			case 1:
				n := []int{0, 1, 3, 1000, minRefWrite - 1, minRefWrite, minRefWrite + 1, minRefWrite + 3, 16384, 70001}[rng.Intn(10)]
				d := make([]byte, n)
				rng.Read(d)
				datas = append(datas, d)
				c.Write(CurrentStateid, rng.Uint64(), d, rng.Intn(2) == 0)
			case 2:
				c.Close(CurrentStateid)
			}
		}
		var chain *Chain
		if rng.Intn(2) == 0 {
			chain = &Chain{ID: rng.Uint64(), Seq: rng.Uint32()}
		}
		got, err := encodeArgsJoin("tag", 1, false, TxnID{}, 0, chain, seq, c.ops, c.size)
		if err != nil {
			t.Fatal(err)
		}
		want := generatedArgs(t, "tag", 1, chain, seq, c.ops)
		if flat := bytes.Join(got, nil); !bytes.Equal(flat, want) {
			t.Fatalf("round %d: encoding differs from the generated one (%d vs %d bytes)", round, len(flat), len(want))
		}
		if got.size() != len(want) {
			t.Fatalf("round %d: size %d, want %d", round, got.size(), len(want))
		}
		refs := 0
		for _, d := range datas {
			if len(d) < minRefWrite {
				continue
			}
			refs++
			found := false
			for _, s := range got {
				if len(s) == len(d) && &s[0] == &d[0] {
					found = true
				}
			}
			if !found {
				t.Fatalf("round %d: a WRITE's %d bytes were copied, not referenced", round, len(d))
			}
		}
		if len(got) != 2*refs+1 {
			t.Fatalf("round %d: %d segments for %d referenced WRITEs", round, len(got), refs)
		}
	}
}

// TestEncodeArgsWriteAllocation: encoding 64 OPEN + WRITE(16 KiB) +
// CLOSE allocates far less than the data (which it used to copy into a
// fresh, zeroed buffer per COMPOUND).
func TestEncodeArgsWriteAllocation(t *testing.T) {
	var c Compound
	data := make([]byte, 16<<10)
	for i := 0; i < 64; i++ {
		c.Open(1, []byte("owner"), OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE, Create: true})
		c.Write(CurrentStateid, 0, data, true)
		c.Close(CurrentStateid)
	}
	seq := &nfsv4.Sequence4args{}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const rounds = 10
	for i := 0; i < rounds; i++ {
		if _, err := encodeArgsJoin("", 1, false, TxnID{}, 0, &Chain{}, seq, c.ops, c.size); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / rounds
	if limit := uint64(64 * len(data) / 4); per > limit {
		t.Fatalf("encoding allocated %d bytes per COMPOUND, want at most %d (the data is %d)", per, limit, 64*len(data))
	}
}
