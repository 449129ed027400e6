package server

import (
	"bytes"
	"io"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// Decoding of COMPOUND4args. Everything is decoded by go-xdr's generated
// code: the standard operations by nfsv4.ReadNfsArgop4, the extension's
// (docs/protocol.md) by extxdr.ReadExtArgop4 (generated from
// nfs4/internal/extxdr/ext.x). The loop over the operations is ours only
// because the extension's operations are not in nfs_argop4 and an unknown
// opcode ends the decoding (OP_ILLEGAL) instead of failing it.

// readTag reads COMPOUND4args' tag: a UTF-8 string, here of at most
// maxTagLen bytes.
func readTag(r io.Reader) (string, bool) {
	tag, _, err := runtime.ReadUTF8String(r, maxTagLen)
	return tag, err == nil
}

// peekOpcode returns the opcode at r's position without consuming it.
func peekOpcode(r *bytes.Reader) (nfsv4.NfsOpnum4, bool) {
	var code nfsv4.NfsOpnum4
	if _, err := code.ReadFrom(r); err != nil {
		return 0, false
	}
	r.Seek(-nfsv4.NfsOpnum4EncodedSizeBytes, io.SeekCurrent)
	return code, true
}

// decodeExtOp decodes the extension operation at r's position (opcode
// included) into op, or into chain for OpChain; ok=false means the
// arguments do not decode (BADXDR).
func decodeExtOp(r *bytes.Reader) (op decodedOp, chain *chainArgs, ok bool) {
	arg, _, err := extxdr.ReadExtArgop4(r)
	if err != nil {
		return decodedOp{}, nil, false
	}
	op.code = nfsv4.NfsOpnum4(arg.GetArgop())
	switch a := arg.(type) {
	case *extxdr.ExtArgop4_OP_TXN:
		op.flags = a.Optxn.Flags
	case *extxdr.ExtArgop4_OP_APPEND_OFFSET:
		op.flags = a.Opappendoffset.Flags
	case *extxdr.ExtArgop4_OP_TXN_BEGIN:
		op.txn = &txnArgs{flags: a.Optxnbegin.Flags, clientID: a.Optxnbegin.Clientid}
	case *extxdr.ExtArgop4_OP_TXN_JOIN:
		op.txn = &txnArgs{id: a.Optxnjoin.Txnid, clientID: a.Optxnjoin.Clientid}
	case *extxdr.ExtArgop4_OP_TXN_END:
		op.txn = &txnArgs{id: a.Optxnend.Txnid, clientID: a.Optxnend.Clientid, commit: a.Optxnend.Commit}
	case *extxdr.ExtArgop4_OP_CHAIN:
		chain = &chainArgs{id: a.Opchain.Chain, seq: a.Opchain.Seq, flags: a.Opchain.Flags}
	}
	return op, chain, true
}

// decodeStdOp decodes the standard operation code at r's position in args
// (opcode included). A WRITE is decoded from the record as a
// runtime.SliceReader (recordReader), so its data is the record's bytes,
// not a copy: the zero-copy write path (payload loans, aligned direct
// puts, the CRC computed while the record arrived) works on the request
// record. Every other operation's opaques are copies: owners, handles and
// verifiers may outlive the record (a pooled record is reused once the
// reply is written).
func decodeStdOp(r *bytes.Reader, args []byte, code nfsv4.NfsOpnum4) (nfsv4.NfsArgop4, bool) {
	var rd io.Reader = r
	if code == nfsv4.OP_WRITE {
		rd = &recordReader{Reader: r, rec: args}
	}
	arg, _, err := nfsv4.ReadNfsArgop4(rd)
	return arg, err == nil
}

// recordReader reads the request record rec through r, as a
// runtime.SliceReader: opaques decoded from it alias rec.
type recordReader struct {
	*bytes.Reader
	rec []byte
}

// Slice implements runtime.SliceReader.
func (r *recordReader) Slice(n int) []byte {
	off := len(r.rec) - r.Len()
	n = min(n, r.Len())
	r.Seek(int64(n), io.SeekCurrent)
	return r.rec[off : off+n]
}

var _ runtime.SliceReader = (*recordReader)(nil)

// appendOffsetResult is OP_APPEND_OFFSET's result: the offset if st is
// NFS4_OK.
func appendOffsetResult(st nfsv4.Nfsstat4, off uint64) nfsv4.NfsResop4 {
	var res extxdr.AppendOffset4res = &extxdr.AppendOffset4res_default{Status: st}
	if st == nfsv4.NFS4_OK {
		res = &extxdr.AppendOffset4res_NFS4_OK{Offset: off}
	}
	return &extxdr.Result{Res: &extxdr.ExtResop4_OP_APPEND_OFFSET{Opappendoffset: res}}
}

// txnBeginResult is TXN_BEGIN's result: the transaction's id if st is
// NFS4_OK.
func txnBeginResult(st nfsv4.Nfsstat4, id [16]byte) nfsv4.NfsResop4 {
	var res extxdr.TxnBegin4res = &extxdr.TxnBegin4res_default{Status: st}
	if st == nfsv4.NFS4_OK {
		res = &extxdr.TxnBegin4res_NFS4_OK{Txnid: id}
	}
	return &extxdr.Result{Res: &extxdr.ExtResop4_OP_TXN_BEGIN{Optxnbegin: res}}
}

// txnEndResult is TXN_END's result: the conflict report if st is
// NFS4ERR_NOT_SAME.
func txnEndResult(st nfsv4.Nfsstat4, report string) nfsv4.NfsResop4 {
	var res extxdr.TxnEnd4res = &extxdr.TxnEnd4res_default{Status: st}
	if st == nfsv4.NFS4ERR_NOT_SAME {
		res = &extxdr.TxnEnd4res_NFS4ERR_NOT_SAME{Report: report}
	}
	return &extxdr.Result{Res: &extxdr.ExtResop4_OP_TXN_END{Optxnend: res}}
}

// result is the encodable result of t: OP_TXN's, TXN_JOIN's or OP_CHAIN's
// (each a bare nfsstat4).
func (t *txnResult) result() nfsv4.NfsResop4 {
	var res extxdr.ExtResop4
	switch t.op {
	case OpTxnJoin:
		res = &extxdr.ExtResop4_OP_TXN_JOIN{Optxnjoin: extxdr.TxnJoin4res{Status: t.status}}
	case OpChain:
		res = &extxdr.ExtResop4_OP_CHAIN{Opchain: extxdr.Chain4res{Status: t.status}}
	default:
		res = &extxdr.ExtResop4_OP_TXN{Optxn: extxdr.Txn4res{Status: t.status}}
	}
	return &extxdr.Result{Res: res}
}
