package client

import (
	"io"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// The txnfs protocol extension's operations (docs/protocol.md), encoded
// and decoded only by the generated extxdr package (from
// nfs4/internal/extxdr/ext.x).

// txnArg is OP_TXN (flags 0).
func txnArg() nfsv4.NfsArgop4 {
	return &extxdr.Arg{Op: &extxdr.ExtArgop4_OP_TXN{}}
}

// txnBeginArg is TXN_BEGIN (flags 0).
func txnBeginArg(clientID uint64) nfsv4.NfsArgop4 {
	return &extxdr.Arg{Op: &extxdr.ExtArgop4_OP_TXN_BEGIN{Optxnbegin: extxdr.TxnBegin4args{Clientid: clientID}}}
}

// txnJoinArg is TXN_JOIN.
func txnJoinArg(id TxnID, clientID uint64) nfsv4.NfsArgop4 {
	return &extxdr.Arg{Op: &extxdr.ExtArgop4_OP_TXN_JOIN{Optxnjoin: extxdr.TxnJoin4args{Txnid: id, Clientid: clientID}}}
}

// txnEndArg is TXN_END.
func txnEndArg(id TxnID, clientID uint64, commit bool) nfsv4.NfsArgop4 {
	return &extxdr.Arg{Op: &extxdr.ExtArgop4_OP_TXN_END{Optxnend: extxdr.TxnEnd4args{Txnid: id, Clientid: clientID, Commit: commit}}}
}

// chainArg is OP_CHAIN for ch.
func chainArg(ch *Chain) nfsv4.NfsArgop4 {
	var flags uint32
	if ch.Last {
		flags |= extxdr.CHAIN4_LAST
	}
	return &extxdr.Arg{Op: &extxdr.ExtArgop4_OP_CHAIN{Opchain: extxdr.Chain4args{Chain: ch.ID, Seq: ch.Seq, Flags: flags}}}
}

// extRes is a decoded TXN_BEGIN or TXN_END result among a reply's
// Results (the bare-status results of OP_TXN, TXN_JOIN and OP_CHAIN are
// split out of Results by decodeReply).
type extRes struct{ extxdr.Result }

// txnID returns the transaction id of a successful TXN_BEGIN result.
func (r *extRes) txnID() (TxnID, bool) {
	if b, ok := r.Res.(*extxdr.ExtResop4_OP_TXN_BEGIN); ok {
		if ok, isOK := b.Optxnbegin.(*extxdr.TxnBegin4res_NFS4_OK); isOK {
			return ok.Txnid, true
		}
	}
	return TxnID{}, false
}

// conflict returns the report of a TXN_END result that is a commit
// conflict (NFS4ERR_NOT_SAME).
func (r *extRes) conflict() (string, bool) {
	if e, ok := r.Res.(*extxdr.ExtResop4_OP_TXN_END); ok {
		if c, isConflict := e.Optxnend.(*extxdr.TxnEnd4res_NFS4ERR_NOT_SAME); isConflict {
			return c.Report, true
		}
	}
	return "", false
}

// readExtResult decodes the extension result at r's position (opcode
// included) and returns it with its status.
func readExtResult(r io.Reader) (extxdr.ExtResop4, nfsv4.Nfsstat4, error) {
	res, _, err := extxdr.ReadExtResop4(r)
	if err != nil {
		return nil, 0, err
	}
	return res, extxdr.Status(res), nil
}
