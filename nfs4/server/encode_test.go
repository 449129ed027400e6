package server

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestEncodeCompoundSegments checks encodeCompound's segmentation of
// random replies (seeded: TXNFS_ENCODE_SEED): put back together, the
// segments are the generated COMPOUND4res encoding, and every successful
// READ's payload of at least minReadSegment bytes (and any other write of
// at least minSegment) is a segment by reference, not a copy.
func TestEncodeCompoundSegments(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("TXNFS_ENCODE_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (TXNFS_ENCODE_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	bytesN := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	read := func(n int) nfsv4.NfsResop4 {
		return &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: rng.IntN(2) == 0, Data: bytesN(n)}}}
	}
	gen := []func() nfsv4.NfsResop4{
		func() nfsv4.NfsResop4 { return read(rng.IntN(5000)) },
		func() nfsv4.NfsResop4 { return read(minReadSegment + rng.IntN(4)) },
		func() nfsv4.NfsResop4 { return read(rng.IntN(70000)) },
		func() nfsv4.NfsResop4 {
			return &nfsv4.NfsResop4_OP_GETFH{Opgetfh: &nfsv4.Getfh4res_NFS4_OK{Resok4: nfsv4.Getfh4resok{Object: bytesN(rng.IntN(nfsv4.NFS4_FHSIZE + 1))}}}
		},
		func() nfsv4.NfsResop4 {
			return &nfsv4.NfsResop4_OP_GETATTR{Opgetattr: &nfsv4.Getattr4res_NFS4_OK{Resok4: nfsv4.Getattr4resok{
				ObjAttributes: nfsv4.Fattr4{Attrmask: []uint32{rng.Uint32()}, AttrVals: bytesN([]int{rng.IntN(300), minSegment}[rng.IntN(2)])}}}}
		},
		func() nfsv4.NfsResop4 { return errRes(nfsv4.OP_READ, nfsv4.NFS4ERR_STALE) },
		func() nfsv4.NfsResop4 { return appendOffsetResult(nfsv4.NFS4_OK, rng.Uint64()) },
		func() nfsv4.NfsResop4 { return txnEndResult(nfsv4.NFS4ERR_NOT_SAME, "conflict ü") },
		func() nfsv4.NfsResop4 { return txnBeginResult(nfsv4.NFS4ERR_RESOURCE, [16]byte{}) },
	}
	for i := 0; i < 500; i++ {
		var results []nfsv4.NfsResop4
		for range rng.IntN(12) {
			results = append(results, gen[rng.IntN(len(gen))]())
		}
		var txr *txnResult
		if rng.IntN(3) == 0 {
			txr = &txnResult{op: []nfsv4.NfsOpnum4{0, OpTxnJoin, OpChain}[rng.IntN(3)], status: nfsv4.NFS4ERR_DELAY}
		}
		enc := encodeCompound(nfsv4.NFS4_OK, "tag", txr, results)
		all := results
		if txr != nil {
			all = append([]nfsv4.NfsResop4{txr.result()}, results...)
		}
		var ref bytes.Buffer
		rep := nfsv4.Compound4res{Status: nfsv4.NFS4_OK, Tag: "tag", Resarray: all}
		if _, err := rep.WriteTo(&ref); err != nil {
			t.Fatal(err)
		}
		if got := enc.flatten(); !bytes.Equal(got, ref.Bytes()) {
			t.Fatalf("reply of %d results: encoded %d bytes, generated %d, differing", len(all), len(got), ref.Len())
		}
		segs := append([][]byte{enc.head}, enc.more...)
		isSegment := func(d []byte) bool {
			for _, s := range segs {
				if sameBytes(s, d) {
					return true
				}
			}
			return false
		}
		for _, r := range results {
			d := readPayload(r)
			if g, ok := r.(*nfsv4.NfsResop4_OP_GETATTR); ok {
				if ok, isOK := g.Opgetattr.(*nfsv4.Getattr4res_NFS4_OK); isOK && len(ok.Resok4.ObjAttributes.AttrVals) >= minSegment {
					d = ok.Resok4.ObjAttributes.AttrVals
				}
			}
			if len(d) >= minReadSegment && !isSegment(d) {
				t.Fatalf("reply of %d results: a payload of %d bytes was copied", len(all), len(d))
			}
		}
	}
}

// TestTxnResultEncoding pins the extension's bare-status results to
// docs/protocol.md: opcode, then status.
func TestTxnResultEncoding(t *testing.T) {
	for _, tc := range []struct {
		op   nfsv4.NfsOpnum4
		want []byte
	}{
		{0, []byte{0x74, 0x78, 0x6e, 0, 0, 0, 0x27, 0x18}},
		{OpTxnJoin, []byte{0x74, 0x78, 0x6e, 3, 0, 0, 0x27, 0x18}},
		{OpChain, []byte{0x74, 0x78, 0x6e, 5, 0, 0, 0x27, 0x18}},
	} {
		var b bytes.Buffer
		if _, err := (&txnResult{op: tc.op, status: nfsv4.NFS4ERR_DELAY}).result().WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), tc.want) {
			t.Errorf("op %#x: %x, want %x", tc.op, b.Bytes(), tc.want)
		}
	}
}

// TestErrResOpcodes: errRes gives every operation's failure a result of
// that operation (SETATTR's, whose failure arm carries attrsset, was an
// OP_ILLEGAL result), also for LOCK's NFS4ERR_DENIED arm.
func TestErrResOpcodes(t *testing.T) {
	for code := nfsv4.OP_ACCESS; code <= nfsv4.OP_CLONE; code++ {
		for _, st := range []nfsv4.Nfsstat4{nfsv4.NFS4ERR_IO, nfsv4.NFS4ERR_DELAY, nfsv4.NFS4ERR_REP_TOO_BIG, nfsv4.NFS4ERR_DENIED} {
			if r := errRes(code, st); r.GetResop() != code {
				t.Errorf("errRes(%s, %d) is a %s result", opName(code), st, opName(r.GetResop()))
			}
		}
	}
}
