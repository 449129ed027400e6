package server

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// fastOps are the operations with a hand-written argument decoder.
var fastOps = []nfsv4.NfsOpnum4{nfsv4.OP_PUTFH, nfsv4.OP_WRITE, nfsv4.OP_LOOKUP, nfsv4.OP_GETATTR, nfsv4.OP_SEQUENCE, nfsv4.OP_CLOSE, nfsv4.OP_OPEN}

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
		// decodeOpen leaves unusual OPENs, and those it cannot
		// decode, to the generated decoder, without reading.
		if code != nfsv4.OP_OPEN {
			t.Fatalf("op %d: not handled", code)
		}
		if r.Len() != len(args) {
			t.Fatalf("OPEN args %x: not handled but %d bytes read", body, len(args)-r.Len())
		}
		return
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
		&nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{Seqid: 4, OpenStateid: nfsv4.Stateid4{Seqid: 2, Other: [12]byte{1, 2, 3}}}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: 1, ShareAccess: 2, ShareDeny: 0,
			Owner:   nfsv4.StateOwner4{Clientid: 77, Owner: []byte("owner")},
			Openhow: &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{Createattrs: nfsv4.Fattr4{Attrmask: []uint32{1 << 4}, AttrVals: []byte{0, 0, 0, 0, 0, 0, 0, 0}}}},
			Claim:   &nfsv4.OpenClaim4_CLAIM_NULL{File: "f0001"}}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: 1, ShareAccess: 1,
			Owner:   nfsv4.StateOwner4{Clientid: 77, Owner: []byte("abc")},
			Openhow: &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_GUARDED4{Createattrs: nfsv4.Fattr4{AttrVals: []byte{1, 2, 3}}}},
			Claim:   &nfsv4.OpenClaim4_CLAIM_FH{}}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{ShareAccess: 3,
			Openhow: &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE},
			Claim:   &nfsv4.OpenClaim4_CLAIM_NULL{File: "ü"}}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{ShareAccess: 3,
			Openhow: &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_EXCLUSIVE4{Createverf: [8]byte{9}}},
			Claim:   &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: 0}}},
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

// TestDecodeOpenUsual: the OPENs a vectorized write sends (create with
// createattrs, by name) and plain opens are decoded by hand, not left to
// the generated decoder (FuzzFastArg lets decodeOpen decline any OPEN).
func TestDecodeOpenUsual(t *testing.T) {
	for _, o := range []nfsv4.Open4args{
		{Seqid: 0, ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_WRITE, Owner: nfsv4.StateOwner4{Clientid: 5, Owner: []byte("vnfs-owner")},
			Openhow: &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{Createattrs: nfsv4.Fattr4{
				Attrmask: []uint32{1 << nfsv4.FATTR4_SIZE}, AttrVals: make([]byte, 8)}}},
			Claim: &nfsv4.OpenClaim4_CLAIM_NULL{File: "f0042"}},
		{ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_READ, Owner: nfsv4.StateOwner4{Owner: []byte{1}},
			Openhow: &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE}, Claim: &nfsv4.OpenClaim4_CLAIM_FH{}},
	} {
		var b bytes.Buffer
		(&nfsv4.NfsArgop4_OP_OPEN{Opopen: o}).WriteTo(&b)
		b.Write([]byte{0, 0, 0, 9}) // the next operation
		args := b.Bytes()
		r := bytes.NewReader(args)
		arg, handled, ok := fastArg(nfsv4.OP_OPEN, r, args)
		if !handled || !ok {
			t.Fatalf("%+v: handled %v ok %v", o, handled, ok)
		}
		if r.Len() != 4 {
			t.Fatalf("%+v: %d bytes left, want 4", o, r.Len())
		}
		var got bytes.Buffer
		arg.WriteTo(&got)
		if !bytes.Equal(got.Bytes(), args[:len(args)-4]) {
			t.Fatalf("%+v: decoded as %+v", o, arg)
		}
	}
}
