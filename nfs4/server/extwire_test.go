package server

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// be builds big-endian wire bytes from uint32s, uint64s and byte slices
// (the layouts of docs/protocol.md, as the hand-written encoders and
// decoders before the generated extxdr code wrote and read them).
func be(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case int:
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		case uint64:
			b = binary.BigEndian.AppendUint64(b, v)
		case []byte:
			b = append(b, v...)
		case string:
			b = append(b, v...)
		}
	}
	return b
}

// TestExtResultsWire pins the encoding of the extension's results with
// data (TXN_BEGIN, TXN_END's conflict report, OP_APPEND_OFFSET) to
// docs/protocol.md, byte for byte as the earlier hand-written encoders
// wrote them: old clients decode them.
func TestExtResultsWire(t *testing.T) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, tc := range []struct {
		name string
		res  nfsv4.NfsResop4
		want []byte
	}{
		{"TXN_BEGIN ok", txnBeginResult(nfsv4.NFS4_OK, id), be(uint32(OpTxnBegin), 0, id[:])},
		{"TXN_BEGIN delay", txnBeginResult(nfsv4.NFS4ERR_DELAY, id), be(uint32(OpTxnBegin), uint32(nfsv4.NFS4ERR_DELAY))},
		{"TXN_END ok", txnEndResult(nfsv4.NFS4_OK, ""), be(uint32(OpTxnEnd), 0)},
		{"TXN_END conflict", txnEndResult(nfsv4.NFS4ERR_NOT_SAME, "abcde"),
			be(uint32(OpTxnEnd), uint32(nfsv4.NFS4ERR_NOT_SAME), 5, "abcde", []byte{0, 0, 0})},
		{"TXN_END other error", txnEndResult(nfsv4.NFS4ERR_BAD_STATEID, "ignored"), be(uint32(OpTxnEnd), uint32(nfsv4.NFS4ERR_BAD_STATEID))},
		{"APPEND_OFFSET ok", appendOffsetResult(nfsv4.NFS4_OK, 1<<40+3), be(uint32(OpAppendOffset), 0, uint64(1<<40+3))},
		{"APPEND_OFFSET error", appendOffsetResult(nfsv4.NFS4ERR_INVAL, 7), be(uint32(OpAppendOffset), uint32(nfsv4.NFS4ERR_INVAL))},
	} {
		var b bytes.Buffer
		if _, err := tc.res.WriteTo(&b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(b.Bytes(), tc.want) {
			t.Errorf("%s: %x, want %x", tc.name, b.Bytes(), tc.want)
		}
		if n := tc.res.GetEncodedSizeBytes(); n != len(tc.want) {
			t.Errorf("%s: encoded size %d, want %d (reply-size accounting)", tc.name, n, len(tc.want))
		}
	}
}

// TestExtArgsWire decodes the extension's arguments in the layouts of
// docs/protocol.md (what old clients send), with a standard operation
// after each, which must decode from the right offset.
func TestExtArgsWire(t *testing.T) {
	id := [16]byte{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6}
	putroot := be(uint32(nfsv4.OP_PUTROOTFH))
	for _, tc := range []struct {
		name  string
		wire  []byte
		op    decodedOp
		chain *chainArgs
	}{
		{"OP_TXN", be(uint32(OpTxn), 0), decodedOp{code: OpTxn}, nil},
		{"OP_APPEND_OFFSET", be(uint32(OpAppendOffset), 0), decodedOp{code: OpAppendOffset}, nil},
		{"TXN_BEGIN", be(uint32(OpTxnBegin), 0, uint64(0x1122334455667788)),
			decodedOp{code: OpTxnBegin, txn: &txnArgs{clientID: 0x1122334455667788}}, nil},
		{"TXN_JOIN", be(uint32(OpTxnJoin), id[:], uint64(42)), decodedOp{code: OpTxnJoin, txn: &txnArgs{id: id, clientID: 42}}, nil},
		{"TXN_END commit", be(uint32(OpTxnEnd), id[:], uint64(42), 1), decodedOp{code: OpTxnEnd, txn: &txnArgs{id: id, clientID: 42, commit: true}}, nil},
		{"TXN_END abort", be(uint32(OpTxnEnd), id[:], uint64(42), 0), decodedOp{code: OpTxnEnd, txn: &txnArgs{id: id, clientID: 42}}, nil},
		{"OP_CHAIN", be(uint32(OpChain), uint64(0xdeadbeef01), 7, 1), decodedOp{code: OpChain}, &chainArgs{id: 0xdeadbeef01, seq: 7, flags: 1}},
	} {
		r := bytes.NewReader(append(tc.wire, putroot...))
		op, chain, ok := decodeExtOp(r)
		if !ok {
			t.Fatalf("%s: does not decode", tc.name)
		}
		if op.code != tc.op.code || op.flags != tc.op.flags || (op.txn == nil) != (tc.op.txn == nil) ||
			op.txn != nil && *op.txn != *tc.op.txn || (chain == nil) != (tc.chain == nil) || chain != nil && *chain != *tc.chain {
			t.Errorf("%s: decoded %+v %+v (txn %+v), want %+v %+v (txn %+v)", tc.name, op, chain, op.txn, tc.op, tc.chain, tc.op.txn)
		}
		if code, ok := peekOpcode(r); !ok || code != nfsv4.OP_PUTROOTFH {
			t.Errorf("%s: the next operation is read at the wrong offset (%v %v)", tc.name, code, ok)
		}
	}
	// An XDR bool is 0 or 1: TXN_END with commit 2 is BADXDR, as before.
	if _, _, ok := decodeExtOp(bytes.NewReader(be(uint32(OpTxnEnd), id[:], uint64(42), 2))); ok {
		t.Error("TXN_END with commit=2 decoded")
	}
}
