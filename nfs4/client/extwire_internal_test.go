package client

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestExtArgsWire pins the client's encoding of the extension's
// arguments to docs/protocol.md, byte for byte as the earlier
// hand-written encoders wrote them (old servers decode them), and its
// decoding of results in those layouts.
func TestExtArgsWire(t *testing.T) {
	u32 := func(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
	u64 := func(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
	id := TxnID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, tc := range []struct {
		name string
		arg  nfsv4.NfsArgop4
		want []byte
	}{
		{"OP_TXN", txnArg(), u32(u32(nil, uint32(OpTxn)), 0)},
		{"TXN_BEGIN", txnBeginArg(0x1122334455667788), u64(u32(u32(nil, uint32(OpTxnBegin)), 0), 0x1122334455667788)},
		{"TXN_JOIN", txnJoinArg(id, 42), u64(append(u32(nil, uint32(OpTxnJoin)), id[:]...), 42)},
		{"TXN_END", txnEndArg(id, 42, true), u32(u64(append(u32(nil, uint32(OpTxnEnd)), id[:]...), 42), 1)},
		{"TXN_END abort", txnEndArg(id, 42, false), u32(u64(append(u32(nil, uint32(OpTxnEnd)), id[:]...), 42), 0)},
		{"OP_CHAIN", chainArg(&Chain{ID: 0xdeadbeef01, Seq: 7, Last: true}), u32(u32(u64(u32(nil, uint32(OpChain)), 0xdeadbeef01), 7), 1)},
		{"OP_CHAIN not last", chainArg(&Chain{ID: 3, Seq: 0}), u32(u32(u64(u32(nil, uint32(OpChain)), 3), 0), 0)},
	} {
		var b bytes.Buffer
		if _, err := tc.arg.WriteTo(&b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(b.Bytes(), tc.want) {
			t.Errorf("%s: %x, want %x", tc.name, b.Bytes(), tc.want)
		}
		if n := tc.arg.GetEncodedSizeBytes(); n != len(tc.want) {
			t.Errorf("%s: encoded size %d, want %d", tc.name, n, len(tc.want))
		}
	}
	// A reply in the old layouts: OP_CHAIN's bare status, TXN_BEGIN with
	// its id, TXN_END with a conflict report, then PUTROOTFH.
	rep := u32(nil, 0) // status
	rep = u32(rep, 0)  // empty tag
	rep = u32(rep, 4)  // 4 results
	rep = u32(u32(rep, uint32(OpChain)), 0)
	rep = append(u32(u32(rep, uint32(OpTxnBegin)), 0), id[:]...)
	rep = append(u32(u32(u32(rep, uint32(OpTxnEnd)), uint32(nfsv4.NFS4ERR_NOT_SAME)), 5), "abcde\x00\x00\x00"...)
	rep = u32(u32(rep, uint32(nfsv4.OP_PUTROOTFH)), 0)
	r, err := decodeReply(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.chain == nil || *r.chain != nfsv4.NFS4_OK || len(r.results) != 3 {
		t.Fatalf("decoded chain %v, %d results", r.chain, len(r.results))
	}
	if got, ok := r.results[0].(*extRes).txnID(); !ok || got != id {
		t.Errorf("TXN_BEGIN id %x %v", got, ok)
	}
	if report, ok := r.results[1].(*extRes).conflict(); !ok || report != "abcde" {
		t.Errorf("TXN_END report %q %v", report, ok)
	}
	if r.results[2].GetResop() != nfsv4.OP_PUTROOTFH {
		t.Errorf("third result %v", r.results[2].GetResop())
	}
}
