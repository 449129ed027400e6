package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"
	"unsafe"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"github.com/txnfs/txnfs/internal/hugepage"
)

// aligner's handler treats Args as a 4-byte header length h, h header
// bytes and a payload; it asks for the payload to be aligned
// (AlignPayload), lets the record be reused, and replies with whether the
// payload was aligned (1 byte) and the payload's CRC32.
type aligner struct{}

func (aligner) Handle(ctx context.Context, c *Call) Reply {
	c.ReuseArgs()
	h := int(binary.BigEndian.Uint32(c.Args))
	p := c.Args[4+h:]
	aligned := c.AlignPayload(p)
	body := []byte{0}
	if aligned {
		body[0] = 1
	}
	return Reply{Stat: rpcv2.SUCCESS, Body: binary.BigEndian.AppendUint32(body, crc32.ChecksumIEEE(p))}
}

func alignArgs(h, n int, seed byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(h))
	b = append(b, bytes.Repeat([]byte{seed}, h)...)
	for i := range n {
		b = append(b, byte(i*7)+seed)
	}
	return b
}

// TestAlignPayload: once a handler asked for a payload offset to be
// aligned, the connection's later records of the same layout arrive with
// the payload 4 KiB-aligned (hits), in single and multi-fragment records;
// a record of another layout is read intact (and re-learns its layout);
// records below alignMinRecord and a Call not from a Server are left as
// they are. Every payload arrives intact whatever the placement.
func TestAlignPayload(t *testing.T) {
	c := serveAndDial(t, Config{Handler: aligner{}})
	cred := rpcv2.OpaqueAuth{}
	type req struct {
		h, n      int
		frags     int  // >1: sent as that many fragments
		wantAlign bool // must arrive aligned
	}
	reqs := []req{
		{h: 100, n: 128 << 10},                   // learns the layout
		{h: 100, n: 128 << 10, wantAlign: true},  // same layout: aligned
		{h: 100, n: 1 << 20, wantAlign: true},    // larger payload, same offset
		{h: 100, n: 1 << 20, frags: 3},           // fragmented: intact (alignment not promised)
		{h: 100, n: 256 << 10, wantAlign: true},  //
		{h: 300, n: 256 << 10},                   // another layout: intact
		{h: 300, n: 256 << 10, wantAlign: true},  // learnt
		{h: 100, n: 1000},                        // small: intact
		{h: 5000, n: 200 << 10},                  // header past the learnt offset
		{h: 5000, n: 200 << 10, wantAlign: true}, // learnt
	}
	for i, r := range reqs {
		args := alignArgs(r.h, r.n, byte(i))
		msg := call(uint32(i+1), 1, cred, args)
		if r.frags > 1 {
			body := msg[4:]
			var frags [][]byte
			step := len(body)/r.frags + 1
			for len(body) > 0 {
				k := min(step, len(body))
				frags = append(frags, body[:k])
				body = body[k:]
			}
			msg = record(frags...)
		}
		c.Write(msg)
		m, body := readReply(t, c)
		if m.Xid != uint32(i+1) || len(body) != 5 {
			t.Fatalf("request %d: reply xid %d body %x", i, m.Xid, body)
		}
		if got, want := binary.BigEndian.Uint32(body[1:]), crc32.ChecksumIEEE(args[4+r.h:]); got != want {
			t.Fatalf("request %d (%+v): payload CRC %08x, want %08x", i, r, got, want)
		}
		if r.wantAlign && body[0] != 1 {
			t.Errorf("request %d (%+v): payload not aligned", i, r)
		}
	}

	// A Call not from a Server only reports.
	b := make([]byte, 3*PayloadAlign)
	cl := &Call{Args: b}
	if cl.AlignPayload(b[1:]) || cl.AlignPayload(nil) {
		t.Error("AlignPayload of an unaligned payload reported aligned")
	}
}

