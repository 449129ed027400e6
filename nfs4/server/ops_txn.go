package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// Multi-compound transactions (docs/protocol.md §3). TXN_BEGIN opens a
// server-side transaction (one long-lived fs.Txn) owned by the client;
// a COMPOUND whose first operation is TXN_JOIN runs inside it with plain
// compound semantics; TXN_END commits or aborts it.
const (
	// OpTxnBegin opens a multi-compound transaction and returns its id.
	OpTxnBegin nfsv4.NfsOpnum4 = extxdr.OP_TXN_BEGIN // "txn\2"
	// OpTxnJoin, first in a COMPOUND, runs the COMPOUND in a transaction.
	OpTxnJoin nfsv4.NfsOpnum4 = extxdr.OP_TXN_JOIN // "txn\3"
	// OpTxnEnd commits or aborts a transaction.
	OpTxnEnd nfsv4.NfsOpnum4 = extxdr.OP_TXN_END // "txn\4"
)

func init() {
	opNames[OpTxnBegin], opNames[OpTxnJoin], opNames[OpTxnEnd] = "TXN_BEGIN", "TXN_JOIN", "TXN_END"
}

// Defaults of the Config fields of multi-compound transactions.
const (
	defaultTxnMaxOpen      = 256
	defaultTxnMaxPerClient = 16
	defaultTxnIdle         = 30 * time.Minute
	// maxTxnReport bounds the conflict report of TXN_END.
	maxTxnReport = 8 << 10
	// maxTxnNotes bounds the operations a transaction remembers for its
	// conflict report (each kind).
	maxTxnNotes = 64
)

// txnArgs are the decoded arguments of TXN_BEGIN, TXN_JOIN and TXN_END.
type txnArgs struct {
	flags    uint32   // BEGIN
	id       [16]byte // JOIN, END
	clientID uint64   // all: the owner in NFSv4.0
	commit   bool     // END
}

func isTxnExtOp(code nfsv4.NfsOpnum4) bool {
	return code == OpTxnBegin || code == OpTxnJoin || code == OpTxnEnd
}

// mtxn is one open multi-compound transaction.
type mtxn struct {
	id    [16]byte
	owner uint64 // client id
	// sem serializes the compounds of the transaction (an fs.Txn is not
	// safe for concurrent use): holding it (a token in the channel) gives
	// the holder the fields below.
	sem chan struct{}

	t              *fs.Txn
	undo, onCommit []func() // protocol state, as compound.undo/onCommit
	dead           bool     // ended or killed: every later use is EXPIRED
	// closing is the set of stateids CLOSEd in the transaction (closed
	// for real at commit): shared by its compounds, so that a stateid
	// closed in one is bad in the later ones and a later OPEN of the
	// same file by the same owner makes a new state (compound.closing).
	closing map[[12]byte]bool
	// openedGone is set when an OPEN in the transaction resolved a file
	// that a later commit deleted before it could be pinned: the
	// transaction's snapshot is too old to open it, so END cannot commit.
	openedGone bool
	// openCreated is compound.txnCreated, kept across the compounds.
	openCreated    map[fs.Ino]bool
	compounds, ops int
	paths          map[fs.Ino]string // paths seen in the transaction, for reports
	reads, changes []string          // first maxTxnNotes of each, for reports
	moreReads      int
	moreChanges    int
	// lookups are name resolutions the transaction made in its snapshot
	// (not of names it had changed itself), re-checked on a conflict to
	// point at the names another client changed.
	lookups []txnLookup
	created map[fs.Ino]bool  // objects the transaction created
	renamed map[txnName]bool // names the transaction changed

	// Guarded by txnTable.mu.
	busy    bool
	lastUse time.Time
}

// txnName is a name in a directory.
type txnName struct {
	dir  fs.Ino
	name string
}

// txnLookup is a name the transaction resolved: to found, or to nothing
// (found = 0).
type txnLookup struct {
	txnName
	path  string
	found fs.Ino
}

