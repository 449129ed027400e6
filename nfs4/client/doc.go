// Package client is an NFSv4.1/4.2 client (RFC 8881, RFC 7862) built on the
// generated XDR types of github.com/buildbarn/go-xdr: ONC RPC over TCP with
// record marking and AUTH_SYS, one client ID and session per Client
// (EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE), a slot table that lets
// several COMPOUNDs be in flight, lease renewal when idle, transparent
// reconnection (the session's reply cache makes retransmission safe), and
// DESTROY_SESSION / DESTROY_CLIENTID on Close.
//
// A Compound is built operation by operation and sent with Client.Do,
// which adds SEQUENCE. Operations that open files leave the open stateid as
// the COMPOUND's current stateid, so OPEN, READ or WRITE with
// CurrentStateid, and CLOSE with CurrentStateid fit in one COMPOUND
// (RFC 8881 §16.2.3.1.2).
//
// # Extensions
//
// Setting Compound.Txn sends the txnfs transactional-compound marker
// (OpTxn) as the first operation. On a server with the extension the
// COMPOUND commits atomically; a standard server rejects the unknown
// operation before executing anything, and Do returns ErrTxnUnsupported.
// A WRITE at AppendOffset appends atomically on servers with the vNFS append
// extension.
//
// Multi-compound transactions (txnfs servers only, docs/protocol.md §3):
// TxnBegin opens a server-side transaction; every COMPOUND sent with
// Compound.TxnID set to its id runs inside it (plain-compound semantics,
// isolated from other clients); TxnEnd commits it atomically (or fails
// with a *TxnConflictError carrying the server's report, committing
// nothing) or aborts it. A server without the extension makes TxnBegin
// and joined COMPOUNDs fail with ErrTxnUnsupported before doing anything.
//
//	id, err := c.TxnBegin(ctx)
//	cp := client.Compound{TxnID: id}
//	... add operations; c.Do(ctx, &cp) as often as needed ...
//	err = c.TxnEnd(ctx, id, true) // commit
//
// # Wire format of a transactional COMPOUND
//
//	COMPOUND4args: tag | minorversion | n | TXN(flags=0) | SEQUENCE | op...
//	COMPOUND4res:  status | tag | n | TXN(nfsstat4) | SEQUENCE res | res...
//
// # Errors
//
// Do returns an error only when the COMPOUND did not run or its outcome is
// unknown. A failing operation is reported in the Reply (Reply.Err gives a
// *StatusError that unwraps to a syscall.Errno). A reply that cannot
// answer the COMPOUND sent (more results than operations, fewer under
// NFS4_OK, another operation's result, a failed result before the last)
// is an ErrTransport error, so callers may index Reply.Results by
// operation and assert their types once Reply.Err is nil.
package client
