package client

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"
)

// Fuzz targets for everything the client parses from the network: the RPC
// reply header (parseReply), COMPOUND4res with the extension's results
// (decodeReply, whose loop over the results must agree with the generated
// COMPOUND4res decoder when there are none), and attribute lists
// (DecodeAttrs). None may panic.
//
//	go test -run '^$' -fuzz FuzzDecodeReply -fuzztime 10m ./nfs4/client
//	go test -run '^$' -fuzz FuzzDecodeAttrs -fuzztime 5m ./nfs4/client
//	go test -run '^$' -fuzz FuzzParseReply -fuzztime 2m ./nfs4/client

// fuzzReplySeeds returns encoded COMPOUND4res bodies for the corpus.
func fuzzReplySeeds(t testing.TB) [][]byte {
	enc := func(res ...nfsv4.NfsResop4) []byte {
		var b bytes.Buffer
		rep := nfsv4.Compound4res{Status: nfsv4.NFS4_OK, Tag: "t", Resarray: res}
		if _, err := rep.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	var attrs bytes.Buffer
	runtime.WriteUnsignedHyper(&attrs, 4096)
	runtime.WriteUnsignedInt(&attrs, 0o644)
	fattr := nfsv4.Fattr4{Attrmask: MakeBitmap(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_MODE), AttrVals: attrs.Bytes()}
	seq := &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_NFS4_OK{SrResok4: nfsv4.Sequence4resok{
		SrSequenceid: 7, SrSlotid: 1, SrHighestSlotid: 3, SrTargetHighestSlotid: 3}}}
	read := &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: true, Data: []byte("hello")}}}
	e2 := &nfsv4.Entry4{Cookie: 2, Name: "b", Attrs: fattr}
	readdir := &nfsv4.NfsResop4_OP_READDIR{Opreaddir: &nfsv4.Readdir4res_NFS4_OK{Resok4: nfsv4.Readdir4resok{
		Reply: nfsv4.Dirlist4{Entries: &nfsv4.Entry4{Cookie: 1, Name: "a", Attrs: fattr, Nextentry: e2}, Eof: true}}}}
	getattr := &nfsv4.NfsResop4_OP_GETATTR{Opgetattr: &nfsv4.Getattr4res_NFS4_OK{Resok4: nfsv4.Getattr4resok{ObjAttributes: fattr}}}
	getfh := &nfsv4.NfsResop4_OP_GETFH{Opgetfh: &nfsv4.Getfh4res_NFS4_OK{Resok4: nfsv4.Getfh4resok{Object: []byte{1, 2, 3, 4, 5}}}}
	putroot := &nfsv4.NfsResop4_OP_PUTROOTFH{Opputrootfh: nfsv4.Putrootfh4res{Status: nfsv4.NFS4_OK}}
	seeds := [][]byte{
		enc(seq, putroot, getfh, getattr),
		enc(seq, read, putroot),
		enc(seq, readdir, getattr),
		enc(read, readdir, read),
		enc(),
	}
	// TXN, TXN_BEGIN, TXN_END (with a report) and a failing result.
	var b bytes.Buffer
	runtime.WriteInt(&b, int32(nfsv4.NFS4ERR_NOT_SAME))
	runtime.WriteUTF8String(&b, 1<<10, "")
	runtime.WriteUnsignedInt(&b, 4)
	for _, w := range []uint32{uint32(OpTxn), 0, uint32(OpTxnBegin), 0} {
		runtime.WriteUnsignedInt(&b, w)
	}
	b.Write(make([]byte, 16)) // the transaction id
	seq.WriteTo(&b)
	runtime.WriteUnsignedInt(&b, uint32(OpTxnEnd))
	runtime.WriteUnsignedInt(&b, uint32(nfsv4.NFS4ERR_NOT_SAME))
	runtime.WriteUTF8String(&b, 1<<10, "read set changed")
	seeds = append(seeds, b.Bytes())
	return seeds
}

// hasExtensionResult reports whether rep holds a result the generated
// decoder does not know (TXN, TXN_JOIN, TXN_BEGIN, TXN_END).
func hasExtensionResult(rep *rawReply) bool {
	if rep.txn != nil {
		return true
	}
	for _, r := range rep.results {
		if isTxnOp(r.GetResop()) {
			return true
		}
	}
	return false
}

// encodeResult is r's XDR encoding: equal encodings are equal values
// (nil and empty slices alike).
func encodeResult(t *testing.T, r nfsv4.NfsResop4) []byte {
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatalf("re-encoding %s: %v", OpName(r.GetResop()), err)
	}
	return b.Bytes()
}