// txnTable holds the open multi-compound transactions of a Server.
type txnTable struct {
	s                   *Server
	maxOpen, maxPerClnt int
	idle                time.Duration

	mu struct {
		sync.Mutex
		byID     map[[16]byte]*mtxn
		byClient map[uint64]int
		seq      uint32
	}

	events *prometheus.CounterVec // event: begin, commit, abort, conflict, fail, expired
	open   prometheus.Gauge
}

func newTxnTable(s *Server, reg prometheus.Registerer) (*txnTable, error) {
	tt := &txnTable{s: s, maxOpen: s.cfg.TxnMaxOpen, maxPerClnt: s.cfg.TxnMaxPerClient, idle: s.cfg.TxnIdleTimeout}
	if tt.maxOpen <= 0 {
		tt.maxOpen = defaultTxnMaxOpen
	}
	if tt.maxPerClnt <= 0 {
		tt.maxPerClnt = defaultTxnMaxPerClient
	}
	if tt.idle <= 0 {
		tt.idle = defaultTxnIdle
	}
	tt.mu.byID = make(map[[16]byte]*mtxn)
	tt.mu.byClient = make(map[uint64]int)
	tt.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "txnfs", Subsystem: "nfs4", Name: "multi_txn_total",
		Help: "Multi-compound transactions (TXN_BEGIN/JOIN/END) by event (begin, commit, abort, conflict, fail, expired).",
	}, []string{"event"})
	tt.open = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "txnfs", Subsystem: "nfs4", Name: "multi_txn_open",
		Help: "Open multi-compound transactions.",
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{tt.events, tt.open} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return tt, nil
}

// txnOwner returns the client on whose behalf c acts on a transaction: the
// session's client (4.1+) or the client id argument (4.0, which must be a
// live confirmed client; its lease is renewed).
func (c *compound) txnOwner(a *txnArgs) (uint64, nfsv4.Nfsstat4) {
	if c.minor > 0 {
		if c.client == nil {
			return 0, nfsv4.NFS4ERR_OP_NOT_IN_SESSION
		}
		return c.client.ID, nfsv4.NFS4_OK
	}
	if st := c.s.st.Renew(a.clientID); st != nfsv4.NFS4_OK {
		return 0, st
	}
	return a.clientID, nfsv4.NFS4_OK
}

// acquire finds the transaction a names for c's client and waits until no
// other compound uses it. The caller must release it.
func (tt *txnTable) acquire(c *compound, a *txnArgs) (*mtxn, nfsv4.Nfsstat4) {
	if !bytes.Equal(a.id[:8], tt.s.verf[:]) {
		// Issued by an earlier server instance: its transactions
		// died with it.
		return nil, nfsv4.NFS4ERR_STALE_CLIENTID
	}
	owner, st := c.txnOwner(a)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	tt.mu.Lock()
	x := tt.mu.byID[a.id]
	if x == nil {
		tt.mu.Unlock()
		return nil, nfsv4.NFS4ERR_EXPIRED
	}
	if x.owner != owner {
		tt.mu.Unlock()
		return nil, nfsv4.NFS4ERR_WRONG_CRED
	}
	tt.mu.Unlock()
	select {
	case x.sem <- struct{}{}:
	case <-c.ctx.Done():
		return nil, nfsv4.NFS4ERR_DELAY
	}
	if x.dead {
		<-x.sem
		return nil, nfsv4.NFS4ERR_EXPIRED
	}
	tt.mu.Lock()
	x.busy = true
	tt.mu.Unlock()
	return x, nfsv4.NFS4_OK
}

// release ends a compound's use of x.
func (tt *txnTable) release(x *mtxn) {
	tt.mu.Lock()
	x.busy, x.lastUse = false, tt.s.cfg.Clock()
	tt.mu.Unlock()
	<-x.sem
}

