package server

import (
	"sync"

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

	// byOp caches the per-operation children of ops and opLatency
	// (label lookups hash strings: a few percent of a small compound).
	byOp sync.Map // opKey -> prometheus.Counter or prometheus.Observer
	// plain, txn and join are the children of compounds.
	plain, txn, join prometheus.Observer
}

type opKey struct {
	op      nfsv4.NfsOpnum4
	status  nfsv4.Nfsstat4
	latency bool
}

// observeOp counts one operation and its latency.
func (m *metrics) observeOp(op nfsv4.NfsOpnum4, st nfsv4.Nfsstat4, seconds float64) {
	k := opKey{op: op, status: st}
	c, ok := m.byOp.Load(k)
	if !ok {
		c, _ = m.byOp.LoadOrStore(k, m.ops.WithLabelValues(opName(op), statusName(st)))
	}
	c.(prometheus.Counter).Inc()
	k = opKey{op: op, latency: true}
	h, ok := m.byOp.Load(k)
	if !ok {
		h, _ = m.byOp.LoadOrStore(k, m.opLatency.WithLabelValues(opName(op)))
	}
	h.(prometheus.Observer).Observe(seconds)
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
	}
	m.plain, m.txn, m.join = m.compounds.WithLabelValues("plain"), m.compounds.WithLabelValues("txn"), m.compounds.WithLabelValues("join")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ops, m.opLatency, m.compounds, m.txns} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
