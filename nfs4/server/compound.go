package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
	"github.com/txnfs/txnfs/nfs4/internal/rpc"
	"github.com/txnfs/txnfs/nfs4/internal/state"
	"github.com/txnfs/txnfs/slice"
)

// OpTxn is the private operation number of the transactional-compound
// extension (docs/protocol.md). As the first operation of a COMPOUND it
// makes the rest of the compound one atomic, isolated, durable
// transaction. Its argument is one uint32 of flags (must be zero); its
// result is a bare nfsstat4.
const OpTxn nfsv4.NfsOpnum4 = extxdr.OP_TXN // "txn\0"

// OpAppendOffset is the private operation of the append extension
// (docs/protocol.md §2): placed right after a WRITE, it returns the offset
// at which that WRITE's data was written — for an append (offset
// 2^64 − 1), the end of file the server chose. Its argument is one uint32
// of flags (must be zero); its result is an nfsstat4 followed, when OK, by
// an offset4.
const OpAppendOffset nfsv4.NfsOpnum4 = extxdr.OP_APPEND_OFFSET // "txn\1"

const maxTagLen = 1024

// fhState is a current or saved file handle.
type fhState struct {
	set bool
	ino fs.Ino
	gen uint64
	typ fs.FileType
	// fh is the encoded handle when known (the client's PUTFH bytes),
	// nil otherwise (computed on demand: it costs an HMAC).
	fh []byte
}

// compound is the execution state of one COMPOUND request.
type compound struct {
	s     *Server
	ctx   context.Context
	cred  fs.Cred
	princ string
	conn  uint64
	minor uint32
	nops  int

	cur, saved       fhState
	curSid, savedSid *nfsv4.Stateid4

	// reqSize is the size of the call message; maxReply (and, when the
	// client asked for the reply to be cached, maxCached) bound the
	// reply, rpc header included; replySize is the reply's size so far.
	reqSize, maxReply, maxCached, replySize int

	// wrote is set by a successful WRITE to the offset it wrote at, and
	// cleared before every other operation (read by OpAppendOffset).
	wrote    bool
	wroteOff uint64
	// wantOffset is set while a WRITE followed by OpAppendOffset runs.
	wantOffset bool
	// moreWrites: another WRITE follows the running operation in its run
	// of operations (one fs transaction); a WRITE's payload is then lent
	// to a background write that overlaps it (see compound.write).
	moreWrites bool
	// payloads is the loan of the WRITE payloads written in the
	// background past their transaction's end (lendPayload); payloadsDone
	// is closed when their writes are done. Server.compound waits for it
	// before the request record can be reused.
	payloads     *slice.Loan
	payloadsDone chan struct{}
	// payloadWrite: the compound counts in Server.payloadWrites.
	payloadWrite bool

	// 4.1+: set by SEQUENCE.
	client  *state.Client
	session *state.Session
	slot    *state.SlotRef

	// txn is the transaction of a transactional compound, or of a group
	// of a plain compound (see runGrouped); nil otherwise. userTxn is
	// set for the former only (OP_TXN).
	txn     *fs.Txn
	userTxn bool
	// ro is the read-only snapshot shared by consecutive reading
	// operations of a plain compound; it is ended before every update,
	// so reads after a write see it. The reads happen at the snapshot's
	// time, which lies within the compound's execution and after its
	// earlier writes: the compound stays linearizable.
	ro *fs.Txn
	// plain is set while a plain (non-transactional) compound runs: its
	// engine commits are NoSync (visible at once, durable at the next
	// FS.Sync); needSync records that an operation whose effects NFS
	// requires durable at the reply (all but UNSTABLE WRITEs and reads;
	// COMMIT) committed that way, so the reply waits for one FS.Sync.
	plain, needSync bool
	// syncFollows: the plain compound has a durable operation, so it
	// syncs before its reply (fs.TxnOptions.SyncFollows).
	syncFollows bool
	// durableRun is set while runGrouped runs the compound's last
	// changing run with a durable commit.
	durableRun bool
	// chained is set for a compound of an ordered chain that runs: its
	// sync follows its execution (never a durable commit inside it), so
	// that the chain's next compound runs meanwhile (chainRun).
	chained bool
	// dirsHeld are the directory-lock stripes the current grouped run
	// holds; split is set by an operation that must start a new run
	// (lockDir).
	dirsHeld []int
	split    bool
	// runDone counts the operations the current run has completed;
	// runStart is the directory locks' release clock before it began.
	runDone  int
	runStart uint64
	// runChanged is set once an operation of the current grouped run
	// that may change the file system (not readOnlyOp) succeeded: a
	// later PUTFH of the run then checks its handle in the run's read
	// set (plainRun).
	runChanged bool
	// cinfoFix re-sets the change_info of the current grouped run's
	// results from their ChangeMarks once it committed (setCinfo).
	cinfoFix []func()
	// closing holds the stateids CLOSEd in the current transaction or
	// grouped run, closed for real at its commit (see resolveSid).
	closing map[[12]byte]bool
	// bufs are pooled I/O buffers referenced by the reply, returned to
	// the pool once it is written.
	bufs []*[]byte
	// keepArgs is set when something may still reference the request's
	// arguments (PUTFH handles and WRITE data alias them) after the
	// reply: the record is then not reused (rpc.Call.ReuseArgs). That is
	// a 4.0 compound (owner seqid replay records keep the current file
	// handle), one of a multi-compound transaction (the transaction keeps
	// its compounds' state), and an append through FS.Append (which
	// returns when its context ends, before its batch has written the
	// data).
	keepArgs bool
	// call is the RPC call being run (for the CRC of a WRITE's payload,
	// rpc.Call.PayloadCRC).
	call *rpc.Call

	// undo reverses protocol-state changes of a transactional compound
	// that does not commit; onCommit runs deferred ones after commit.
	undo     []func()
	onCommit []func()

	// reopen is set by an OPEN in a transactional compound that resolved
	// a file a later commit deleted: runTxn re-executes the compound on a
	// fresh snapshot, as after a commit conflict.
	reopen bool
	// txnCreated holds the regular files OPEN created in the current
	// transaction (shared by the compounds of a multi-compound one): a
	// fresh snapshot cannot see them, so pinOpened is not asked.
	txnCreated map[fs.Ino]bool

	// joined is the multi-compound transaction the compound joined with
	// TXN_JOIN (ops_txn.go), or nil.
	joined *mtxn
}