// remove takes x out of the table (its holder then ends it).
func (tt *txnTable) remove(x *mtxn) {
	tt.mu.Lock()
	if tt.mu.byID[x.id] == x {
		delete(tt.mu.byID, x.id)
		if tt.mu.byClient[x.owner]--; tt.mu.byClient[x.owner] <= 0 {
			delete(tt.mu.byClient, x.owner)
		}
		tt.open.Dec()
	}
	tt.mu.Unlock()
	x.dead = true
}

// discard aborts x, held by the caller, and reverses the protocol state
// its compounds created.
func (x *mtxn) discard() {
	x.t.Abort()
	for i := len(x.undo) - 1; i >= 0; i-- {
		x.undo[i]()
	}
	x.undo, x.onCommit = nil, nil
}

// sweep aborts transactions idle for longer than the idle timeout and
// those whose client is gone (lease expired, DESTROY_CLIENTID). The server
// calls it every second.
func (tt *txnTable) sweep() {
	now := tt.s.cfg.Clock()
	tt.mu.Lock()
	var victims []*mtxn
	for _, x := range tt.mu.byID {
		if x.busy {
			continue
		}
		if now.Sub(x.lastUse) > tt.idle {
			victims = append(victims, x)
			continue
		}
		if _, st := tt.s.st.Client(x.owner); st != nfsv4.NFS4_OK {
			victims = append(victims, x)
		}
	}
	tt.mu.Unlock()
	for _, x := range victims {
		select {
		case x.sem <- struct{}{}:
		default:
			continue // in use again: not idle, or retried next time
		}
		if !x.dead {
			tt.remove(x)
			x.discard()
			tt.events.WithLabelValues("expired").Inc()
			tt.s.log.Info("nfs4: multi-compound transaction expired", "txn", hex.EncodeToString(x.id[:]), "client", x.owner)
		}
		<-x.sem
	}
}

// closeAll aborts every open transaction (server shutdown).
func (tt *txnTable) closeAll() {
	tt.mu.Lock()
	all := make([]*mtxn, 0, len(tt.mu.byID))
	for _, x := range tt.mu.byID {
		all = append(all, x)
	}
	tt.mu.Unlock()
	for _, x := range all {
		x.sem <- struct{}{}
		if !x.dead {
			tt.remove(x)
			x.discard()
		}
		<-x.sem
	}
}

// txnOp runs TXN_BEGIN or TXN_END (in a plain compound; TXN_JOIN is
// handled by runCompound).
func (c *compound) txnOp(op decodedOp) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	if op.code == OpTxnBegin {
		st, id := c.txnBegin(op.txn)
		return txnBeginResult(st, id), st
	}
	st, report := c.txnEnd(op.txn)
	return txnEndResult(st, report), st
}

func (c *compound) txnBegin(a *txnArgs) (nfsv4.Nfsstat4, [16]byte) {
	var id [16]byte
	if c.txn != nil || c.joined != nil {
		return nfsv4.NFS4ERR_NOTSUPP, id
	}
	if a.flags != 0 {
		return nfsv4.NFS4ERR_INVAL, id
	}
	owner, st := c.txnOwner(a)
	if st != nfsv4.NFS4_OK {
		return st, id
	}
	tt := c.s.txns
	copy(id[:8], c.s.verf[:])
	if _, err := io.ReadFull(c.s.cfg.Rand, id[12:]); err != nil {
		return nfsv4.NFS4ERR_SERVERFAULT, id
	}
	tt.mu.Lock()
	if len(tt.mu.byID) >= tt.maxOpen || tt.mu.byClient[owner] >= tt.maxPerClnt {
		tt.mu.Unlock()
		c.s.log.Info("nfs4: too many open multi-compound transactions", "client", owner, "max_open", tt.maxOpen, "max_per_client", tt.maxPerClnt)
		return nfsv4.NFS4ERR_RESOURCE, id
	}
	tt.mu.seq++
	binary.BigEndian.PutUint32(id[8:], tt.mu.seq)
	// The transaction outlives this request: it must not use its
	// context.
	t, err := c.s.fs.Begin(c.s.bgCtx, c.cred, fs.TxnOptions{})
	if err != nil {
		tt.mu.Unlock()
		return c.s.toStatus(c.ctx, "TXN_BEGIN", err, aboutName), [16]byte{}
	}
	x := &mtxn{id: id, owner: owner, sem: make(chan struct{}, 1), t: t,
		paths: map[fs.Ino]string{}, created: map[fs.Ino]bool{}, renamed: map[txnName]bool{},
		lastUse: c.s.cfg.Clock()}
	tt.mu.byID[id] = x
	tt.mu.byClient[owner]++
	tt.mu.Unlock()
	tt.open.Inc()
	tt.events.WithLabelValues("begin").Inc()
	return nfsv4.NFS4_OK, id
}

