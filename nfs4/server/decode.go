package server

import (
	"bytes"
	"encoding/binary"
	"io"
	"unicode/utf8"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Hand-written decoders for the arguments of the most frequent
// operations. The generated decoder reads every opaque and string through
// a growing buffer (io.CopyN into a bytes.Buffer or strings.Builder) and
// allocates per field: for a LOOKUP compound the tag and the name alone
// were ~4% of the server's CPU. These read straight from the request
// record. They accept exactly what the generated decoder accepts
// (FuzzFastArg compares them) and the generated decoder stays the
// reference for every other operation.

// fastArg decodes the arguments of op code at r's position in args (r
// reads args; the opcode is not consumed yet) if code has a fast decoder
// (handled). ok=false means they do not decode. Opaque fields (PUTFH's
// handle, WRITE's data) alias args; the compound owns args until its reply
// is written (see compound.keepArgs).
func fastArg(code nfsv4.NfsOpnum4, r *bytes.Reader, args []byte) (arg nfsv4.NfsArgop4, handled, ok bool) {
	switch code {
	case nfsv4.OP_PUTFH:
		arg, ok = decodePutFH(r, args)
	case nfsv4.OP_WRITE:
		arg, ok = decodeWrite(r, args)
	case nfsv4.OP_LOOKUP:
		arg, ok = decodeLookup(r, args)
	case nfsv4.OP_GETATTR:
		arg, ok = decodeGetattr(r, args)
	case nfsv4.OP_SEQUENCE:
		arg, ok = decodeSequence(r, args)
	default:
		return nil, false, false
	}
	return arg, true, ok
}

// rest returns the unread part of args.
func rest(r *bytes.Reader, args []byte) []byte { return args[len(args)-r.Len():] }

// opaqueAt returns the variable-length opaque at b[0:] of at most max
// bytes, aliasing b, and the encoded size (length, bytes, padding).
// Padding must be zero, as for the generated decoder.
func opaqueAt(b []byte, max uint32) (v []byte, size int, ok bool) {
	if len(b) < 4 {
		return nil, 0, false
	}
	n := uint64(binary.BigEndian.Uint32(b))
	if n > uint64(max) {
		return nil, 0, false
	}
	padded := (n + 3) &^ 3
	if uint64(len(b)-4) < padded {
		return nil, 0, false
	}
	for _, p := range b[4+n : 4+padded] {
		if p != 0 {
			return nil, 0, false
		}
	}
	return b[4 : 4+n : 4+n], 4 + int(padded), true
}

// readString reads an XDR UTF-8 string of at most max bytes at r's
// position in args (a copy: strings outlive the record).
func readString(r *bytes.Reader, args []byte, max uint32) (string, bool) {
	v, size, ok := opaqueAt(rest(r, args), max)
	if !ok || !utf8.Valid(v) {
		return "", false
	}
	r.Seek(int64(size), io.SeekCurrent)
	return string(v), true
}

// decodePutFH decodes PUTFH4args; the handle aliases args.
func decodePutFH(r *bytes.Reader, args []byte) (nfsv4.NfsArgop4, bool) {
	b := rest(r, args)
	if len(b) < 4 {
		return nil, false
	}
	v, size, ok := opaqueAt(b[4:], nfsv4.NFS4_FHSIZE)
	if !ok {
		return nil, false
	}
	r.Seek(int64(4+size), io.SeekCurrent)
	return &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: v}}, true
}

// decodeWrite decodes WRITE4args without copying the data: Data aliases
// args (the generated decoder grows a buffer by doubling: it cost half
// the CPU of a 1 MiB WRITE).
func decodeWrite(r *bytes.Reader, args []byte) (nfsv4.NfsArgop4, bool) {
	b := rest(r, args)
	const fixed = 4 + 16 + 8 + 4 // opcode, stateid, offset, stable
	if len(b) < fixed {
		return nil, false
	}
	var a nfsv4.Write4args
	a.Stateid.Seqid = binary.BigEndian.Uint32(b[4:])
	copy(a.Stateid.Other[:], b[8:20])
	a.Offset = binary.BigEndian.Uint64(b[20:])
	a.Stable = nfsv4.StableHow4(binary.BigEndian.Uint32(b[28:]))
	switch a.Stable {
	case nfsv4.UNSTABLE4, nfsv4.DATA_SYNC4, nfsv4.FILE_SYNC4:
	default:
		return nil, false
	}
	v, size, ok := opaqueAt(b[fixed:], ^uint32(0))
	if !ok {
		return nil, false
	}
	a.Data = v
	r.Seek(int64(fixed+size), io.SeekCurrent)
	return &nfsv4.NfsArgop4_OP_WRITE{Opwrite: a}, true
}

// decodeLookup decodes LOOKUP4args.
func decodeLookup(r *bytes.Reader, args []byte) (nfsv4.NfsArgop4, bool) {
	r.Seek(4, io.SeekCurrent)
	name, ok := readString(r, args, ^uint32(0))
	if !ok {
		return nil, false
	}
	return &nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: name}}, true
}

// decodeGetattr decodes GETATTR4args.
func decodeGetattr(r *bytes.Reader, args []byte) (nfsv4.NfsArgop4, bool) {
	b := rest(r, args)
	if len(b) < 8 {
		return nil, false
	}
	n := uint64(binary.BigEndian.Uint32(b[4:]))
	if uint64(len(b)-8) < 4*n {
		return nil, false
	}
	var mask []uint32 // nil when empty, as decoded by the generated code
	if n > 0 {
		mask = make([]uint32, n)
		for i := range mask {
			mask[i] = binary.BigEndian.Uint32(b[8+4*i:])
		}
	}
	r.Seek(int64(8+4*n), io.SeekCurrent)
	return &nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: mask}}, true
}

// decodeSequence decodes SEQUENCE4args.
func decodeSequence(r *bytes.Reader, args []byte) (nfsv4.NfsArgop4, bool) {
	b := rest(r, args)
	const size = 4 + 16 + 4 + 4 + 4 + 4 // opcode, session, seqid, slot, highest slot, cachethis
	if len(b) < size {
		return nil, false
	}
	var a nfsv4.Sequence4args
	copy(a.SaSessionid[:], b[4:20])
	a.SaSequenceid = binary.BigEndian.Uint32(b[20:])
	a.SaSlotid = binary.BigEndian.Uint32(b[24:])
	a.SaHighestSlotid = binary.BigEndian.Uint32(b[28:])
	switch binary.BigEndian.Uint32(b[32:]) {
	case 0:
	case 1:
		a.SaCachethis = true
	default:
		return nil, false
	}
	r.Seek(size, io.SeekCurrent)
	return &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: a}, true
}
