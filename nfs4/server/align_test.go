package server_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// alignedWrites returns the server's count of large WRITEs whose data
// arrived 4 KiB-aligned (hit) or not (miss).
func alignedWrites(t *testing.T, reg *prometheus.Registry) (hit, miss float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "txnfs_nfs4_write_payload_aligned_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch m.GetLabel()[0].GetValue() {
			case "hit":
				hit = m.GetCounter().GetValue()
			case "miss":
				miss = m.GetCounter().GetValue()
			}
		}
	}
	return hit, miss
}

// TestWritePayloadAligned: a client repeating one WRITE compound layout
// gets its 1 MiB payloads placed 4 KiB-aligned in the request records
// from the second WRITE on (write_payload_aligned_total hit), for FILE_SYNC
// and UNSTABLE writes, and the file reads back intact (the slice store
// writes aligned payloads straight from the record). A compound of
// another layout in between is served intact and re-learnt.
func TestWritePayloadAligned(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	c := ts.session(t, 1, "align")
	fh := writeFile(t, c, "f", []byte("x"))
	r := rand.New(rand.NewPCG(1, 2))
	const n, size = 6, 1 << 20
	want := make([]byte, n*size)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	for i := range n {
		w := write(anon, uint64(i*size), want[i*size:(i+1)*size])
		if i%2 == 1 {
			w.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Stable = nfsv4.UNSTABLE4
		}
		okT(t)(c.Compound(putfh(fh), w))
		if i == 3 { // another layout: an extra GETATTR before the WRITE
			okT(t)(c.Compound(putfh(fh), getattr(nfsv4.FATTR4_SIZE), write(anon, uint64(i*size), want[i*size:(i+1)*size])))
		}
	}
	okT(t)(c.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_COMMIT{}))
	var got []byte
	for off := 0; off < n*size; off += size {
		d, _ := readData(t, okT(t)(c.Compound(putfh(fh), read(anon, uint64(off), size))).Results[1])
		got = append(got, d...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file read back differs from the WRITEs")
	}
	hit, miss := alignedWrites(t, reg)
	t.Logf("aligned WRITE payloads: %v hits, %v misses", hit, miss)
	// 7 WRITEs: the first of each layout and the first after a change
	// of layout may miss.
	if hit+miss != n+1 || hit < n+1-3 {
		t.Errorf("aligned WRITE payloads: %v hits, %v misses; want 7 WRITEs, at most 3 misses", hit, miss)
	}
}

// TestWritePayloadAlignedClient: nfs4/client (the vnfs transport), with
// several 1 MiB WRITE compounds in flight on its connection, gets its
// payloads aligned after the first, and the data reads back intact.
func TestWritePayloadAlignedClient(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cp client.Compound
	cp.PutRootFH()
	cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: "f", Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true})
	cp.GetFH()
	rep, err := c.Do(ctx, &cp)
	if err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("open: %v %v", rep, err)
	}
	fh := rep.Results[2].(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
	const n, size = 8, 1 << 20
	r := rand.New(rand.NewPCG(3, 4))
	want := make([]byte, n*size)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	write := func(i int) {
		var w client.Compound
		w.PutFH(fh)
		w.Write(nfsv4.Stateid4{}, uint64(i*size), want[i*size:(i+1)*size], i%2 == 0)
		if rep, err := c.Do(ctx, &w); err != nil || rep.Status != nfsv4.NFS4_OK {
			t.Errorf("write %d: %v %v", i, rep, err)
		}
	}
	write(0) // learns the layout
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); write(i) }()
	}
	wg.Wait()
	var cm client.Compound
	cm.PutFH(fh)
	cm.Commit()
	if rep, err := c.Do(ctx, &cm); err != nil || rep.Status != nfsv4.NFS4_OK {
		t.Fatalf("commit: %v %v", rep, err)
	}
	tc := ts.session(t, 1, "reader")
	var got []byte
	for off := 0; off < n*size; off += size {
		d, _ := readData(t, okT(t)(tc.Compound(putfh(fh), read(anon, uint64(off), size))).Results[1])
		got = append(got, d...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file read back differs from the WRITEs")
	}
	hit, miss := alignedWrites(t, reg)
	t.Logf("aligned WRITE payloads: %v hits, %v misses", hit, miss)
	if hit+miss != n || miss > 1 {
		t.Errorf("aligned WRITE payloads: %v hits, %v misses; want %d WRITEs, at most 1 miss", hit, miss, n)
	}
}
