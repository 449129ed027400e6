package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors. With a nil registry
// they are created but not registered.
type metrics struct {
	ops       *prometheus.CounterVec   // op, status
	opLatency *prometheus.HistogramVec // op
	compounds *prometheus.HistogramVec // kind (plain, txn)
	txns      *prometheus.CounterVec   // outcome (commit, abort, retry, fail)
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
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ops, m.opLatency, m.compounds, m.txns} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
