package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// OpTxn is the private operation number of the txnfs transactional-compound
// extension (docs/protocol.md). Sent as the very first operation of a
// COMPOUND (before SEQUENCE) it makes the remaining operations one atomic
// transaction. Its argument is one uint32 of flags (zero); its result is a
// bare nfsstat4. A server without the extension answers OP_ILLEGAL (or
// GARBAGE_ARGS) before executing anything.
const OpTxn nfsv4.NfsOpnum4 = extxdr.OP_TXN

// AppendOffset is the WRITE offset of the vNFS append extension: a WRITE
// at this offset appends atomically at the end of the file.
const AppendOffset = nfsv4.NFS4_UINT64_MAX

// Special stateids (RFC 8881 §8.2.3).
var (
	// AnonymousStateid is the all-zero special stateid.
	AnonymousStateid = nfsv4.Stateid4{}
	// CurrentStateid refers to the current stateid of the COMPOUND, set
	// by OPEN (and restored by RESTOREFH), so OPEN, READ/WRITE and CLOSE
	// fit in one COMPOUND.
	CurrentStateid = nfsv4.Stateid4{Seqid: 1}
)

// Compound is a COMPOUND request under construction. The zero value is an
// empty, non-transactional compound. The client adds SEQUENCE (and the
// transaction marker) when the compound is sent; operations are numbered
// from 0 in the order added, and Reply.Results uses the same numbering.
//
// A Compound is not safe for concurrent use. Byte slices passed to its
// methods (file handles, write data) are referenced, not copied, until the
// compound is sent.
type Compound struct {
	// Tag is sent as the COMPOUND tag (informational).
	Tag string
	// Txn makes the compound transactional (see OpTxn).
	Txn bool
	// TxnID, if not zero, runs the compound inside the multi-compound
	// transaction TxnID (from Client.TxnBegin; see OpTxnJoin) with
	// plain-compound semantics: operations run in order and stop at the
	// first failure; the effects of those before it stay in the
	// transaction. Do returns an error wrapping ErrTxnExpired,
	// ErrTxnNotOwner or ErrTxnUnsupported, and runs nothing, if the
	// transaction cannot be joined. Txn and TxnID are exclusive.
	TxnID TxnID
	// Cred, if set, is the AUTH_SYS credential of this COMPOUND instead
	// of the Client's (e.g. a FUSE mount sends each caller's identity).
	Cred *Cred
	// Chain, if set, sends the compound as a COMPOUND of an ordered
	// chain (OpChain; docs/protocol.md §4). Do then returns an error
	// wrapping ErrChainRefused or ErrChainUnsupported, and nothing ran,
	// if the server refused it; it does not resend it chained. Not with
	// Txn or TxnID.
	Chain *Chain

	ops  []nfsv4.NfsArgop4
	size int // encoded size of ops
}

// Cred is an AUTH_SYS identity (RFC 5531 §A.2); the machine name is the
// Client's.
type Cred struct {
	UID, GID uint32
	GIDs     []uint32 // supplementary groups (at most 16 are sent)
}

// Len returns the number of operations added.
func (c *Compound) Len() int { return len(c.ops) }

// Size returns the encoded size of the operations in bytes.
func (c *Compound) Size() int { return c.size }

// Ops returns the operations added so far (owned by c).
func (c *Compound) Ops() []nfsv4.NfsArgop4 { return c.ops }

// Truncate drops operations from index n on.
func (c *Compound) Truncate(n int) {
	for _, op := range c.ops[n:] {
		c.size -= op.GetEncodedSizeBytes()
	}
	c.ops = c.ops[:n]
}

// Reset empties c, keeping Tag and Txn.
func (c *Compound) Reset() { c.ops, c.size = c.ops[:0], 0 }

// Add appends op and returns its index.
func (c *Compound) Add(op nfsv4.NfsArgop4) int {
	c.ops = append(c.ops, op)
	c.size += op.GetEncodedSizeBytes()
	return len(c.ops) - 1
}

// PutRootFH adds PUTROOTFH.
func (c *Compound) PutRootFH() int { return c.Add(&nfsv4.NfsArgop4_OP_PUTROOTFH{}) }

// PutFH adds PUTFH fh.
func (c *Compound) PutFH(fh []byte) int {
	return c.Add(&nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fh}})
}

// GetFH adds GETFH.
func (c *Compound) GetFH() int { return c.Add(&nfsv4.NfsArgop4_OP_GETFH{}) }