// FuzzDecodeReply checks decodeReply against the generated Compound4res
// decoder: no panic, the same results whenever the generated decoder
// accepts the input, and acceptance by the generated decoder whenever
// decodeReply accepts one without extension results.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range fuzzReplySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		rep, err := decodeReply(b)
		if !bytes.Equal(in, b) {
			t.Fatal("decodeReply modified its input")
		}
		var gen nfsv4.Compound4res
		_, gerr := gen.ReadFrom(bytes.NewReader(b))
		if err != nil {
			if gerr == nil && len(gen.Tag) <= 1<<16 {
				t.Fatalf("decodeReply: %v; the generated decoder accepts it (%d results)", err, len(gen.Resarray))
			}
			return
		}
		if len(rep.results) != len(rep.statuses) {
			t.Fatalf("%d results, %d statuses", len(rep.results), len(rep.statuses))
		}
		for i, r := range rep.results {
			if r == nil {
				t.Fatalf("result %d is nil", i)
			}
			if isTxnOp(r.GetResop()) {
				continue
			}
			// The status decodeReply reports is the result's own.
			enc := encodeResult(t, r)
			if st := nfsv4.Nfsstat4(binary.BigEndian.Uint32(enc[4:])); st != rep.statuses[i] {
				t.Fatalf("result %d (%s): status %d, recorded %d", i, OpName(r.GetResop()), st, rep.statuses[i])
			}
		}
		if hasExtensionResult(rep) {
			return
		}
		if gerr != nil {
			t.Fatalf("decodeReply accepts what the generated decoder refuses (%v): %d results", gerr, len(rep.results))
		}
		if gen.Status != rep.status || len(gen.Resarray) != len(rep.results) {
			t.Fatalf("status %d, %d results; generated %d, %d", rep.status, len(rep.results), gen.Status, len(gen.Resarray))
		}
		for i := range gen.Resarray {
			if got, want := encodeResult(t, rep.results[i]), encodeResult(t, gen.Resarray[i]); !bytes.Equal(got, want) {
				t.Fatalf("result %d (%s) differs from the generated decoder's:\n%x\n%x", i, OpName(gen.Resarray[i].GetResop()), got, want)
			}
		}
	})
}

// FuzzDecodeAttrs checks that DecodeAttrs does not panic on any attribute
// list, and that what it accepts is within the protocol's bounds.
func FuzzDecodeAttrs(f *testing.F) {
	var vals bytes.Buffer
	runtime.WriteUnsignedInt(&vals, uint32(nfsv4.NF4REG))
	runtime.WriteUnsignedHyper(&vals, 1<<40)
	runtime.WriteVariableLengthOpaque(&vals, 128, []byte{9, 8, 7})
	runtime.WriteUnsignedInt(&vals, 0o755)
	runtime.WriteUTF8String(&vals, 1<<10, "1000")
	runtime.WriteHyper(&vals, 1_700_000_000)
	runtime.WriteUnsignedInt(&vals, 999_999_999)
	m := MakeBitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_FILEHANDLE, nfsv4.FATTR4_MODE,
		nfsv4.FATTR4_OWNER, nfsv4.FATTR4_TIME_MODIFY)
	var mb []byte
	for _, w := range m {
		mb = binary.BigEndian.AppendUint32(mb, w)
	}
	f.Add(mb, vals.Bytes())
	f.Add([]byte{0, 0, 0, 1}, []byte{0, 0, 0, 2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, maskBytes, vals []byte) {
		var mask []uint32
		for i := 0; i+4 <= len(maskBytes) && len(mask) < 4; i += 4 {
			mask = append(mask, binary.BigEndian.Uint32(maskBytes[i:]))
		}
		in := nfsv4.Fattr4{Attrmask: mask, AttrVals: vals}
		got, err := DecodeAttrs(in)
		if err == nil && len(got.Handle) > nfsv4.NFS4_FHSIZE {
			t.Fatalf("handle of %d bytes", len(got.Handle))
		}
	})
}

// FuzzParseReply feeds parseReply RPC reply records: no panic, and the
// results it returns are a suffix of the record.
func FuzzParseReply(f *testing.F) {
	var b bytes.Buffer
	msg := rpcv2.RpcMsg{Xid: 1, Body: &rpcv2.RpcMsgBody_REPLY{Rbody: &rpcv2.ReplyBody_MSG_ACCEPTED{
		Areply: rpcv2.AcceptedReply{Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE},
			ReplyData: &rpcv2.AcceptedReplyData_SUCCESS{}}}}}
	if _, err := msg.WriteTo(&b); err != nil {
		f.Fatal(err)
	}
	for _, s := range fuzzReplySeeds(f)[:2] {
		f.Add(append(bytes.Clone(b.Bytes()), s...))
	}
	f.Add(b.Bytes()[:10])
	f.Fuzz(func(t *testing.T, rec []byte) {
		body, err := parseReply(rec)
		if err != nil {
			return
		}
		if len(body) > len(rec) || !bytes.Equal(body, rec[len(rec)-len(body):]) {
			t.Fatalf("results are not the record's tail")
		}
		decodeReply(body) // must not panic
	})
}