type decodedOp struct {
	code  nfsv4.NfsOpnum4
	arg   nfsv4.NfsArgop4 // nil for OpTxn, OpAppendOffset and unknown ops
	flags uint32          // OpAppendOffset's argument
	txn   *txnArgs        // arguments of OpTxnBegin, OpTxnJoin, OpTxnEnd
	// wantOffset marks a WRITE followed by OpAppendOffset: an append
	// must then learn (and log) its offset.
	wantOffset bool
}

func knownOp(code nfsv4.NfsOpnum4, minor uint32) bool {
	switch {
	case code == nfsv4.OP_ILLEGAL:
		return true
	case code < nfsv4.OP_ACCESS:
		return false
	case minor == 0:
		return code <= nfsv4.OP_RELEASE_LOCKOWNER
	case minor == 1:
		return code <= nfsv4.OP_RECLAIM_COMPLETE
	}
	return code <= nfsv4.OP_CLONE
}

// compound decodes and runs one COMPOUND; ok=false means the arguments
// are not even a COMPOUND header (GARBAGE_ARGS).
func (s *Server) compound(ctx context.Context, call *rpc.Call) (rpc.Reply, bool) {
	c := &compound{s: s, ctx: ctx, cred: s.cred(&call.Cred), princ: principal(&call.Cred),
		conn: call.Conn, reqSize: call.Size, maxReply: int(s.cfg.MaxRequest), maxCached: -1, call: call}
	body, ok := s.runCompound(c, call)
	c.waitPayloads()
	if c.payloadWrite {
		s.payloadWrites.Add(-1)
	}
	if !ok {
		return rpc.Reply{}, false
	}
	if !c.keepArgs {
		call.ReuseArgs()
	}
	rep := rpc.Reply{Stat: rpcv2.SUCCESS, Body: body.head, More: body.more}
	if len(c.bufs) > 0 {
		bufs := c.bufs
		rep.Done = func() {
			for _, b := range bufs {
				s.putBuf(b)
			}
		}
	}
	return rep, true
}

// lendPayload returns ctx with the compound's payload loan (slice.WithLoan):
// the slice store may write the WRITE's data in the background from the
// request record, and the transaction commits without waiting for the
// write (fs: the commit pledges it, slice.Pledge) — the commit's metadata
// work and its log write overlap the device write, whose completion the
// log's acknowledging flush follows (docs/nfs-server.md "Session 12").
// The compound waits for the loan before the record may be reused
// (waitPayloads).
func (c *compound) lendPayload(ctx context.Context) context.Context {
	if c.payloads == nil {
		done := make(chan struct{})
		c.payloads, c.payloadsDone = slice.NewEagerLoan(func() { close(done) }), done
	}
	return slice.WithLoan(ctx, c.payloads)
}

// waitPayloads waits until the background writes of the payloads lent by
// lendPayload are done.
func (c *compound) waitPayloads() {
	if c.payloads != nil {
		c.payloads.Release()
		<-c.payloadsDone
		c.payloads = nil
	}
}

// alignPayloadMin: WRITEs of at least this many bytes have their data
// placed 4 KiB-aligned in later request records (notePayload); smaller
// ones are stored inline or staged anyway.
const alignPayloadMin = 64 << 10

// notePayload counts whether a large WRITE's data arrived 4 KiB-aligned in
// the request record (then the slice store's direct put writes it
// straight from there, without a staging copy: ENGINE-REQUESTS 15) and
// asks the connection to place its next records so that data at this
// offset is aligned (rpc.Call.AlignPayload) if learn is set: only for the
// first large WRITE of a compound, whose offset depends only on what
// precedes it (the next ones follow 1 MiB + 36 bytes later and cannot all
// be aligned without a copy). It reports whether data was large.
func (s *Server) notePayload(call *rpc.Call, data []byte, learn bool) bool {
	if len(data) < alignPayloadMin {
		return false
	}
	var aligned bool
	if learn {
		aligned = call.AlignPayload(data)
	} else {
		aligned = rpc.Aligned(data)
	}
	if aligned {
		s.met.alignHits.Inc()
	} else {
		s.met.alignMiss.Inc()
	}
	return true
}

