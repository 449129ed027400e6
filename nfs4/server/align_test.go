package server_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
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

// payloadCRCs reads txnfs_nfs4_write_payload_crc_total.
func payloadCRCs(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "txnfs_nfs4_write_payload_crc_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestWritePayloadAligned: a client repeating one WRITE compound layout
// gets its 1 MiB payloads placed 4 KiB-aligned in the request records
// from the second WRITE on (write_payload_aligned_total hit), for FILE_SYNC
// and UNSTABLE writes, and the file reads back intact (the slice store
// writes aligned payloads straight from the record). A compound of
// another layout in between is served intact and re-learnt. The payload's
// CRC comes from the rpc layer (hashed while the record arrived) exactly
// for the aligned payloads of records read after an in-place WRITE.
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
	// The connection hashes a record while it arrives (the CRC is then
	// known) only if its previous large WRITE was written in place (an
	// UNSTABLE WRITE alone): a lent payload (a FILE_SYNC WRITE's) is
	// hashed by the slice store while its write runs, and the connection
	// stops hashing.
	hashing := true
	check := func(i int, ops ...nfsv4.NfsArgop4) {
		t.Helper()
		hit0, _ := alignedWrites(t, reg)
		crc0 := payloadCRCs(t, reg)
		okT(t)(c.Compound(ops...))
		hit1, _ := alignedWrites(t, reg)
		known := payloadCRCs(t, reg) > crc0
		if wantKnown := hashing && hit1 > hit0; known != wantKnown {
			t.Errorf("WRITE %d: payload CRC from the rpc layer %v, want %v (aligned %v, connection hashing %v)", i, known, wantKnown, hit1 > hit0, hashing)
		}
		w := ops[len(ops)-1].(*nfsv4.NfsArgop4_OP_WRITE)
		hashing = w.Opwrite.Stable == nfsv4.UNSTABLE4
	}
	for i := range n {
		w := write(anon, uint64(i*size), want[i*size:(i+1)*size])
		if i%2 == 1 || i == 4 {
			w.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Stable = nfsv4.UNSTABLE4
		}
		check(i, putfh(fh), w)
		if i == 3 { // another layout: an extra GETATTR before the WRITE
			check(i, putfh(fh), getattr(nfsv4.FATTR4_SIZE), write(anon, uint64(i*size), want[i*size:(i+1)*size]))
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
	if crcs := payloadCRCs(t, reg); crcs == 0 {
		t.Error("no WRITE had its payload CRC from the rpc layer")
	}
}

// TestWritePayloadAlignedClient: nfs4/client (the vnfs transport), with
// several 1 MiB WRITE compounds in flight on its connection, gets its
// payloads aligned after the first, and the data reads back intact.
func TestWritePayloadAlignedClient(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	ctx := context.Background()
	c := ts.dialClient(t)
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

// TestAlignedGarbage: on a connection that learnt a WRITE layout (so its
// large records are read at a shifted start), large random COMPOUND
// arguments and WRITEs cut short are answered GARBAGE_ARGS or with a
// COMPOUND reply that decodes (BADXDR), and the connection then still
// serves an aligned WRITE. Randomized: the seed is logged.
func TestAlignedGarbage(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	c := ts.session(t, 1, "garbage")
	fh := writeFile(t, c, "f", []byte("x"))
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	okT(t)(c.Compound(putfh(fh), write(anon, 0, data)))     // learns the layout
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	full := testclient.EncodeCompound(1, false, []nfsv4.NfsArgop4{c.SequenceOp(c.Seq + 1), putfh(fh), write(anon, 0, data)})
	for i := range 12 {
		var args []byte
		switch i % 3 {
		case 0: // random bytes
			args = make([]byte, 64<<10+r.IntN(1<<20))
			for j := range args {
				args[j] = byte(r.Uint32())
			}
		case 1: // a WRITE cut short
			args = full[:len(full)-1-r.IntN(1<<19)]
		default: // a WRITE whose bytes after the header are flipped at random
			args = bytes.Clone(full)
			for range 8 {
				args[r.IntN(200)] ^= byte(1 + r.IntN(255))
			}
		}
		rr, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, args)
		if err != nil {
			t.Fatalf("case %d: %v (the server must answer, not drop the connection)", i, err)
		}
		body, ok := rr.Msg.Body.(*rpcv2.RpcMsgBody_REPLY)
		if !ok {
			t.Fatalf("case %d: not a reply", i)
		}
		acc, ok := body.Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
		if !ok {
			t.Fatalf("case %d: call denied", i)
		}
		switch acc.Areply.ReplyData.GetStat() {
		case rpcv2.GARBAGE_ARGS:
		case rpcv2.SUCCESS:
			if _, err := testclient.DecodeCompound(rr.Body); err != nil {
				t.Fatalf("case %d: reply does not decode: %v", i, err)
			}
		default:
			t.Fatalf("case %d: accept stat %d", i, acc.Areply.ReplyData.GetStat())
		}
	}
	// The session's slot may have moved on with a garbage SEQUENCE that
	// decoded: a fresh session on a fresh connection learns again.
	hit, _ := alignedWrites(t, reg)
	c2 := ts.session(t, 1, "after")
	okT(t)(c2.Compound(putfh(fh), write(anon, 0, data)))
	okT(t)(c2.Compound(putfh(fh), write(anon, 0, data)))
	if h, _ := alignedWrites(t, reg); h <= hit {
		t.Error("no aligned WRITE after the garbage")
	}
	d, _ := readData(t, okT(t)(c2.Compound(putfh(fh), read(anon, 0, 1<<20))).Results[1])
	if !bytes.Equal(d, data) {
		t.Fatal("file differs after the garbage")
	}
}

// slicePuts returns the slice store's counts of direct puts written in
// place from the caller's buffer (unstaged) and in the background from a
// lent one.
func slicePuts(t *testing.T, reg *prometheus.Registry) (unstaged, lent float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "txnfs_slice_unstaged_puts_total":
			unstaged = mf.GetMetric()[0].GetCounter().GetValue()
		case "txnfs_slice_lent_puts_total":
			lent = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return unstaged, lent
}

// TestWritePayloadInPlace: an aligned 1 MiB payload of the last WRITE of
// a compound's run of operations (one fs transaction, which commits and
// waits for the data right after it) is written in place by the goroutine
// running the compound (an unstaged put), not by a goroutine of its own;
// a WRITE followed by another lends its payload to a background write that
// overlaps the next one. The data reads back intact either way.
func TestWritePayloadInPlace(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	reg.MustRegister(ts.eng.Metrics())
	c := ts.session(t, 1, "inplace")
	fh := writeFile(t, c, "f", []byte("x"))
	r := rand.New(rand.NewPCG(3, 4))
	const n, size = 4, 1 << 20
	want := make([]byte, 2*n*size)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	// UNSTABLE WRITEs alone: nothing syncs before the reply, so the write
	// runs in place. A FILE_SYNC WRITE is lent (its commit pledges the
	// write, which overlaps the commit and the log write: Session 12).
	for i := range n {
		w := write(anon, uint64(i*size), want[i*size:(i+1)*size])
		if i < n-1 {
			w.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Stable = nfsv4.UNSTABLE4
		}
		okT(t)(c.Compound(putfh(fh), w))
	}
	hit, _ := alignedWrites(t, reg)
	unstaged, lent := slicePuts(t, reg)
	if hit < 2 || unstaged < hit-1 || lent != 1 {
		t.Errorf("plain WRITEs: %v aligned payloads, %v unstaged and %v lent puts; want the aligned UNSTABLE ones unstaged, the FILE_SYNC one lent", hit, unstaged, lent)
	}
	// Two WRITEs of half a MiB in one compound (the session's request
	// limit), plain and transactional: the first, aligned, is lent (the
	// second overlaps its write).
	const half = size / 2
	for i := n; i < 2*n; i++ {
		off := i * size
		ops := []nfsv4.NfsArgop4{putfh(fh), write(anon, uint64(off), want[off:off+half]),
			write(anon, uint64(off+half), want[off+half:off+size])}
		if i%2 == 0 {
			okT(t)(c.Compound(ops...))
		} else {
			rep, err := c.Txn(ops...)
			wantStatus(t, rep, err, nfsv4.NFS4_OK)
		}
	}
	hit2, _ := alignedWrites(t, reg)
	unstaged2, lent2 := slicePuts(t, reg)
	t.Logf("aligned payloads %v then %v; unstaged puts %v then %v, lent %v", hit, hit2, unstaged, unstaged2, lent2)
	if hit2 > hit {
		if lent := lent2 - lent; lent == 0 {
			t.Errorf("WRITEs followed by another WRITE: no lent put (%v aligned payloads)", hit2-hit)
		}
	}
	var got []byte
	for off := 0; off < 2*n*size; off += size {
		d, _ := readData(t, okT(t)(c.Compound(putfh(fh), read(anon, uint64(off), size))).Results[1])
		got = append(got, d...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file read back differs from the WRITEs")
	}
}

// TestWriteUnstableCommitLent: a compound of an UNSTABLE WRITE and a
// COMMIT (nfsbench's unstable+commit rows) takes the FILE_SYNC path: its
// run commits durably, so every aligned payload is lent (its write
// overlaps the commit and the log write), none written in place, and
// none hashed by the connection while it arrived — unless another large
// WRITE runs (docs/nfs-server.md "Session 13"). The WRITE still answers
// UNSTABLE4 with the server's verifier, and the data reads back.
func TestWriteUnstableCommitLent(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.Registry = reg })
	reg.MustRegister(ts.eng.Metrics())
	c := ts.session(t, 1, "unstable-commit")
	fh := writeFile(t, c, "f", []byte("x"))
	r := rand.New(rand.NewPCG(5, 6))
	const n, size = 5, 1 << 20
	want := make([]byte, n*size)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	for i := range n {
		w := write(anon, uint64(i*size), want[i*size:(i+1)*size])
		w.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Stable = nfsv4.UNSTABLE4
		rep := okT(t)(c.Compound(putfh(fh), w, &nfsv4.NfsArgop4_OP_COMMIT{}))
		res := rep.Results[1].(*nfsv4.NfsResop4_OP_WRITE).Opwrite.(*nfsv4.Write4res_NFS4_OK).Resok4
		verf := rep.Results[2].(*nfsv4.NfsResop4_OP_COMMIT).Opcommit.(*nfsv4.Commit4res_NFS4_OK).Resok4.Writeverf
		if res.Committed != nfsv4.UNSTABLE4 || res.Writeverf != verf {
			t.Errorf("WRITE %d: committed %v verifier %x, COMMIT's %x", i, res.Committed, res.Writeverf, verf)
		}
	}
	hit, _ := alignedWrites(t, reg)
	unstaged, lent := slicePuts(t, reg)
	crcs := payloadCRCs(t, reg)
	t.Logf("aligned payloads %v, unstaged puts %v, lent %v, CRCs from the rpc layer %v", hit, unstaged, lent, crcs)
	if hit < n-1 || lent != hit || unstaged != 0 || crcs > 0 {
		t.Errorf("%v aligned payloads, %v lent and %v unstaged puts, %v CRCs from the rpc layer; want every aligned one lent, none unstaged or hashed while it arrived", hit, lent, unstaged, crcs)
	}

	// With another large WRITE running (simulated), the CPU is what
	// limits: the connection hashes the records while they arrive again
	// (cheaper, from the cache), from the record after the first lent
	// WRITE that saw it on.
	server.AddPayloadWritesForTest(ts.srv, 1)
	for i := range n {
		w := write(anon, uint64(i*size), want[i*size:(i+1)*size])
		w.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Stable = nfsv4.UNSTABLE4
		okT(t)(c.Compound(putfh(fh), w, &nfsv4.NfsArgop4_OP_COMMIT{}))
	}
	server.AddPayloadWritesForTest(ts.srv, -1)
	hit2, _ := alignedWrites(t, reg)
	crcs2 := payloadCRCs(t, reg)
	t.Logf("with another large WRITE running: aligned payloads %v, CRCs from the rpc layer %v", hit2-hit, crcs2-crcs)
	if crcs2-crcs != hit2-hit-1 {
		t.Errorf("with another large WRITE running: %v CRCs from the rpc layer for %v aligned payloads, want all but the first", crcs2-crcs, hit2-hit)
	}
	// Alone again: the next record is still hashed, the later ones not.
	for i := range 3 {
		w := write(anon, uint64(i*size), want[i*size:(i+1)*size])
		okT(t)(c.Compound(putfh(fh), w))
	}
	if crcs3 := payloadCRCs(t, reg); crcs3 != crcs2+1 {
		t.Errorf("alone again: %v CRCs from the rpc layer for 3 WRITEs, want 1", crcs3-crcs2)
	}
	var got []byte
	for off := 0; off < n*size; off += size {
		d, _ := readData(t, okT(t)(c.Compound(putfh(fh), read(anon, uint64(off), size))).Results[1])
		got = append(got, d...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file read back differs from the WRITEs")
	}
}
