package client

import (
	"errors"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// OpChain is the private operation of the txnfs ordered-chain extension
// (docs/protocol.md §4). Sent first (before SEQUENCE), it makes the
// COMPOUND part of a chain: the server runs the chain's COMPOUNDs in
// order and refuses, running nothing, every one after a COMPOUND of the
// chain that stopped early, so a client may keep several ordered
// COMPOUNDs in flight. A server without it answers OP_ILLEGAL before
// executing anything.
const OpChain nfsv4.NfsOpnum4 = extxdr.OP_CHAIN

// chainLast is the CHAIN4args flag of a chain's last COMPOUND.
const chainLast = 0x1

// Chain places a Compound in an ordered chain (Compound.Chain).
type Chain struct {
	// ID names the chain among the session's live chains (the client
	// picks it, e.g. with Client.NewChainID).
	ID uint64
	// Seq is 0 for the chain's first COMPOUND, then 1, 2, ...
	Seq uint32
	// Last marks the chain's last COMPOUND (the server then forgets the
	// chain; without it, the chain's state expires after a minute).
	Last bool
}

// ErrChainUnsupported is returned for a chained COMPOUND sent to a server
// without the ordered-chain extension (or over NFSv4.0). Nothing ran.
var ErrChainUnsupported = errors.New("nfs4 client: server does not support chains of compounds")

// ErrChainRefused is wrapped by the error of a chained COMPOUND the
// server refused because an earlier COMPOUND of the chain stopped early
// or did not arrive (or, after a session error, that the client did not
// send again on a new session). Nothing of it ran: it may be sent again,
// unchained, once the COMPOUNDs before it are known to have succeeded.
var ErrChainRefused = errors.New("nfs4 client: chained compound refused")

// chainRefused is the error of a chained COMPOUND refused with status st.
type chainRefused struct{ st nfsv4.Nfsstat4 }

func (e *chainRefused) Error() string {
	return ErrChainRefused.Error() + ": " + StatusName(e.st)
}

func (e *chainRefused) Is(target error) bool { return target == ErrChainRefused }

// Unwrap gives the refusal as a *StatusError for OpChain.
func (e *chainRefused) Unwrap() error { return &StatusError{Op: OpChain, Status: e.st} }

// chainErr maps a non-OK OP_CHAIN result to an error.
func chainErr(st nfsv4.Nfsstat4) error {
	if st == nfsv4.NFS4ERR_NOTSUPP {
		return ErrChainUnsupported
	}
	return &chainRefused{st}
}

// NewChainID returns an ID for a new chain of this client.
func (c *Client) NewChainID() uint64 { return c.chainIDs.Add(1) }