func (s *Server) runCompound(c *compound, call *rpc.Call) (encoded, bool) {
	start := time.Now()
	r := bytes.NewReader(call.Args)
	tag, ok := readTag(r)
	if !ok {
		return encoded{}, false
	}
	minor, _, err := runtime.ReadUnsignedInt(r)
	if err != nil {
		return encoded{}, false
	}
	n, _, err := runtime.ReadUnsignedInt(r)
	if err != nil {
		return encoded{}, false
	}
	if minor > 2 {
		return encodeCompound(nfsv4.NFS4ERR_MINOR_VERS_MISMATCH, tag, nil, nil), true
	}
	if int(n) > s.cfg.MaxOps {
		st := nfsv4.NFS4ERR_RESOURCE
		if minor > 0 {
			st = nfsv4.NFS4ERR_TOO_MANY_OPS
		}
		return encodeCompound(st, tag, nil, nil), true
	}
	ops := make([]decodedOp, 0, min(n, 64))
	var chain *chainArgs // OpChain's arguments, if first
	var chr *txnResult   // OpChain's result
	learnt := false      // a large WRITE's payload offset was passed to the connection
	for i := uint32(0); i < n; i++ {
		code, ok := peekOpcode(r)
		if !ok {
			return encodeCompound(nfsv4.NFS4ERR_BADXDR, tag, nil, nil), true
		}
		// OP_CHAIN and OP_TXN are operations only when first: elsewhere
		// they are unknown (OP_ILLEGAL), like any opcode not in the
		// minor version.
		if extxdr.IsOp(code) && (i == 0 || (code != OpChain && code != OpTxn)) {
			op, a, ok := decodeExtOp(r)
			if !ok {
				return encodeCompound(nfsv4.NFS4ERR_BADXDR, tag, nil, nil), true
			}
			if code == OpTxnJoin && i != 0 {
				ops = append(ops, decodedOp{code: nfsv4.OP_ILLEGAL})
				break
			}
			switch {
			case code == OpChain:
				chain = a
			case code == OpTxn && op.flags != 0:
				return encodeCompound(nfsv4.NFS4ERR_INVAL, tag, &txnResult{status: nfsv4.NFS4ERR_INVAL}, nil), true
			default:
				ops = append(ops, op)
			}
			continue
		}
		if !knownOp(code, minor) {
			ops = append(ops, decodedOp{code: nfsv4.OP_ILLEGAL})
			break
		}
		arg, ok := decodeStdOp(r, call.Args, code)
		if !ok {
			s.log.Debug("nfs4: undecodable operation", "op", code)
			return encodeCompound(nfsv4.NFS4ERR_BADXDR, tag, nil, nil), true
		}
		if w, ok := arg.(*nfsv4.NfsArgop4_OP_WRITE); ok {
			learnt = s.notePayload(call, w.Opwrite.Data, !learnt) || learnt
		}
		ops = append(ops, decodedOp{code: code, arg: arg})
	}

	c.minor, c.nops = minor, len(ops)
	c.keepArgs = minor == 0
	for _, op := range ops {
		if op.txn != nil || isTxnExtOp(op.code) {
			c.keepArgs = true
		}
	}
	for i := 0; i+1 < len(ops); i++ {
		ops[i].wantOffset = ops[i].code == nfsv4.OP_WRITE && ops[i+1].code == OpAppendOffset
	}
	switch {
	case chain != nil:
		call.ReleaseNow() // a chained compound may wait for the connection's next request
	case !quickOps(ops):
		call.Release() // let the connection's next request run meanwhile
	}
	s.st.MaybeTick()
	var txr *txnResult
	var join *txnArgs
	if len(ops) > 0 && ops[0].code == OpTxn {
		txr = &txnResult{status: nfsv4.NFS4_OK}
		ops = ops[1:]
	} else if len(ops) > 0 && ops[0].code == OpTxnJoin {
		txr, join = &txnResult{op: OpTxnJoin, status: nfsv4.NFS4_OK}, ops[0].txn
		ops = ops[1:]
	}
	// The reply so far: RPC reply header (24 bytes with AUTH_NONE), status,
	// tag, result count, OP_TXN result.
	if chain != nil {
		// OP_CHAIN is first (OP_TXN and TXN_JOIN after it were decoded
		// as OP_ILLEGAL) and needs a session: it runs nothing else.
		chr = &txnResult{op: OpChain, status: nfsv4.NFS4_OK}
		switch {
		case minor == 0:
			chr.status = nfsv4.NFS4ERR_NOTSUPP
		case len(ops) == 0 || ops[0].code != nfsv4.OP_SEQUENCE:
			chr.status = nfsv4.NFS4ERR_OP_NOT_IN_SESSION
		}
		if chr.status != nfsv4.NFS4_OK {
			return encodeCompound(chr.status, tag, chr, nil), true
		}
	}
	c.replySize = 24 + 12 + (len(tag)+3)&^3 + 8*boolInt(txr != nil || chr != nil)
	obs := s.met.plain
	if join != nil {
		obs = s.met.join
	} else if txr != nil {
		obs = s.met.txn
	}
	defer func() { obs.Observe(time.Since(start).Seconds()) }()

	var results []nfsv4.NfsResop4
	status := nfsv4.NFS4_OK
	i := 0
	var chained *chainRun // the compound's part in its chain, if enter let it run
	// Session rules for 4.1+ (RFC 8881 §2.10.6, §18.46.3).
	if minor > 0 && len(ops) > 0 {
		switch ops[0].code {
		case nfsv4.OP_SEQUENCE:
			res, st, replay := c.sequence(ops[0].arg.(*nfsv4.NfsArgop4_OP_SEQUENCE), len(ops)+boolInt(txr != nil || chain != nil))
			if replay != nil {
				return encoded{head: replay}, true
			}
			results = append(results, res)
			if res != nil {
				c.replySize += res.GetEncodedSizeBytes()
			}
			status = st
			i = 1
			if chain != nil {
				sess := ops[0].arg.(*nfsv4.NfsArgop4_OP_SEQUENCE).Opsequence.SaSessionid
				if st == nfsv4.NFS4ERR_DELAY || st == nfsv4.NFS4ERR_RETRY_UNCACHED_REP {
					// The slot answered a retransmission (of a
					// COMPOUND in progress, or one run whose reply
					// was not cached): not a new COMPOUND of the
					// chain, so it breaks nothing (docs/protocol.md §4).
				} else if st != nfsv4.NFS4_OK {
					s.chains.refuse(sess, chain, st != nfsv4.NFS4ERR_BADSESSION)
				} else if cst := s.chains.enter(c.ctx, sess, chain); cst != nfsv4.NFS4_OK {
					chr.status, status = cst, cst
				} else {
					chained = &chainRun{t: s.chains, sess: sess, a: chain}
					c.chained = true
					defer chained.end(c.ctx) // after a panic: the chain stops
				}
			}
		case nfsv4.OP_EXCHANGE_ID, nfsv4.OP_CREATE_SESSION, nfsv4.OP_DESTROY_SESSION,
			nfsv4.OP_BIND_CONN_TO_SESSION, nfsv4.OP_DESTROY_CLIENTID:
			if len(ops) > 1 {
				results = append(results, errRes(ops[0].code, nfsv4.NFS4ERR_NOT_ONLY_OP))
				status = nfsv4.NFS4ERR_NOT_ONLY_OP
			}
		case nfsv4.OP_ILLEGAL:
		default:
			results = append(results, errRes(ops[0].code, nfsv4.NFS4ERR_OP_NOT_IN_SESSION))
			status = nfsv4.NFS4ERR_OP_NOT_IN_SESSION
		}
	}
	if status == nfsv4.NFS4_OK {
		if join != nil {
			res, st := c.runJoined(join, ops[i:], txr)
			if txr.status != nfsv4.NFS4_OK {
				status = txr.status
			} else {
				results = append(results, res...)
				status = st
			}
		} else if txr == nil {
			c.plain = true
			// A durable operation means one FS.Sync before the reply:
			// its NoSync runs keep small writes inline for it.
			c.syncFollows = anyNeedsDurable(ops[i:])
			res, st := c.runGrouped(ops[i:])
			c.plain, c.syncFollows = false, false
			c.endView()
			// The chain's next COMPOUND may run while this one syncs; its
			// reply waits for this one's (docs/protocol.md §4).
			chained.executed(st)
			var syncErr error
			if c.needSync {
				syncErr = (*s.sync.Load())(c.ctx)
			}
			// Also a COMPOUND that stopped early: the operations
			// before its failing one changed the file system, and its
			// own status would say they are done (docs/protocol.md §4).
			if chained.replyTurn(c.ctx, syncErr != nil) && syncErr == nil {
				syncErr = errChainNotDurable
			}
			if syncErr != nil && len(res) > 0 {
				// The effects are visible but may not survive a
				// crash: the last operation fails.
				st = s.toStatus(c.ctx, "SYNC", syncErr, aboutHandle)
				if st == nfsv4.NFS4_OK || st == nfsv4.NFS4ERR_NOENT {
					st = nfsv4.NFS4ERR_IO
				}
				res[len(res)-1] = errRes(res[len(res)-1].GetResop(), st)
			}
			results = append(results, res...)
			status = st
		} else {
			c.userTxn = true
			res, st := c.runTxn(ops[i:], txr)
			if txr.status != nfsv4.NFS4_OK {
				status = txr.status
			} else {
				results = append(results, res...)
				status = st
			}
		}
	}
	c.endView()
	if chr != nil {
		txr = chr
	}
	body := encodeCompound(status, tag, txr, results)
	if c.slot != nil {
		// Only replies small enough to cache are flattened (READ data
		// stays where it was read into).
		var cached []byte
		if body.size() <= s.st.MaxCachedReply() {
			cached = body.flatten()
		}
		s.st.FinishSlot(c.slot, cached, body.size())
	}
	return body, true
}