// Lookup adds LOOKUP name.
func (c *Compound) Lookup(name string) int {
	return c.Add(&nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: name}})
}

// LookupP adds LOOKUPP.
func (c *Compound) LookupP() int { return c.Add(&nfsv4.NfsArgop4_OP_LOOKUPP{}) }

// SaveFH adds SAVEFH.
func (c *Compound) SaveFH() int { return c.Add(&nfsv4.NfsArgop4_OP_SAVEFH{}) }

// RestoreFH adds RESTOREFH.
func (c *Compound) RestoreFH() int { return c.Add(&nfsv4.NfsArgop4_OP_RESTOREFH{}) }

// GetAttr adds GETATTR for the attributes in mask.
func (c *Compound) GetAttr(mask Bitmap) int {
	return c.Add(&nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: mask}})
}

// SetAttr adds SETATTR (sid matters only when the size changes).
func (c *Compound) SetAttr(sid nfsv4.Stateid4, attrs nfsv4.Fattr4) int {
	return c.Add(&nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: sid, ObjAttributes: attrs}})
}

// Verify adds VERIFY: the COMPOUND goes on if the current object's
// attributes encode exactly as attrs, and stops with NFS4ERR_NOT_SAME
// otherwise (RFC 8881 §18.31).
func (c *Compound) Verify(attrs nfsv4.Fattr4) int {
	return c.Add(&nfsv4.NfsArgop4_OP_VERIFY{Opverify: nfsv4.Verify4args{ObjAttributes: attrs}})
}

// NVerify adds NVERIFY, VERIFY's opposite: it stops the COMPOUND with
// NFS4ERR_SAME if the attributes are equal.
func (c *Compound) NVerify(attrs nfsv4.Fattr4) int {
	return c.Add(&nfsv4.NfsArgop4_OP_NVERIFY{Opnverify: nfsv4.Nverify4args{ObjAttributes: attrs}})
}

// Access adds ACCESS.
func (c *Compound) Access(bits uint32) int {
	return c.Add(&nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{Access: bits}})
}

// OpenArgs describes an OPEN.
type OpenArgs struct {
	// Name is the file to open in the current directory (CLAIM_NULL);
	// empty opens the current file handle (CLAIM_FH, NFSv4.1+).
	Name string
	// Access is OPEN4_SHARE_ACCESS_READ, _WRITE or _BOTH.
	Access uint32
	// Create creates the file if it does not exist (UNCHECKED4), or
	// fails if it exists when Exclusive is also set (GUARDED4).
	Create, Exclusive bool
	// CreateAttrs are applied on creation (mode; size 0 truncates).
	CreateAttrs nfsv4.Fattr4
	// Reclaim re-acquires an open of the current file held before the
	// server restarted (CLAIM_PREVIOUS, no delegation; see SetReclaim).
	Reclaim bool
}

// Open adds OPEN; owner is the open-owner. The stateid of the opened file
// becomes the current stateid.
func (c *Compound) Open(clientID uint64, owner []byte, a OpenArgs) int {
	var how nfsv4.Openflag4 = &nfsv4.Openflag4_default{}
	if a.Create {
		var ch nfsv4.Createhow4 = &nfsv4.Createhow4_UNCHECKED4{Createattrs: a.CreateAttrs}
		if a.Exclusive {
			ch = &nfsv4.Createhow4_GUARDED4{Createattrs: a.CreateAttrs}
		}
		how = &nfsv4.Openflag4_OPEN4_CREATE{How: ch}
	}
	var claim nfsv4.OpenClaim4 = &nfsv4.OpenClaim4_CLAIM_NULL{File: a.Name}
	switch {
	case a.Reclaim:
		claim = &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: nfsv4.OPEN_DELEGATE_NONE}
	case a.Name == "":
		claim = &nfsv4.OpenClaim4_CLAIM_FH{}
	}
	return c.Add(&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		ShareAccess: a.Access | nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
		ShareDeny:   nfsv4.OPEN4_SHARE_DENY_NONE,
		Owner:       nfsv4.StateOwner4{Clientid: clientID, Owner: owner},
		Openhow:     how,
		Claim:       claim,
	}})
}

// Close adds CLOSE of sid.
func (c *Compound) Close(sid nfsv4.Stateid4) int {
	return c.Add(&nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{OpenStateid: sid}})
}

// Read adds READ.
func (c *Compound) Read(sid nfsv4.Stateid4, off uint64, count uint32) int {
	return c.Add(&nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Stateid: sid, Offset: off, Count: count}})
}

