package extxdr

import (
	"io"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// The extension's operations among a COMPOUND's standard ones: the
// server and the clients put them in (and take them out of) nfsv4's
// argument and result lists through these adapters.

// IsOp reports whether code is an operation of the extension.
func IsOp(code nfsv4.NfsOpnum4) bool {
	switch code {
	case OP_TXN, OP_APPEND_OFFSET, OP_TXN_BEGIN, OP_TXN_JOIN, OP_TXN_END, OP_CHAIN:
		return true
	}
	return false
}

// Arg is an extension operation as an nfsv4.NfsArgop4, encoded by the
// generated ExtArgop4 (opcode, then the arguments). It embeds a generated
// standard argument only to satisfy nfsv4.NfsArgop4, whose marker method
// is unexported; its own methods shadow the embedded ones.
type Arg struct {
	nfsv4.NfsArgop4_OP_ILLEGAL
	Op ExtArgop4
}

// GetArgop implements nfsv4.NfsArgop4.
func (a *Arg) GetArgop() nfsv4.NfsOpnum4 { return nfsv4.NfsOpnum4(a.Op.GetArgop()) }

// GetEncodedSizeBytes implements nfsv4.NfsArgop4.
func (a *Arg) GetEncodedSizeBytes() int { return a.Op.GetEncodedSizeBytes() }

// WriteTo implements nfsv4.NfsArgop4.
func (a *Arg) WriteTo(w io.Writer) (int64, error) { return a.Op.WriteTo(w) }

// Result is an extension operation's result as an nfsv4.NfsResop4,
// encoded by the generated ExtResop4 (opcode, then the result); like Arg
// it embeds a generated type only for the marker method.
type Result struct {
	nfsv4.NfsResop4_OP_ILLEGAL
	Res ExtResop4
}

// GetResop implements nfsv4.NfsResop4.
func (r *Result) GetResop() nfsv4.NfsOpnum4 { return nfsv4.NfsOpnum4(r.Res.GetResop()) }

// GetEncodedSizeBytes implements nfsv4.NfsResop4.
func (r *Result) GetEncodedSizeBytes() int { return r.Res.GetEncodedSizeBytes() }

// WriteTo implements nfsv4.NfsResop4.
func (r *Result) WriteTo(w io.Writer) (int64, error) { return r.Res.WriteTo(w) }

// Status returns the status of an extension result.
func Status(res ExtResop4) nfsv4.Nfsstat4 {
	switch res := res.(type) {
	case *ExtResop4_OP_TXN:
		return res.Optxn.Status
	case *ExtResop4_OP_TXN_JOIN:
		return res.Optxnjoin.Status
	case *ExtResop4_OP_CHAIN:
		return res.Opchain.Status
	case *ExtResop4_OP_TXN_BEGIN:
		return res.Optxnbegin.GetStatus()
	case *ExtResop4_OP_TXN_END:
		return res.Optxnend.GetStatus()
	case *ExtResop4_OP_APPEND_OFFSET:
		return res.Opappendoffset.GetStatus()
	}
	panic("extxdr: unknown extension result")
}