// quickOps reports whether ops only read metadata or protocol state, or
// read at most quickRead bytes: such a compound runs while the
// connection's next request waits (rpc.Call.Release), which saves a
// goroutine wake-up per request; anything that may write, wait for
// durability or move much data releases the connection first.
func quickOps(ops []decodedOp) bool {
	for _, op := range ops {
		switch op.code {
		case OpTxn, nfsv4.OP_SEQUENCE, nfsv4.OP_PUTROOTFH, nfsv4.OP_PUTPUBFH, nfsv4.OP_PUTFH,
			nfsv4.OP_GETFH, nfsv4.OP_SAVEFH, nfsv4.OP_RESTOREFH, nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP,
			nfsv4.OP_GETATTR, nfsv4.OP_VERIFY, nfsv4.OP_NVERIFY, nfsv4.OP_ACCESS, nfsv4.OP_READLINK,
			nfsv4.OP_SECINFO, nfsv4.OP_SECINFO_NO_NAME, nfsv4.OP_CLOSE, nfsv4.OP_RENEW,
			nfsv4.OP_TEST_STATEID:
		case nfsv4.OP_OPEN:
			a, ok := op.arg.(*nfsv4.NfsArgop4_OP_OPEN)
			if !ok {
				return false
			}
			if _, create := a.Opopen.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); create {
				return false
			}
		case nfsv4.OP_READ:
			a, ok := op.arg.(*nfsv4.NfsArgop4_OP_READ)
			if !ok || a.Opread.Count > quickRead {
				return false
			}
		default:
			return false
		}
	}
	return true
}