func (c *compound) txnEnd(a *txnArgs) (nfsv4.Nfsstat4, string) {
	if c.txn != nil || c.joined != nil {
		return nfsv4.NFS4ERR_NOTSUPP, ""
	}
	tt := c.s.txns
	x, st := tt.acquire(c, a)
	if st != nfsv4.NFS4_OK {
		return st, ""
	}
	defer tt.release(x)
	tt.remove(x)
	if !a.commit {
		x.discard()
		tt.events.WithLabelValues("abort").Inc()
		return nfsv4.NFS4_OK, ""
	}
	// The reply says whether the commit happened: it must not be
	// interrupted half-way by the connection going away.
	ctx := context.WithoutCancel(c.ctx)
	x.t.SetCred(c.cred)
	var err error
	if x.openedGone {
		err = fmt.Errorf("%w: a file opened in the transaction was removed or renamed over by another client", fs.ErrConflict)
	} else {
		err = x.t.Commit(ctx)
	}
	if err == nil {
		for _, f := range x.onCommit {
			f()
		}
		x.undo, x.onCommit = nil, nil
		tt.events.WithLabelValues("commit").Inc()
		return nfsv4.NFS4_OK, ""
	}
	x.discard()
	if errors.Is(err, fs.ErrConflict) {
		tt.events.WithLabelValues("conflict").Inc()
		return nfsv4.NFS4ERR_NOT_SAME, x.report(ctx, c.s.fs, err)
	}
	tt.events.WithLabelValues("fail").Inc()
	return c.s.toStatus(c.ctx, "TXN_END commit", err, aboutName), ""
}

// runJoined runs the operations of a COMPOUND that began with TXN_JOIN
// (after SEQUENCE) in the transaction, with plain-compound semantics:
// they run in order and stop at the first failure; the effects of the
// operations before it stay in the transaction. If the transaction
// cannot be used, txr carries the error and no operation runs.
func (c *compound) runJoined(a *txnArgs, ops []decodedOp, txr *txnResult) ([]nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	tt := c.s.txns
	x, st := tt.acquire(c, a)
	if st != nfsv4.NFS4_OK {
		txr.status = st
		return nil, st
	}
	defer tt.release(x)
	// Each request carries its caller's credential (a FUSE mount acts
	// for several users).
	x.t.SetCred(c.cred)
	c.txn, c.userTxn, c.joined = x.t, true, x
	c.wrote = false
	if x.closing == nil {
		x.closing = map[[12]byte]bool{}
	}
	c.closing = x.closing
	if x.openCreated == nil {
		x.openCreated = map[fs.Ino]bool{}
	}
	c.txnCreated = x.openCreated
	results := make([]nfsv4.NfsResop4, 0, len(ops))
	st = nfsv4.NFS4_OK
	for k := range ops {
		cur, saved := c.cur, c.saved
		var res []nfsv4.NfsResop4
		res, st = c.runOps(ops[k : k+1])
		results = append(results, res...)
		x.note(c, ops[k], cur, saved, st)
		if st != nfsv4.NFS4_OK {
			break
		}
	}
	c.txn = nil
	// Protocol state created by the compound lives and dies with the
	// transaction.
	x.undo = append(x.undo, c.undo...)
	x.onCommit = append(x.onCommit, c.onCommit...)
	c.undo, c.onCommit = nil, nil
	x.compounds++
	return results, st
}