// Write adds WRITE; stable selects FILE_SYNC4 over UNSTABLE4.
func (c *Compound) Write(sid nfsv4.Stateid4, off uint64, data []byte, stable bool) int {
	how := nfsv4.UNSTABLE4
	if stable {
		how = nfsv4.FILE_SYNC4
	}
	return c.Add(&nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: sid, Offset: off, Stable: how, Data: data}})
}

// Commit adds COMMIT of the whole file.
func (c *Compound) Commit() int {
	return c.Add(&nfsv4.NfsArgop4_OP_COMMIT{Opcommit: nfsv4.Commit4args{}})
}

// Mkdir adds CREATE of a directory.
func (c *Compound) Mkdir(name string, attrs nfsv4.Fattr4) int {
	return c.Add(&nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: name, Createattrs: attrs}})
}

// Symlink adds CREATE of a symbolic link.
func (c *Compound) Symlink(name, target string, attrs nfsv4.Fattr4) int {
	return c.Add(&nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4LNK{Linkdata: []byte(target)}, Objname: name, Createattrs: attrs}})
}

// Readlink adds READLINK.
func (c *Compound) Readlink() int { return c.Add(&nfsv4.NfsArgop4_OP_READLINK{}) }

// Remove adds REMOVE name (from the current directory).
func (c *Compound) Remove(name string) int {
	return c.Add(&nfsv4.NfsArgop4_OP_REMOVE{Opremove: nfsv4.Remove4args{Target: name}})
}

// Rename adds RENAME from the saved directory to the current one.
func (c *Compound) Rename(oldName, newName string) int {
	return c.Add(&nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: oldName, Newname: newName}})
}

// Link adds LINK of the saved file as newName in the current directory.
func (c *Compound) Link(newName string) int {
	return c.Add(&nfsv4.NfsArgop4_OP_LINK{Oplink: nfsv4.Link4args{Newname: newName}})
}

// Readdir adds READDIR.
func (c *Compound) Readdir(cookie uint64, verf [8]byte, dircount, maxcount uint32, mask Bitmap) int {
	return c.Add(&nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
		Cookie: cookie, Cookieverf: verf, Dircount: dircount, Maxcount: maxcount, AttrRequest: mask}})
}

// Copy adds a synchronous intra-server COPY from the saved file to the
// current file (RFC 7862 §15.2). count 0 copies to the end of the source.
func (c *Compound) Copy(src, dst nfsv4.Stateid4, srcOff, dstOff, count uint64) int {
	return c.Add(&nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{
		CaSrcStateid: src, CaDstStateid: dst, CaSrcOffset: srcOff, CaDstOffset: dstOff,
		CaCount: count, CaConsecutive: true, CaSynchronous: true}})
}

// Clone adds CLONE from the saved file to the current file (RFC 7862
// §15.13). count 0 clones to the end of the source.
func (c *Compound) Clone(src, dst nfsv4.Stateid4, srcOff, dstOff, count uint64) int {
	return c.Add(&nfsv4.NfsArgop4_OP_CLONE{Opclone: nfsv4.Clone4args{
		ClSrcStateid: src, ClDstStateid: dst, ClSrcOffset: srcOff, ClDstOffset: dstOff, ClCount: count}})
}

// Reply is a decoded COMPOUND reply, without the SEQUENCE and transaction
// results.
type Reply struct {
	// Status is the status of the last executed operation.
	Status nfsv4.Nfsstat4
	// Results holds one result per executed operation, in order; a
	// failed COMPOUND ends with the failing operation's result.
	Results []nfsv4.NfsResop4
	// Statuses holds the status of each result.
	Statuses []nfsv4.Nfsstat4
}

// Err returns a *StatusError for the failing operation, or nil.
func (r *Reply) Err() error {
	if r.Status == nfsv4.NFS4_OK {
		return nil
	}
	i := len(r.Results) - 1
	if i < 0 {
		return &StatusError{Op: nfsv4.OP_ILLEGAL, Index: 0, Status: r.Status}
	}
	return &StatusError{Op: r.Results[i].GetResop(), Index: i, Status: r.Statuses[i]}
}

