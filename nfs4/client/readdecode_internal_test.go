package client

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestDecodeReadOK checks the READ fast path of decodeReply against the
// generated decoder on encoded replies (data lengths 0–9 and a few larger,
// both eof values, followed by another result), and that truncated or
// malformed READ results are errors.
func TestDecodeReadOK(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, n := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 4095, 12 << 10, 65537} {
		for _, eof := range []bool{false, true} {
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			res := []nfsv4.NfsResop4{
				&nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: eof, Data: data}}},
				&nfsv4.NfsResop4_OP_PUTROOTFH{Opputrootfh: nfsv4.Putrootfh4res{Status: nfsv4.NFS4_OK}},
			}
			body := encodeCompoundReply(t, res)
			rep, err := decodeReply(body)
			if err != nil {
				t.Fatalf("n=%d eof=%v: %v", n, eof, err)
			}
			if len(rep.results) != 2 {
				t.Fatalf("n=%d: %d results", n, len(rep.results))
			}
			got := rep.results[0].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4
			if got.Eof != eof || !bytes.Equal(got.Data, data) {
				t.Fatalf("n=%d eof=%v: got eof=%v, %d bytes", n, eof, got.Eof, len(got.Data))
			}
			if cap(got.Data) != len(got.Data) {
				t.Fatalf("n=%d: data capacity %d reaches past the data", n, cap(got.Data))
			}
			if !reflect.DeepEqual(rep.results[1], res[1]) {
				t.Fatalf("n=%d: result after READ decoded as %#v", n, rep.results[1])
			}
			// Every truncation of the READ result is an error.
			readEnd := 12 + 8 + 8 + (n+3)&^3
			for cut := 12; cut < readEnd; cut += 1 + cut/7 {
				tb := append([]byte{}, body[:cut]...)
				binary.BigEndian.PutUint32(tb[8:], 1) // one result
				if _, err := decodeReply(tb); err == nil {
					t.Fatalf("n=%d: reply cut at %d of %d decoded", n, cut, readEnd)
				}
			}
		}
	}
	// A bad boolean.
	body := encodeCompoundReply(t, []nfsv4.NfsResop4{
		&nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Data: []byte("abc")}}}})
	binary.BigEndian.PutUint32(body[20:], 2)
	if _, err := decodeReply(body); err == nil {
		t.Fatal("eof boolean 2 decoded")
	}
}

// encodeCompoundReply encodes a COMPOUND4res with status NFS4_OK, an
// empty tag and results res.
func encodeCompoundReply(t *testing.T, res []nfsv4.NfsResop4) []byte {
	t.Helper()
	rep := nfsv4.Compound4res{Status: nfsv4.NFS4_OK, Resarray: res}
	var buf bytes.Buffer
	if _, err := rep.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDecodeReaddirOK checks the READDIR fast path of decodeReply against
// the generated decoder on random listings (0–5 entries, names of every
// padding, empty and non-empty attribute masks and values) followed by
// another result, and that truncations and bad booleans are errors.
func TestDecodeReaddirOK(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for iter := range 300 {
		ok := &nfsv4.Readdir4res_NFS4_OK{}
		for i := range ok.Resok4.Cookieverf {
			ok.Resok4.Cookieverf[i] = byte(rng.Uint32())
		}
		ok.Resok4.Reply.Eof = rng.IntN(2) == 0
		next := &ok.Resok4.Reply.Entries
		for range rng.IntN(6) {
			var mask []uint32
			for range rng.IntN(3) {
				mask = append(mask, rng.Uint32())
			}
			var vals []byte
			for range rng.IntN(100) {
				vals = append(vals, byte(rng.Uint32()))
			}
			e := &nfsv4.Entry4{Cookie: rng.Uint64(),
				Name:  []string{"", "a", "ab", "abc", "abcd", "ünï", "file-00042.dat"}[rng.IntN(7)],
				Attrs: nfsv4.Fattr4{Attrmask: mask, AttrVals: vals}}
			*next = e
			next = &e.Nextentry
		}
		res := []nfsv4.NfsResop4{
			&nfsv4.NfsResop4_OP_READDIR{Opreaddir: ok},
			&nfsv4.NfsResop4_OP_PUTROOTFH{Opputrootfh: nfsv4.Putrootfh4res{Status: nfsv4.NFS4_OK}},
		}
		body := encodeCompoundReply(t, res)
		rep, err := decodeReply(body)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		want, _, err := nfsv4.ReadNfsResop4(bytes.NewReader(body[12:]))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.results) != 2 || !reflect.DeepEqual(rep.results[0], want) || !reflect.DeepEqual(rep.results[1], res[1]) {
			t.Fatalf("iter %d: decoded %#v, generated %#v", iter, rep.results, want)
		}
		end := len(body) - 8 // the READDIR result ends before PUTROOTFH's
		for cut := 12; cut < end; cut += 1 + rng.IntN(13) {
			tb := append([]byte{}, body[:cut]...)
			binary.BigEndian.PutUint32(tb[8:], 1)
			if _, err := decodeReply(tb); err == nil {
				t.Fatalf("iter %d: reply cut at %d of %d decoded", iter, cut, end)
			}
		}
		// The "value follows" word of the first entry (or the list's
		// end) set to 2.
		bad := append([]byte{}, body...)
		binary.BigEndian.PutUint32(bad[12+8+8:], 2)
		if _, err := decodeReply(bad); err == nil {
			t.Fatalf("iter %d: bad boolean decoded", iter)
		}
	}
}