// note records what an operation of the transaction read or changed, for
// the conflict report. cur and saved are the file handles before it.
func (x *mtxn) note(c *compound, op decodedOp, cur, saved fhState, st nfsv4.Nfsstat4) {
	x.ops++
	path := func(h fhState) string {
		if p, ok := x.paths[h.ino]; ok {
			return p
		}
		return fmt.Sprintf("<fileid %d>", h.ino)
	}
	child := func(dir fhState, name string) string {
		p := path(dir)
		if p == "/" {
			return "/" + name
		}
		return p + "/" + name
	}
	learn := func(p string) {
		if st == nfsv4.NFS4_OK && c.cur.set && len(x.paths) < 4096 {
			x.paths[c.cur.ino] = p
		}
	}
	failed := ""
	if st != nfsv4.NFS4_OK {
		failed = " (" + statusName(st) + ")"
	}
	read := func(s string) {
		if len(x.reads) < maxTxnNotes {
			if !slices.Contains(x.reads, s) {
				x.reads = append(x.reads, s)
			}
		} else {
			x.moreReads++
		}
	}
	change := func(s string) {
		if st != nfsv4.NFS4_OK {
			read(s) // a failed change had no effect but depended on what it saw
			return
		}
		if len(x.changes) < maxTxnNotes {
			x.changes = append(x.changes, s)
		} else {
			x.moreChanges++
		}
	}
	// resolved records a name resolution made in the snapshot; changed
	// a name the transaction changes (when st is OK).
	resolved := func(dir fhState, n, p string) {
		k := txnName{dir.ino, n}
		if x.renamed[k] || x.created[dir.ino] || len(x.lookups) >= maxTxnNotes {
			return
		}
		var found fs.Ino
		switch {
		case st == nfsv4.NFS4_OK:
			found = c.cur.ino
		case st != nfsv4.NFS4ERR_NOENT:
			return
		}
		x.lookups = append(x.lookups, txnLookup{txnName: k, path: p, found: found})
	}
	changed := func(dir fhState, n string) {
		if st == nfsv4.NFS4_OK && len(x.renamed) < 4096 {
			x.renamed[txnName{dir.ino, n}] = true
		}
	}
	createdCur := func() {
		if st == nfsv4.NFS4_OK && len(x.created) < 4096 {
			x.created[c.cur.ino] = true
		}
	}
	name := opName(op.code)
	switch a := op.arg.(type) {
	case *nfsv4.NfsArgop4_OP_PUTROOTFH, *nfsv4.NfsArgop4_OP_PUTPUBFH:
		learn("/")
	case *nfsv4.NfsArgop4_OP_LOOKUP:
		p := child(cur, a.Oplookup.Objname)
		learn(p)
		read(name + " " + p + failed)
		resolved(cur, a.Oplookup.Objname, p)
	case *nfsv4.NfsArgop4_OP_OPEN:
		p := path(cur)
		cl, isNull := a.Opopen.Claim.(*nfsv4.OpenClaim4_CLAIM_NULL)
		if isNull {
			p = child(cur, cl.File)
			learn(p)
		}
		if _, ok := a.Opopen.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); ok {
			change(name + " (create) " + p + failed)
			if isNull {
				// The result does not say whether the file existed:
				// not a lookup the report can re-check.
				changed(cur, cl.File)
			}
		} else {
			read(name + " " + p + failed)
			if isNull {
				resolved(cur, cl.File, p)
			}
		}
	case *nfsv4.NfsArgop4_OP_CREATE:
		p := child(cur, a.Opcreate.Objname)
		learn(p)
		change(name + " " + p + failed)
		changed(cur, a.Opcreate.Objname)
		createdCur()
	case *nfsv4.NfsArgop4_OP_REMOVE:
		change(name + " " + child(cur, a.Opremove.Target) + failed)
		changed(cur, a.Opremove.Target)
	case *nfsv4.NfsArgop4_OP_RENAME:
		change(name + " " + child(saved, a.Oprename.Oldname) + " -> " + child(cur, a.Oprename.Newname) + failed)
		changed(saved, a.Oprename.Oldname)
		changed(cur, a.Oprename.Newname)
	case *nfsv4.NfsArgop4_OP_LINK:
		change(name + " " + path(saved) + " -> " + child(cur, a.Oplink.Newname) + failed)
		changed(cur, a.Oplink.Newname)
	case *nfsv4.NfsArgop4_OP_WRITE, *nfsv4.NfsArgop4_OP_SETATTR, *nfsv4.NfsArgop4_OP_ALLOCATE,
		*nfsv4.NfsArgop4_OP_DEALLOCATE, *nfsv4.NfsArgop4_OP_COPY, *nfsv4.NfsArgop4_OP_CLONE:
		change(name + " " + path(cur) + failed)
	case *nfsv4.NfsArgop4_OP_READ, *nfsv4.NfsArgop4_OP_READ_PLUS, *nfsv4.NfsArgop4_OP_GETATTR,
		*nfsv4.NfsArgop4_OP_READDIR, *nfsv4.NfsArgop4_OP_READLINK, *nfsv4.NfsArgop4_OP_ACCESS,
		*nfsv4.NfsArgop4_OP_VERIFY, *nfsv4.NfsArgop4_OP_NVERIFY, *nfsv4.NfsArgop4_OP_SEEK:
		read(name + " " + path(cur) + failed)
	}
}