// checkReply returns an error (ErrTransport) unless rep can be the reply
// to ops (RFC 8881 §16.2.3): one result per executed operation, in order
// and with the operation's opcode (the failing one may be OP_ILLEGAL, a
// server's answer to an operation it does not know), every result but the
// last successful, and a result for every operation if the COMPOUND
// succeeded. Callers index results by operation and assert their types:
// a server's reply that broke these rules made them panic.
func checkReply(ops []nfsv4.NfsArgop4, rep *Reply) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: COMPOUND reply does not match its %d operations: %s", ErrTransport, len(ops), fmt.Sprintf(format, args...))
	}
	n := len(rep.Results)
	if n > len(ops) {
		return bad("%d results", n)
	}
	if rep.Status == nfsv4.NFS4_OK && n != len(ops) {
		return bad("status NFS4_OK with %d results", n)
	}
	for i, res := range rep.Results {
		last := i == n-1
		if op := res.GetResop(); op != ops[i].GetArgop() && !(last && op == nfsv4.OP_ILLEGAL) {
			return bad("result %d is %s for %s", i, OpName(op), OpName(ops[i].GetArgop()))
		}
		if st := rep.Statuses[i]; st != nfsv4.NFS4_OK && (!last || rep.Status == nfsv4.NFS4_OK) {
			return bad("result %d (%s) failed with %s, COMPOUND status %s", i, OpName(res.GetResop()), StatusName(st), StatusName(rep.Status))
		}
	}
	return nil
}

// FailedAt returns the index of the failing operation, or -1.
func (r *Reply) FailedAt() int {
	if r.Status == nfsv4.NFS4_OK {
		return -1
	}
	return len(r.Results) - 1
}

// encodeArgs encodes COMPOUND4args with the extra leading ops (TXN,
// SEQUENCE) before c's operations.
func encodeArgs(tag string, minor uint32, txn bool, seq *nfsv4.Sequence4args, ops []nfsv4.NfsArgop4, size int) (encodedArgs, error) {
	return encodeArgsJoin(tag, minor, txn, TxnID{}, 0, nil, seq, ops, size)
}

// minRefWrite is the length from which encodeArgsJoin sends a value the
// generated encoder writes (a WRITE's data) as its own segment, the
// caller's slice, instead of copying it into the encoded arguments.
const minRefWrite = 4096

// encodedArgs is an encoded COMPOUND4args in segments, sent in order with
// one writev: the generated encoder's output with, between the copied
// parts, the values of at least minRefWrite bytes it wrote (the caller's
// WRITE data: not copies; the caller's buffers are not touched until the
// call returns). Without such a value it is one segment.
type encodedArgs [][]byte

// size is the encoded length in bytes.
func (a encodedArgs) size() int {
	n := 0
	for _, s := range a {
		n += len(s)
	}
	return n
}

// segmentWriter is the io.Writer encodeArgsJoin gives the generated
// encoders: it copies short writes into buf and keeps every Write of at
// least minRefWrite bytes as a reference segment. That retains p, which
// the io.Writer contract forbids in general; the generated code writes
// such a value only as an opaque's bytes, with one Write of the slice the
// caller's argument holds (runtime.WriteVariableLengthOpaque), or of a
// fresh copy of a string, both left alone until the call returns.
type segmentWriter struct {
	buf   []byte
	marks []int    // offsets in buf where the references go
	refs  [][]byte // the references
}

func (w *segmentWriter) Write(p []byte) (int, error) {
	if len(p) >= minRefWrite {
		w.marks = append(w.marks, len(w.buf))
		w.refs = append(w.refs, p)
	} else {
		w.buf = append(w.buf, p...)
	}
	return len(p), nil
}

// WriteByte implements io.ByteWriter, through which go-xdr's runtime
// writes integers without allocating (third_party/go-xdr/PATCHES.md).
func (w *segmentWriter) WriteByte(c byte) error {
	w.buf = append(w.buf, c)
	return nil
}

// segments returns the encoding written.
func (w *segmentWriter) segments() encodedArgs {
	segs := make(encodedArgs, 0, 2*len(w.refs)+1)
	prev := 0
	for i, m := range w.marks {
		segs = append(segs, w.buf[prev:m:m], w.refs[i])
		prev = m
	}
	return append(segs, w.buf[prev:])
}

