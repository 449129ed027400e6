package server

import (
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestObserveOp checks that observeOp counts operations by opcode and
// status, through the per-opcode cache and the fallback map alike.
func TestObserveOp(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		m.observeOp(nfsv4.OP_GETATTR, nfsv4.NFS4_OK, 1e-5)
	}
	m.observeOp(nfsv4.OP_GETATTR, nfsv4.NFS4ERR_STALE, 1e-5)
	m.observeOp(nfsv4.OP_LOOKUP, nfsv4.NFS4ERR_NOENT, 1e-5)
	m.observeOp(OpTxnBegin, nfsv4.NFS4_OK, 1e-5)
	m.observeOp(OpTxnBegin, nfsv4.NFS4_OK, 1e-5)
	for _, c := range []struct {
		op     nfsv4.NfsOpnum4
		status nfsv4.Nfsstat4
		want   float64
	}{
		{nfsv4.OP_GETATTR, nfsv4.NFS4_OK, 3},
		{nfsv4.OP_GETATTR, nfsv4.NFS4ERR_STALE, 1},
		{nfsv4.OP_LOOKUP, nfsv4.NFS4ERR_NOENT, 1},
		{nfsv4.OP_LOOKUP, nfsv4.NFS4_OK, 0},
		{OpTxnBegin, nfsv4.NFS4_OK, 2},
	} {
		var d dto.Metric
		if err := m.ops.WithLabelValues(opName(c.op), statusName(c.status)).Write(&d); err != nil {
			t.Fatal(err)
		}
		if got := d.GetCounter().GetValue(); got != c.want {
			t.Errorf("ops_total{%s,%s} = %v, want %v", opName(c.op), statusName(c.status), got, c.want)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "txnfs_nfs4_op_seconds" {
			n = len(mf.GetMetric())
		}
	}
	if n != 3 {
		t.Errorf("%d latency series, want 3 (GETATTR, LOOKUP, TXN_BEGIN)", n)
	}
}