// TestHugeRecords: records placed for alignment come from the huge
// records (on a huge-page boundary), which putRecord takes back; when all
// maxHugeRecords are in use, and for records too large for one or with no
// alignment asked, records are read unshifted from the size-class pool.
func TestHugeRecords(t *testing.T) {
	// Take every huge record, so the test knows the state.
	var held [][]byte
	for {
		b, ok := getHugeRecord()
		if !ok {
			break
		}
		held = append(held, b)
	}
	if len(held) != maxHugeRecords || int(hugeMade.Load()) != maxHugeRecords {
		t.Fatalf("%d huge records taken, %d made; want %d", len(held), hugeMade.Load(), maxHugeRecords)
	}
	cn := &conn{}
	cn.alignOff.Store(145)
	if rec, base := cn.recordBuffer(1<<20 + 200); &rec[0] != &base[0] || cap(base) == hugeCap {
		t.Error("all huge records in use: record not read unshifted from the pool")
	}
	putRecord(held[0])
	rec, base := cn.recordBuffer(1<<20 + 200)
	if len(rec) != 1<<20+200 || cap(base) != hugeCap || &base[0] != &held[0][0] || !Aligned(rec[144:]) {
		t.Fatalf("aligned record: len %d, base cap %d, payload aligned %v", len(rec), cap(base), Aligned(rec[144:]))
	}
	if uintptr(unsafe.Pointer(&base[0]))%hugepage.Size != 0 {
		t.Fatal("huge record not on a huge-page boundary")
	}
	held[0] = base
	// Too large for a huge record, or no alignment asked: unshifted.
	for _, held := range held {
		putRecord(held)
	}
	if len(hugeRecords) != maxHugeRecords {
		t.Fatalf("%d huge records free, want %d", len(hugeRecords), maxHugeRecords)
	}
	if rec, base := cn.recordBuffer(hugeCap); &rec[0] != &base[0] || cap(base) == hugeCap {
		t.Error("a record too large to shift within a huge record was placed in one")
	}
	cn.alignOff.Store(0)
	if rec, base := cn.recordBuffer(1 << 20); &rec[0] != &base[0] || cap(base) == hugeCap {
		t.Error("record shifted without an alignment request")
	}
}

// TestHugeRecordsCutShort: a connection that learnt an aligned layout and
// then hangs up in the middle of a large record gives its huge record
// back (before, every such record was lost for good, and
// maxHugeRecords clients hanging up mid-WRITE ended alignment for the
// process).
func TestHugeRecordsCutShort(t *testing.T) {
	cred := rpcv2.OpaqueAuth{}
	srv := Config{Handler: aligner{}}
	for range 2 * maxHugeRecords {
		c := serveAndDial(t, srv)
		c.Write(call(1, 1, cred, alignArgs(100, 128<<10, 1))) // learns the layout
		readReply(t, c)
		msg := call(2, 1, cred, alignArgs(100, 1<<20, 2))
		c.Write(msg[:len(msg)/2]) // a huge record is taken for it
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(hugeRecords) != int(hugeMade.Load()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d huge records made, %d free after every connection closed", hugeMade.Load(), len(hugeRecords))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alignKeeper is aligner without ReuseArgs: the handler keeps every record.
type alignKeeper struct{ aligner }

func (k alignKeeper) Handle(ctx context.Context, c *Call) Reply {
	rep := k.aligner.Handle(ctx, c)
	c.reuse = false // as if ReuseArgs had not been called
	return rep
}

// TestHugeRecordsKept: records whose handler keeps them (no ReuseArgs, as
// for NFSv4.0 compounds) do not use up the bounded set of huge records:
// after more than maxHugeRecords large kept records, payloads still
// arrive aligned.
func TestHugeRecordsKept(t *testing.T) {
	c := serveAndDial(t, Config{Handler: alignKeeper{}})
	cred := rpcv2.OpaqueAuth{}
	for i := range 2*maxHugeRecords + 3 {
		c.Write(call(uint32(i+1), 1, cred, alignArgs(100, 256<<10, byte(i))))
		_, body := readReply(t, c)
		if i > 0 && body[0] != 1 {
			t.Fatalf("kept record %d: payload not aligned (%d huge records made, %d free)", i, hugeMade.Load(), len(hugeRecords))
		}
	}
}
