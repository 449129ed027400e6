package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// crcer's handler treats Args as a 4-byte header length h, a 4-byte
// trailer length tr, h header bytes, a payload and tr trailer bytes (a
// WRITE followed by more operations). It asks for the payload's CRC
// (PayloadCRC), then for its alignment (AlignPayload, which also tells
// the connection where to hash later records from), and replies with
// whether PayloadCRC knew the CRC (1 byte), its CRC32C and, when a
// trailer is there, whether PayloadCRC of header+payload (not at the
// hashed offset) and of the payload minus its first byte answered. A
// first header byte of hashOff or hashOn then calls HashPayloads(false)
// or HashPayloads(true).
type crcer struct{}

const (
	hashOff = 1
	hashOn  = 2
)

func (crcer) Handle(ctx context.Context, c *Call) Reply {
	c.ReuseArgs()
	h := int(binary.BigEndian.Uint32(c.Args))
	tr := int(binary.BigEndian.Uint32(c.Args[4:]))
	p := c.Args[8+h : len(c.Args)-tr]
	crc, ok := c.PayloadCRC(p)
	_, okWider := c.PayloadCRC(c.Args[8 : len(c.Args)-tr])
	_, okShifted := c.PayloadCRC(p[1:])
	c.AlignPayload(p)
	if h > 0 {
		switch c.Args[8] {
		case hashOff:
			c.HashPayloads(false)
		case hashOn:
			c.HashPayloads(true)
		}
	}
	body := []byte{0, 0, 0}
	if ok {
		body[0] = 1
	}
	if okWider {
		body[1] = 1
	}
	if okShifted {
		body[2] = 1
	}
	return Reply{Stat: rpcv2.SUCCESS, Body: binary.BigEndian.AppendUint32(body, crc)}
}

func crcArgs(h, n, tr int, rnd *rand.Rand) (args, payload []byte) {
	b := binary.BigEndian.AppendUint32(nil, uint32(h))
	b = binary.BigEndian.AppendUint32(b, uint32(tr))
	b = append(b, bytes.Repeat([]byte{7}, h)...)
	start := len(b)
	for range n {
		b = append(b, byte(rnd.Uint32()))
	}
	payload = b[start:]
	b = append(b, bytes.Repeat([]byte{9}, tr)...)
	return b, b[start : start+n]
}

// TestPayloadCRC: once a connection learnt a payload offset, the CRC32C
// PayloadCRC returns for a payload at that offset is the payload's, for
// payload lengths on and off block boundaries, with trailers shorter and
// longer than a block, in fragmented records and in records written in
// small pieces with pauses (partial reads); a slice not starting at the
// learnt offset, a record of another layout and a record before anything
// was learnt get ok=false; records read after the handler turned hashing
// off (HashPayloads) get ok=false too, until it turns it on. Seeded
// (logged).
func TestPayloadCRC(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	c := serveAndDial(t, Config{Handler: crcer{}})
	cred := rpcv2.OpaqueAuth{}
	type req struct {
		h, n, tr int
		frags    int  // >1: sent as that many fragments
		trickle  bool // written in small pieces with pauses
		want     bool // PayloadCRC must know the CRC
		hash     byte // hashOff, hashOn: the handler calls HashPayloads
	}
	reqs := []req{
		{h: 100, n: 128 << 10},                           // nothing learnt yet
		{h: 100, n: 128 << 10, want: true},               // learnt
		{h: 100, n: 1 << 20, tr: 40, want: true},         // a 1 MiB WRITE and a GETATTR
		{h: 100, n: 1<<20 - 1000, tr: 40, want: true},    // a partial last block
		{h: 100, n: 1<<20 + 3, tr: 70 << 10, want: true}, // trailer longer than a block
		{h: 100, n: 64 << 10, tr: 200 << 10, want: true}, // payload one block, long trailer
		{h: 100, n: 1 << 20, frags: 3, want: true},       // fragmented
		{h: 100, n: 700 << 10, trickle: true, want: true},
		{h: 100, n: 1000},                               // small record: not hashed
		{h: 300, n: 256 << 10},                          // another layout
		{h: 300, n: 256 << 10, want: true},              // learnt
		{h: 300, n: 30 << 10, tr: 40 << 10, want: true}, // record large, payload short: still hashed
		{h: 5000, n: 200 << 10},                         // header past the learnt offset
		{h: 5000, n: 200<<10 + 1, want: true},           // learnt
		{h: 5000, n: 200 << 10, frags: 2, trickle: true, want: true},
		{h: 5000, n: 200 << 10, frags: 7},                      // first fragment below 64 KiB: not hashed
		{h: 5000, n: 200 << 10, want: true, hash: hashOff},     // hashed; later records not
		{h: 5000, n: 200 << 10},                                // not hashed
		{h: 5000, n: 1 << 20, tr: 40, frags: 3, trickle: true}, // not hashed
		{h: 5000, n: 200 << 10, hash: hashOn},                  // not hashed; later records are
		{h: 5000, n: 1 << 20, tr: 40, frags: 2, want: true},    // hashed again
		{h: 5000, n: 200 << 10, want: true, hash: hashOn},      // on and on
		{h: 5000, n: 200 << 10, want: true},                    // hashed
	}
	for i, r := range reqs {
		args, payload := crcArgs(r.h, r.n, r.tr, rnd)
		if r.hash != 0 {
			args[8] = r.hash
		}
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
		if r.trickle {
			for len(msg) > 0 {
				k := min(len(msg), 1+rnd.IntN(50<<10))
				c.Write(msg[:k])
				msg = msg[k:]
				time.Sleep(time.Millisecond)
			}
		} else {
			c.Write(msg)
		}
		m, body := readReply(t, c)
		if m.Xid != uint32(i+1) || len(body) != 7 {
			t.Fatalf("request %d: reply xid %d body %x", i, m.Xid, body)
		}
		ok, crc := body[0] == 1, binary.BigEndian.Uint32(body[3:])
		if ok != r.want {
			t.Fatalf("request %d (%+v): PayloadCRC ok=%v, want %v", i, r, ok, r.want)
		}
		if want := crc32.Checksum(payload, castagnoli); ok && crc != want {
			t.Fatalf("request %d (%+v): PayloadCRC %08x, want %08x", i, r, crc, want)
		}
		if body[1] == 1 || body[2] == 1 {
			t.Fatalf("request %d (%+v): PayloadCRC answered for a slice not at the payload offset", i, r)
		}
	}

	// A Call not from a Server knows no CRC.
	b := make([]byte, 100)
	if _, ok := (&Call{Args: b}).PayloadCRC(b); ok {
		t.Error("PayloadCRC of a Call not from a Server reported a CRC")
	}
}