const quickRead = 64 << 10

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runOps runs ops in order, stopping at the first failure (RFC 8881
// §2.6.1 / 16.2.3). Outside a transaction each operation commits on its
// own.
func (c *compound) runOps(ops []decodedOp) ([]nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	results := make([]nfsv4.NfsResop4, 0, len(ops))
	lastWrite := -1
	for i, op := range ops {
		if op.code == nfsv4.OP_WRITE {
			lastWrite = i
		}
	}
	for i, op := range ops {
		start := time.Now()
		var res nfsv4.NfsResop4
		var st nfsv4.Nfsstat4
		wrote := c.wrote
		c.wrote = false
		c.wantOffset = op.wantOffset
		c.moreWrites = i < lastWrite
		switch {
		case op.code == OpAppendOffset:
			res, st = c.appendOffset(op.flags, wrote)
		case op.txn != nil:
			res, st = c.txnOp(op)
		case op.arg == nil:
			res, st = &nfsv4.NfsResop4_OP_ILLEGAL{Opillegal: nfsv4.Illegal4res{Status: nfsv4.NFS4ERR_OP_ILLEGAL}}, nfsv4.NFS4ERR_OP_ILLEGAL
		default:
			res, st = c.dispatch(op.arg)
		}
		if c.split {
			// The operation did nothing: it starts the next run
			// (runGroup commits these results).
			return results, nfsv4.NFS4_OK
		}
		c.replySize += res.GetEncodedSizeBytes()
		if c.replySize > c.maxReply || c.maxCached >= 0 && c.replySize > c.maxCached {
			// The reply would exceed what the client accepts (or asked
			// to cache): this operation fails instead (RFC 8881
			// §2.10.6.4). In 4.0 there is no negotiated size.
			st = nfsv4.NFS4ERR_REP_TOO_BIG
			switch {
			case c.minor == 0:
				st = nfsv4.NFS4ERR_RESOURCE
			case c.replySize <= c.maxReply:
				st = nfsv4.NFS4ERR_REP_TOO_BIG_TO_CACHE
			}
			c.replySize -= res.GetEncodedSizeBytes()
			res = errRes(op.code, st)
			c.replySize += res.GetEncodedSizeBytes()
		}
		c.s.met.observeOp(op.code, st, time.Since(start).Seconds())
		if st == nfsv4.NFS4_OK && c.plain && !c.durableRun && needsDurable(op) {
			c.needSync = true
		}
		results = append(results, res)
		if c.s.log.Enabled(c.ctx, slog.LevelDebug) {
			c.s.log.Debug("nfs4: op", "op", opName(op.code), "status", statusName(st), "minor", c.minor, "txn", c.txn != nil)
		}
		if st != nfsv4.NFS4_OK {
			return results, st
		}
		c.runDone++
		if c.txn != nil && !readOnlyOp(op) {
			c.runChanged = true
		}
	}
	return results, nfsv4.NFS4_OK
}

// txnResult is the result of the OpTxn (or OpTxnJoin) operation.
type txnResult struct {
	op     nfsv4.NfsOpnum4 // 0 means OpTxn
	status nfsv4.Nfsstat4
}

// runTxn runs ops as one transaction: all commit or none does. On a
// serialization conflict the whole sequence is re-run (the client sees one
// execution). If an operation fails, the transaction is aborted and the
// results end with the failing operation, as in a plain compound. If the
// commit itself fails, txr carries the error and no results are returned.
func (c *compound) runTxn(ops []decodedOp, txr *txnResult) ([]nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	cur, saved, curSid, savedSid, size := c.cur, c.saved, c.curSid, c.savedSid, c.replySize
	for attempt := 0; ; attempt++ {
		c.replySize = size
		t, err := c.s.fs.Begin(c.ctx, c.cred, fs.TxnOptions{})
		if err != nil {
			txr.status = c.s.toStatus(c.ctx, "TXN", err, aboutName)
			return nil, txr.status
		}
		c.txn = t
		c.wrote = false
		c.reopen = false
		res, st := c.runOps(ops)
		c.txn = nil
		if st != nfsv4.NFS4_OK && c.reopen {
			t.Abort()
			err = fs.ErrConflict // retried below
		} else if st != nfsv4.NFS4_OK {
			t.Abort()
			c.rollback()
			c.s.met.txns.WithLabelValues("abort").Inc()
			return res, st
		} else {
			err = t.Commit(c.ctx)
		}
		if err == nil {
			for _, f := range c.onCommit {
				f()
			}
			c.onCommit, c.undo, c.txnCreated = nil, nil, nil
			c.s.met.txns.WithLabelValues("commit").Inc()
			return res, nfsv4.NFS4_OK
		}
		c.rollback()
		if errors.Is(err, fs.ErrConflict) && attempt < c.s.cfg.TxnRetries {
			c.s.met.txns.WithLabelValues("retry").Inc()
			c.cur, c.saved, c.curSid, c.savedSid = cur, saved, curSid, savedSid
			if !c.backoff(attempt) {
				txr.status = nfsv4.NFS4ERR_DELAY
				return nil, txr.status
			}
			continue
		}
		c.s.met.txns.WithLabelValues("fail").Inc()
		txr.status = c.s.toStatus(c.ctx, "TXN commit", err, aboutName)
		return nil, txr.status
	}
}

// runGrouped runs the operations of a plain compound. Runs of operations
// that change the file system and need no protocol state outside it
// (those allowed in transactions) execute in one engine transaction,
// committed — durably, before the reply — when the run ends. Clients
// cannot tell this from one commit per operation, except that nobody sees
// the states between the run's operations; it costs one fsync per run
// instead of one per operation. If an operation of the run fails, the
// transaction is discarded (an operation made of several engine calls may
// have left part of its work in it), the operations before it run again
// as a run and the failing one runs alone, as in runOps. If the
// transaction cannot commit (poisoned by an I/O error, or conflicting more
// than TxnRetries times), nothing was committed and the run executes one
// operation at a time. Runs that only read, and the other operations,
// execute as in runOps.
func (c *compound) runGrouped(ops []decodedOp) ([]nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	results := make([]nfsv4.NfsResop4, 0, len(ops))
	limit, single := len(ops), false
	for len(ops) > 0 {
		n, writes := 0, false
		for !single && n < min(limit, len(ops)) && groupable(ops[n]) {
			writes = writes || !readOnlyOp(ops[n])
			n++
		}
		limit, single = len(ops), false
		if n == 0 {
			n = 1
		}
		if writes {
			// The last changing run of a compound that must be durable
			// commits durably itself (no NoSync commit + FS.Sync): its
			// WAL flush also covers the compound's earlier NoSync
			// commits, so no Sync is left to do.
			// A run taking directory locks commits NoSync even then,
			// so that it does not hold them during the flush, and so
			// does a chained compound, so that the flush overlaps the
			// chain's next compound.
			c.durableRun = !anyChange(ops[n:]) && anyNeedsDurable(ops[:n]) && !c.takesDirLocks(ops[:n]) && !c.chained
			res, st, failedAt := c.runGroup(ops[:n])
			durable := c.durableRun
			c.durableRun = false
			switch {
			case failedAt == 0:
				single = true // run the failing operation alone
				continue
			case failedAt > 0:
				limit = failedAt // commit the operations before it
				continue
			case res != nil:
				if durable {
					c.needSync = false
				}
				results = append(results, res...)
				if st != nfsv4.NFS4_OK {
					return results, st
				}
				// Fewer results than operations: the run was split
				// before operation len(res) (lockDir).
				ops = ops[len(res):]
				continue
			}
			// Could not commit: one at a time.
		}
		res, st := c.runOps(ops[:n])
		results = append(results, res...)
		if st != nfsv4.NFS4_OK {
			return results, st
		}
		ops = ops[n:]
	}
	return results, nfsv4.NFS4_OK
}

// runGroup runs ops in one transaction and commits it if all succeed. If
// operation k fails it returns failedAt = k, having discarded the
// transaction; if the commit fails it returns res = nil and failedAt = -1.
// In both cases nothing was committed and the compound's state is as
// before. If operation k asks for a split (lockDir), the operations
// before it commit and their k results are returned.
func (c *compound) runGroup(ops []decodedOp) (res []nfsv4.NfsResop4, st nfsv4.Nfsstat4, failedAt int) {
	c.endView()
	cur, saved, curSid, savedSid, size, wrote := c.cur, c.saved, c.curSid, c.savedSid, c.replySize, c.wrote
	restore := func() {
		c.rollback()
		c.cinfoFix = nil
		c.cur, c.saved, c.curSid, c.savedSid, c.replySize, c.wrote = cur, saved, curSid, savedSid, size, wrote
	}
	for attempt := 0; ; attempt++ {
		c.startRun()
		noSync := c.plain && !c.durableRun
		t, err := c.s.fs.Begin(c.ctx, c.cred, fs.TxnOptions{NoSync: noSync, SyncFollows: noSync && c.syncFollows})
		if err != nil {
			return nil, 0, -1
		}
		c.txn = t
		res, st = c.runOps(ops)
		c.txn = nil
		c.split = false
		if st != nfsv4.NFS4_OK {
			t.Abort()
			c.unlockDirs()
			restore()
			return nil, st, len(res) - 1
		}
		err = t.Commit(c.ctx)
		c.unlockDirs()
		if err == nil {
			for _, f := range c.onCommit {
				f()
			}
			for _, f := range c.cinfoFix {
				f()
			}
			c.onCommit, c.undo, c.cinfoFix, c.txnCreated = nil, nil, nil, nil
			return res, st, -1
		}
		restore()
		if !errors.Is(err, fs.ErrConflict) || attempt >= c.s.cfg.TxnRetries {
			c.s.log.Debug("nfs4: grouped operations run one by one", "err", err)
			return nil, 0, -1
		}
		if !c.backoff(attempt) {
			return nil, 0, -1
		}
	}
}

// backoff sleeps before re-running something that conflicted for the
// attempt-th time: a randomized exponential backoff (up to 1 ms << 6) so
// that conflicting executions stop colliding. It returns false if the
// compound's context ended.
func (c *compound) backoff(attempt int) bool {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// groupable reports operations runGrouped may put in a transaction: those
// allowed in transactional compounds, except an append through an open
// stateid, which FS.Append group-commits with concurrent appenders.
func groupable(op decodedOp) bool {
	if op.code == OpAppendOffset {
		return true
	}
	if op.arg == nil || !txnAllowed(op.code) {
		return false
	}
	if w, ok := op.arg.(*nfsv4.NfsArgop4_OP_WRITE); ok && w.Opwrite.Offset == appendOffset {
		return false
	}
	return true
}

// anyChange reports whether ops may change the file system.
func anyChange(ops []decodedOp) bool {
	for _, op := range ops {
		if !readOnlyOp(op) {
			return true
		}
	}
	return false
}

// anyNeedsDurable reports whether one of ops needs durability (needsDurable).
func anyNeedsDurable(ops []decodedOp) bool {
	for _, op := range ops {
		if needsDurable(op) {
			return true
		}
	}
	return false
}

// needsDurable reports operations of a plain compound whose effects must
// be durable before the reply (RFC 8881 §18.32.3, §18.4.3: WRITE unless
// UNSTABLE, COMMIT, and the namespace and attribute changes), so that
// the compound, whose engine commits are NoSync, ends with FS.Sync.
func needsDurable(op decodedOp) bool {
	switch a := op.arg.(type) {
	case *nfsv4.NfsArgop4_OP_COMMIT:
		return true
	case *nfsv4.NfsArgop4_OP_WRITE:
		return a.Opwrite.Stable != nfsv4.UNSTABLE4
	case *nfsv4.NfsArgop4_OP_OPEN:
		_, create := a.Opopen.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE)
		return create
	}
	return op.arg != nil && txnAllowed(op.code) && !readOnlyOp(op)
}

// readOnlyOp reports operations that never change the file system (an
// OPEN changes it only when it may create — truncation comes with the
// create arguments —, so one without OPEN4_CREATE reads, in the shared
// read snapshot instead of a read-write transaction).
func readOnlyOp(op decodedOp) bool {
	if a, ok := op.arg.(*nfsv4.NfsArgop4_OP_OPEN); ok {
		_, create := a.Opopen.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE)
		return !create
	}
	switch op.code {
	case nfsv4.OP_PUTROOTFH, nfsv4.OP_PUTPUBFH, nfsv4.OP_PUTFH, nfsv4.OP_GETFH,
		nfsv4.OP_SAVEFH, nfsv4.OP_RESTOREFH, nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP,
		nfsv4.OP_GETATTR, nfsv4.OP_VERIFY, nfsv4.OP_NVERIFY, nfsv4.OP_ACCESS,
		nfsv4.OP_READDIR, nfsv4.OP_READLINK, nfsv4.OP_READ, nfsv4.OP_COMMIT,
		nfsv4.OP_SEEK, nfsv4.OP_READ_PLUS, nfsv4.OP_SECINFO, nfsv4.OP_SECINFO_NO_NAME,
		nfsv4.OP_CLOSE, OpAppendOffset:
		return true
	}
	return false
}

