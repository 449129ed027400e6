package server

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// fastOps are the operations with a hand-written argument decoder.
var fastOps = []nfsv4.NfsOpnum4{nfsv4.OP_PUTFH, nfsv4.OP_WRITE, nfsv4.OP_LOOKUP, nfsv4.OP_GETATTR, nfsv4.OP_SEQUENCE}

// checkFastArg decodes body as the arguments of fastOps[sel] with fastArg
// and with the generated decoder: both must accept or refuse it, consume
// the same bytes and give arguments that encode the same.
func checkFastArg(t *testing.T, sel uint8, body []byte) {
	code := fastOps[int(sel)%len(fastOps)]
	args := binary.BigEndian.AppendUint32(nil, uint32(code))
	args = append(args, body...)
	r := bytes.NewReader(args)
	fast, handled, ok := fastArg(code, r, args)
	if !handled {
		t.Fatalf("op %d: not handled", code)
	}
	gr := bytes.NewReader(args)
	ref, _, err := nfsv4.ReadNfsArgop4(gr)
	if w, isWrite := ref.(*nfsv4.NfsArgop4_OP_WRITE); err == nil && isWrite && (w.Opwrite.Stable < nfsv4.UNSTABLE4 || w.Opwrite.Stable > nfsv4.FILE_SYNC4) {
		// The one intended difference: the generated decoder takes any
		// stable_how4 value, decodeWrite refuses those not in the enum.
		if ok {
			t.Fatalf("WRITE with stable=%d decoded", w.Opwrite.Stable)
		}
		return
	}
	if ok != (err == nil) {
		t.Fatalf("op %d, args %x: fast decoder ok=%v, generated err=%v", code, body, ok, err)
	}
	if !ok {
		return
	}
	if r.Len() != gr.Len() {
		t.Fatalf("op %d, args %x: fast decoder left %d bytes, generated %d", code, body, r.Len(), gr.Len())
	}
	var fb, rb bytes.Buffer
	if _, err := fast.WriteTo(&fb); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.WriteTo(&rb); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fb.Bytes(), rb.Bytes()) {
		t.Fatalf("op %d, args %x: fast decoder gave %+v, generated %+v", code, body, fast, ref)
	}
}

// FuzzFastArg checks the hand-written argument decoders (decode.go)
// against the generated ones.
func FuzzFastArg(f *testing.F) {
	enc := func(op nfsv4.NfsArgop4) []byte {
		var b bytes.Buffer
		op.WriteTo(&b)
		return b.Bytes()[4:]
	}
	for _, op := range []nfsv4.NfsArgop4{
		&nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: []byte{1, 2, 3, 4, 5}}},
		&nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: nfsv4.Stateid4{Seqid: 3}, Offset: 7, Stable: nfsv4.FILE_SYNC4, Data: []byte("abcde")}},
		&nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: "name"}},
		&nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: []uint32{1, 2, 3}}},
		&nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSequenceid: 9, SaSlotid: 1, SaCachethis: true}},
	} {
		b := enc(op)
		for sel, code := range fastOps {
			if code == op.GetArgop() {
				f.Add(uint8(sel), b)
				f.Add(uint8(sel), b[:len(b)-1])
				f.Add(uint8(sel), append(b, 0, 0, 0, 0))
				bad := bytes.Clone(b)
				bad[len(bad)-1] = 0xff // padding or last field
				f.Add(uint8(sel), bad)
			}
		}
	}
	f.Add(uint8(2), []byte{0, 0, 0, 2, 0xc3, 0x28, 0, 0}) // invalid UTF-8
	f.Add(uint8(3), []byte{0, 0, 0, 0})                   // empty bitmap
	f.Add(uint8(0), []byte{0, 0, 0, 0})                   // empty handle
	f.Add(uint8(0), []byte{0, 0, 0, 129})                 // handle longer than NFS4_FHSIZE
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) { checkFastArg(t, sel, body) })
}