// shortReader returns at most a random number of bytes per Read.
type shortReader struct {
	r   io.Reader
	rnd *rand.Rand
}

func (s shortReader) Read(p []byte) (int, error) {
	return s.r.Read(p[:min(len(p), 1+s.rnd.IntN(100<<10))])
}

// TestReadRecordHashed: readRecord with a recordCRC hashes any record,
// fragmented or not, read in reads of any size, so that sum gives the
// CRC32C of every slice starting at the hashed offset (and no other), and
// the record's bytes are what was sent. Seeded (logged).
func TestReadRecordHashed(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	h := &recordCRC{}
	for i := range 200 {
		n := 1 + rnd.IntN(1<<20+100)
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(rnd.Uint32())
		}
		start := rnd.IntN(n + 10) // sometimes past the end
		var frags [][]byte
		for rest := body; len(rest) > 0; {
			k := min(len(rest), 1+rnd.IntN(n))
			frags = append(frags, rest[:k])
			rest = rest[k:]
		}
		r := shortReader{bytes.NewReader(record(frags...)), rnd}
		hashStart := func(first int) int {
			if start >= first {
				return -1 // as the server: a start within the first fragment
			}
			return start
		}
		rec, err := readRecord(r, 2<<20, getRecord, h, hashStart)
		if err != nil || !bytes.Equal(rec, body) {
			t.Fatalf("record %d (%d bytes, %d fragments): %v, intact %v", i, n, len(frags), err, bytes.Equal(rec, body))
		}
		hashed := start < len(frags[0])
		for range 5 {
			end := start + rnd.IntN(n-min(start, n)+1)
			if start >= n || end == start {
				continue
			}
			crc, ok := h.sum(rec, rec[start:end])
			if ok != hashed {
				t.Fatalf("record %d: sum of [%d, %d) ok=%v, want %v", i, start, end, ok, hashed)
			}
			if want := crc32.Checksum(rec[start:end], castagnoli); ok && crc != want {
				t.Fatalf("record %d: sum of [%d, %d) = %08x, want %08x", i, start, end, crc, want)
			}
			if start+1 < end {
				if _, ok := h.sum(rec, rec[start+1:end]); ok {
					t.Fatalf("record %d: sum of a slice not at the hashed offset answered", i)
				}
			}
		}
		putRecord(rec)
	}
	// A short record: the error, as without hashing.
	h.reset(0)
	msg := record(bytes.Repeat([]byte{1}, 100<<10))
	if _, err := readRecord(bytes.NewReader(msg[:50<<10]), 1<<20, nil, h, func(int) int { return 0 }); err != io.ErrUnexpectedEOF {
		t.Fatalf("record cut short: %v, want io.ErrUnexpectedEOF", err)
	}
}