// encodeArgsJoin is encodeArgs with TXN_JOIN(join, clientID) first if
// join is not zero. size is the encoded size of ops (it only sizes the
// buffer).
//
// Until session 12 every WRITE's data was copied into one buffer of the
// whole COMPOUND, allocated (and so zeroed) per call: ~1 MiB per COMPOUND
// of 64 16 KiB writes, ~5% of the 1,000-file write benchmark's CPU with
// the page faults of the fresh memory (docs/vnfs.md "Files, session 12").
func encodeArgsJoin(tag string, minor uint32, txn bool, join TxnID, clientID uint64, chain *Chain, seq *nfsv4.Sequence4args, ops []nfsv4.NfsArgop4, size int) (encodedArgs, error) {
	if txn && !join.IsZero() {
		return nil, errors.New("nfs4 client: Compound.Txn and Compound.TxnID are exclusive")
	}
	if chain != nil && (txn || !join.IsZero()) {
		return nil, errors.New("nfs4 client: Compound.Chain is not for transactional compounds")
	}
	for _, op := range ops {
		if w, ok := op.(*nfsv4.NfsArgop4_OP_WRITE); ok && len(w.Opwrite.Data) >= minRefWrite {
			size -= len(w.Opwrite.Data)
		}
	}
	b := &segmentWriter{buf: make([]byte, 0, max(size, 0)+128+len(tag))}
	runtime.WriteUTF8String(b, 1024, tag)
	runtime.WriteUnsignedInt(b, minor)
	n := len(ops)
	if txn || !join.IsZero() || chain != nil {
		n++
	}
	if seq != nil {
		n++
	}
	runtime.WriteUnsignedInt(b, uint32(n))
	var first nfsv4.NfsArgop4 // the extension's operation that comes first
	switch {
	case chain != nil:
		first = chainArg(chain)
	case txn:
		first = txnArg()
	case !join.IsZero():
		first = txnJoinArg(join, clientID)
	}
	if first != nil {
		first.WriteTo(b)
	}
	if seq != nil {
		op := nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: *seq}
		if _, err := op.WriteTo(b); err != nil {
			return nil, err
		}
	}
	for _, op := range ops {
		if _, err := op.WriteTo(b); err != nil {
			return nil, fmt.Errorf("nfs4 client: encoding %s: %w", OpName(op.GetArgop()), err)
		}
	}
	return b.segments(), nil
}

// rawReply is COMPOUND4res with the extension result split out.
type rawReply struct {
	status   nfsv4.Nfsstat4
	txn      *nfsv4.Nfsstat4 // TXN (or TXN_JOIN) result, if present
	chain    *nfsv4.Nfsstat4 // CHAIN result, if present
	results  []nfsv4.NfsResop4
	statuses []nfsv4.Nfsstat4
}

// decodeReply decodes COMPOUND4res with the generated decoders: nfsv4's
// for the standard results, extxdr's for the extension's (which
// nfs_resop4 does not know, hence the loop over the results here).
func decodeReply(b []byte) (*rawReply, error) {
	r := bytes.NewReader(b)
	var st nfsv4.Nfsstat4
	if _, err := st.ReadFrom(r); err != nil {
		return nil, err
	}
	if _, _, err := runtime.ReadUTF8String(r, 1<<16); err != nil {
		return nil, err
	}
	n, _, err := runtime.ReadUnsignedInt(r)
	if err != nil {
		return nil, err
	}
	rep := &rawReply{status: st}
	for i := uint32(0); i < n; i++ {
		op, ost, err := peekResult(r)
		if err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
		switch {
		case (op == OpChain || op == OpTxn || op == OpTxnJoin) && i == 0, op == OpTxnBegin || op == OpTxnEnd:
			res, ost, err := readExtResult(r)
			if err != nil {
				return nil, fmt.Errorf("result %d (%s): %w", i, OpName(op), err)
			}
			switch op {
			case OpChain:
				rep.chain = &ost
			case OpTxn, OpTxnJoin:
				rep.txn = &ost
			default:
				rep.results = append(rep.results, &extRes{extxdr.Result{Res: res}})
				rep.statuses = append(rep.statuses, ost)
			}
		default:
			res, _, err := nfsv4.ReadNfsResop4(r)
			if err != nil {
				return nil, fmt.Errorf("result %d (%s): %w", i, OpName(op), err)
			}
			rep.results = append(rep.results, res)
			rep.statuses = append(rep.statuses, ost)
		}
	}
	return rep, nil
}

// peekResult returns the opcode and status that begin the result at r's
// position (every nfs_resop4 begins with them: RFC 8881 §16.2.3), read by
// the generated decoders, without consuming them.
func peekResult(r *bytes.Reader) (nfsv4.NfsOpnum4, nfsv4.Nfsstat4, error) {
	var op nfsv4.NfsOpnum4
	var st nfsv4.Nfsstat4
	n, err := op.ReadFrom(r)
	if err == nil {
		var m int64
		m, err = st.ReadFrom(r)
		n += m
	}
	r.Seek(-n, io.SeekCurrent)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return op, st, err
}