func (c *compound) rollback() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
	c.undo, c.onCommit = nil, nil
}

// update runs fn in the compound's transaction, or in its own retried
// transaction outside transactional compounds.
func (c *compound) update(fn func(t *fs.Txn) error) error {
	if c.txn != nil {
		return fn(c.txn)
	}
	c.endView()
	return c.s.fs.DoOpts(c.ctx, c.cred, fs.TxnOptions{NoSync: c.plain, SyncFollows: c.plain && c.syncFollows}, fn)
}

// view runs a read-only fn, outside transactions in the compound's
// current read snapshot (begun on first use).
func (c *compound) view(fn func(t *fs.Txn) error) error {
	if c.txn != nil {
		return fn(c.txn)
	}
	if c.ro == nil {
		t, err := c.s.fs.Begin(c.ctx, c.cred, fs.TxnOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		c.ro = t
	}
	err := fn(c.ro)
	if err != nil {
		// A failed engine call may poison the transaction: start
		// afresh.
		c.endView()
	}
	return err
}

// endView ends the shared read snapshot, if any.
func (c *compound) endView() {
	if c.ro != nil {
		c.ro.Abort()
		c.ro = nil
	}
}

// encoded is an encoded COMPOUND4res: head followed by more. Large
// opaque fields (READ data) are not copied into head but referenced from
// more.
type encoded struct {
	head []byte
	more [][]byte
}

func (e encoded) size() int {
	n := len(e.head)
	for _, b := range e.more {
		n += len(b)
	}
	return n
}

func (e encoded) flatten() []byte {
	if len(e.more) == 0 {
		return e.head
	}
	out := make([]byte, 0, e.size())
	out = append(out, e.head...)
	for _, b := range e.more {
		out = append(out, b...)
	}
	return out
}

// segmentWriter collects an encoding. Writes of at least minSegment bytes
// are kept by reference instead of copied — unlike an ordinary
// io.Writer, it retains them — so the caller must keep those buffers
// unchanged until the reply is written. Only encodeCompound uses it, on
// results whose buffers live until rpc.Reply.Done.
type segmentWriter struct {
	segs [][]byte
	cur  []byte
	// loans are the READ payloads to keep by reference whatever their
	// size (at least minReadSegment), in the order the encoder writes
	// them: the generated encoder writes an opaque's bytes with one
	// Write of the very slice.
	loans [][]byte
}

// sameBytes reports whether p and q are the same bytes in memory.
func sameBytes(p, q []byte) bool {
	return len(p) == len(q) && len(p) > 0 && unsafe.SliceData(p) == unsafe.SliceData(q)
}

const minSegment = 32 << 10

// minReadSegment is the smallest READ payload encodeCompound keeps by
// reference. READ buffers are the compound's pooled buffers, returned
// once the reply is written (compound.bufs), so any size could be; below
// a page the copy costs less than an iovec. Copying every payload under
// 32 KiB into the reply (and zeroing the buffer it was copied into) was
// 12-15% of the vectorized tar's process CPU (vnfs.md "Trees, session 7").
const minReadSegment = 4 << 10

func (w *segmentWriter) Write(p []byte) (int, error) {
	if len(w.loans) > 0 && sameBytes(p, w.loans[0]) {
		w.loans = w.loans[1:]
		w.ref(p)
		return len(p), nil
	}
	if len(p) < minSegment {
		w.cur = append(w.cur, p...)
		return len(p), nil
	}
	w.ref(p)
	return len(p), nil
}

// WriteByte implements io.ByteWriter, through which go-xdr's runtime
// writes integers without allocating (third_party/go-xdr/PATCHES.md).
func (w *segmentWriter) WriteByte(c byte) error {
	w.cur = append(w.cur, c)
	return nil
}

// ref appends p by reference. The bytes encoded so far become a segment;
// later ones go on in the rest of the same buffer (appending past a
// segment's length never changes the segment).
func (w *segmentWriter) ref(p []byte) {
	if len(w.cur) > 0 {
		w.segs = append(w.segs, w.cur)
	}
	w.segs = append(w.segs, p)
	w.cur = w.cur[len(w.cur):]
}

func (w *segmentWriter) done() encoded {
	if len(w.segs) == 0 {
		return encoded{head: w.cur}
	}
	more := w.segs[1:]
	if len(w.cur) > 0 {
		more = append(more, w.cur)
	}
	return encoded{head: w.segs[0], more: more}
}

// encodeCompound encodes COMPOUND4res with the generated encoder. The
// OpTxn (or TXN_JOIN, OP_CHAIN) result, if any, is encoded first.
func encodeCompound(st nfsv4.Nfsstat4, tag string, txr *txnResult, results []nfsv4.NfsResop4) encoded {
	if txr != nil {
		results = append([]nfsv4.NfsResop4{txr.result()}, results...)
	}
	res := nfsv4.Compound4res{Status: st, Tag: tag, Resarray: results}
	// size is what the first segment takes: the whole reply but the
	// READ payloads that go by reference. Sized exactly, a reply of many
	// small READs (a vectorized tar: ~1 MiB of 12 KiB files) is not
	// copied through doubling appends (6% of its process CPU when the
	// first segment was capped at 64 KiB).
	size := res.GetEncodedSizeBytes()
	var w segmentWriter
	for _, r := range results {
		if d := readPayload(r); len(d) >= minReadSegment {
			size -= len(d)
			w.loans = append(w.loans, d)
		}
	}
	w.cur = make([]byte, 0, size+8)
	if _, err := res.WriteTo(&w); err != nil {
		// Only a server bug (e.g. an over-long field, a name that is
		// not UTF-8) gets here.
		return encodeCompound(nfsv4.NFS4ERR_SERVERFAULT, "", nil, nil)
	}
	return w.done()
}

// readPayload returns the data of r if it is a successful READ's.
func readPayload(r nfsv4.NfsResop4) []byte {
	if rd, ok := r.(*nfsv4.NfsResop4_OP_READ); ok {
		if ok, isOK := rd.Opread.(*nfsv4.Read4res_NFS4_OK); isOK {
			return ok.Resok4.Data
		}
	}
	return nil
}

// errResZeros is more than the largest failure arm of a result needs
// (LOCK4denied with an empty owner: 32 bytes).
const errResZeros = 64

// errRes returns the result of op code with a non-OK status (or OK for
// operations whose result is a bare status). It relies on every NFSv4
// result starting with its status, and decodes (opcode, status) with the
// generated decoder so each op gets its proper union arm.
func errRes(code nfsv4.NfsOpnum4, st nfsv4.Nfsstat4) nfsv4.NfsResop4 {
	var b bytes.Buffer
	code.WriteTo(&b)
	st.WriteTo(&b)
	// Zeros after the status: a failure arm that is not void decodes
	// to empty or zero values (SETATTR4res's attrsset: an empty
	// bitmap) instead of failing the decoding.
	b.Write(make([]byte, errResZeros))
	r, _, err := nfsv4.ReadNfsResop4(&b)
	if err != nil {
		return &nfsv4.NfsResop4_OP_ILLEGAL{Opillegal: nfsv4.Illegal4res{Status: st}}
	}
	return r
}
