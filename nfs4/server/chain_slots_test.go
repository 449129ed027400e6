package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// TestChainMoreCompoundsThanSlots: a client with more chained COMPOUNDs
// in flight than session slots (two concurrent vNFS vector calls: 2 × 16
// on 16 slots) must not stall: here COMPOUNDs 1 and 2 of a chain take
// both slots of a 2-slot session and wait at the server for COMPOUND 0,
// which waited at the client for a slot — until the chain wait ended,
// COMPOUND 1 was refused (NFS4ERR_DELAY) and the chain broken. The
// client gives a chain's COMPOUNDs slots in the chain's order.
func TestChainMoreCompoundsThanSlots(t *testing.T) {
	defer server.SetChainWaitForTest(server.SetChainWaitForTest(time.Second))
	ts := startServer(t)
	c, err := client.Dial(context.Background(), client.Config{Addr: ts.addr, Slots: 2, RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := c.NewChainID()
	cps := make([]*client.Compound, 3)
	for k := range cps {
		cps[k] = &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(k), Last: k == 2}}
		cps[k].PutRootFH()
		cps[k].Mkdir(fmt.Sprintf("d%d", k), nfsv4.Fattr4{})
	}
	reps, errs := sendDelayed(c, cps, []time.Duration{50 * time.Millisecond, 0, 0})
	for k := range cps {
		if errs[k] != nil || reps[k].Status != nfsv4.NFS4_OK {
			t.Errorf("COMPOUND %d: %v %v", k, errs[k], reps[k])
		}
	}
}
