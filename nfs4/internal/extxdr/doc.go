// Package extxdr is the XDR encoding of txnfs's NFSv4 protocol extension
// (docs/protocol.md): the arguments and results of OP_TXN,
// OP_APPEND_OFFSET, TXN_BEGIN, TXN_JOIN, TXN_END and OP_CHAIN, and the
// unions ExtArgop4 and ExtResop4 that encode them with their opcode, as
// they appear in a COMPOUND; compound.go (hand-written, no XDR) puts them
// among nfsv4's standard arguments and results (Arg, Result, IsOp,
// Status). The server (nfs4/server) and the clients
// (nfs4/client, nfs4/internal/testclient) encode and decode the extension
// only through this package.
//
// ext.x is the definition; ext_xdr.go is generated from it by go-xdr's
// own compiler (the version in go.mod; `go generate` needs the module
// proxy once to fetch the compiler's ANTLR runtime). The compiler opens
// its output without truncating it, hence the rm.
package extxdr

//go:generate sh -c "rm -f ext_xdr.go && go run github.com/buildbarn/go-xdr/cmd/xdr_compiler@v0.0.0-20261005144839-a2095890273e -I \"$(go list -m -f '{{.Dir}}' github.com/buildbarn/go-xdr)\" -I . ext.x ext_xdr.go && gofmt -w ext_xdr.go"