// report describes a transaction whose commit conflicted. It re-resolves
// the names the transaction looked up, in the current state, to point at
// those another client changed.
func (x *mtxn) report(ctx context.Context, f *fs.FS, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "transaction %x: commit conflict: another client changed something this transaction depends on, so an operation below saw a different result when the server re-checked it at commit (%v); nothing was committed.\n",
		x.id[8:], err)
	fmt.Fprintf(&b, "The transaction ran %d compounds, %d operations.\n", x.compounds, x.ops)
	var moved []string
	f.View(ctx, fs.RootCred, func(t *fs.Txn) error {
		for _, l := range x.lookups {
			if _, err := t.GetAttr(ctx, l.dir); err != nil {
				continue
			}
			var now fs.Ino
			a, err := t.Lookup(ctx, l.dir, l.name)
			switch {
			case err == nil:
				now = a.Ino
			case !errors.Is(err, fs.ErrNotExist):
				continue
			}
			switch {
			case now == l.found:
			case l.found == 0:
				moved = append(moved, l.path+" (created by another client)")
			case now == 0:
				moved = append(moved, l.path+" (removed or renamed by another client)")
			default:
				moved = append(moved, l.path+" (replaced by another client)")
			}
		}
		return nil
	})
	if len(moved) > 0 {
		b.WriteString("Names changed by other clients since the transaction looked them up:")
		for _, m := range moved {
			b.WriteString("\n  " + m)
		}
		b.WriteString("\n")
	}
	list := func(title string, items []string, more int) {
		if len(items) == 0 {
			return
		}
		b.WriteString(title)
		for _, s := range items {
			b.WriteString("\n  " + s)
		}
		if more > 0 {
			fmt.Fprintf(&b, "\n  ... and %d more", more)
		}
		b.WriteString("\n")
	}
	list("What it read:", x.reads, x.moreReads)
	list("What it changed (discarded):", x.changes, x.moreChanges)
	s := strings.ToValidUTF8(b.String(), "?") // names need not be UTF-8; the report must
	if len(s) > maxTxnReport {
		s = strings.ToValidUTF8(s[:maxTxnReport-4], "") + "...\n"
	}
	return s
}
