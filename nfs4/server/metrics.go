package server

import (
	"sync"
	"sync/atomic"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors. With a nil registry
// they are created but not registered.
type metrics struct {
	ops       *prometheus.CounterVec   // op, status
	opLatency *prometheus.HistogramVec // op
	compounds *prometheus.HistogramVec // kind (plain, txn)
	txns      *prometheus.CounterVec   // outcome (commit, abort, retry, fail)
	// dirLocks counts contention on the directory locks of grouped runs
	// (dirlocks.go): event wait (a run waited and got the lock), timeout
	// (it went on without), split (a run committed early to take it).
	dirLocks *prometheus.CounterVec
	// writeAligned counts WRITEs of at least alignPayloadMin bytes by
	// whether their data arrived 4 KiB-aligned in the request record
	// (result hit or miss; see notePayload).
	writeAligned         *prometheus.CounterVec
	alignHits, alignMiss prometheus.Counter
	// payloadCRC counts WRITEs whose data's CRC32C the rpc layer computed
	// while the request arrived (rpc.Call.PayloadCRC).
	payloadCRC prometheus.Counter

	// byOp caches the per-operation children of ops and opLatency for
	// the standard operations, indexed by opcode (label lookups hash
	// strings, and a sync.Map keyed by an interface allocated per
	// lookup: 2-3% of a small compound's CPU); other opcodes and the
	// counters of failed operations go through byKey.
	byOp  [nfsv4.OP_CLONE + 1]atomic.Pointer[opMetrics]
	byKey sync.Map // opKey -> prometheus.Counter or prometheus.Observer
	// plain, txn and join are the children of compounds.
	plain, txn, join prometheus.Observer
}

// opMetrics are one operation's latency histogram and success counter.
type opMetrics struct {
	latency prometheus.Observer
	ok      prometheus.Counter
}

type opKey struct {
	op      nfsv4.NfsOpnum4
	status  nfsv4.Nfsstat4
	latency bool
}

// observeOp counts one operation and its latency.
func (m *metrics) observeOp(op nfsv4.NfsOpnum4, st nfsv4.Nfsstat4, seconds float64) {
	if op >= 0 && int(op) < len(m.byOp) {
		om := m.byOp[op].Load()
		if om == nil {
			om = &opMetrics{latency: m.opLatency.WithLabelValues(opName(op)),
				ok: m.ops.WithLabelValues(opName(op), statusName(nfsv4.NFS4_OK))}
			m.byOp[op].Store(om) // a racing Store holds the same children
		}
		om.latency.Observe(seconds)
		if st == nfsv4.NFS4_OK {
			om.ok.Inc()
			return
		}
	} else {
		m.cached(opKey{op: op, latency: true}, func() any { return m.opLatency.WithLabelValues(opName(op)) }).(prometheus.Observer).Observe(seconds)
	}
	m.cached(opKey{op: op, status: st}, func() any { return m.ops.WithLabelValues(opName(op), statusName(st)) }).(prometheus.Counter).Inc()
}

// cached returns byKey's child for k, made by mk the first time.
func (m *metrics) cached(k opKey, mk func() any) any {
	c, ok := m.byKey.Load(k)
	if !ok {
		c, _ = m.byKey.LoadOrStore(k, mk())
	}
	return c
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "ops_total",
			Help: "NFSv4 operations by type and status.",
		}, []string{"op", "status"}),
		opLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "op_seconds",
			Help:    "NFSv4 operation latency.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}, []string{"op"}),
		compounds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "compound_seconds",
			Help:    "COMPOUND latency by kind (plain or txn).",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}, []string{"kind"}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "txn_total",
			Help: "Transactional compounds by outcome (commit, abort, retry, fail).",
		}, []string{"outcome"}),
		dirLocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "dir_lock_total",
			Help: "Directory-lock contention of grouped plain-compound runs (wait, timeout, split).",
		}, []string{"event"}),
		writeAligned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "write_payload_aligned_total",
			Help: "WRITEs of at least 64 KiB by whether their data arrived 4 KiB-aligned in the request buffer (hit: the slice store writes it without a staging copy).",
		}, []string{"result"}),
		payloadCRC: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "txnfs", Subsystem: "nfs4", Name: "write_payload_crc_total",
			Help: "WRITEs whose data was checksummed while the request arrived (the slice store does not hash it again).",
		}),
	}
	m.alignHits, m.alignMiss = m.writeAligned.WithLabelValues("hit"), m.writeAligned.WithLabelValues("miss")
	m.plain, m.txn, m.join = m.compounds.WithLabelValues("plain"), m.compounds.WithLabelValues("txn"), m.compounds.WithLabelValues("join")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ops, m.opLatency, m.compounds, m.txns, m.dirLocks, m.writeAligned, m.payloadCRC} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
