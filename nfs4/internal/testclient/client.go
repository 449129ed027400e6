// Package testclient is a minimal NFSv4 client for tests, built on the
// same generated XDR types as the server. It speaks 4.0 and 4.1+ (one
// session, slot 0), and can send transactional compounds.
package testclient

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
	"github.com/txnfs/txnfs/nfs4/internal/rpc"
)

// Opcodes of the txnfs extension (docs/protocol.md), from its generated
// XDR code (nfs4/internal/extxdr), which the server uses too.
const (
	OpTxn          = extxdr.OP_TXN
	OpAppendOffset = extxdr.OP_APPEND_OFFSET
	OpTxnBegin     = extxdr.OP_TXN_BEGIN
	OpTxnJoin      = extxdr.OP_TXN_JOIN
	OpTxnEnd       = extxdr.OP_TXN_END
	OpChain        = extxdr.OP_CHAIN
)

// extArg is the nfsv4.NfsArgop4 methods of an operation of the
// extension, encoded by the generated extxdr.ExtArgop4 that arg returns
// (the embedded generated type only supplies the interface's unexported
// marker method).
type extArg struct{ nfsv4.NfsArgop4_OP_ILLEGAL }

// AppendOffsetArgs is the private OpAppendOffset operation as an
// nfsv4.NfsArgop4.
type AppendOffsetArgs struct {
	extArg
	Flags uint32
}

func (a *AppendOffsetArgs) arg() extxdr.ExtArgop4 {
	return &extxdr.ExtArgop4_OP_APPEND_OFFSET{Opappendoffset: extxdr.AppendOffset4args{Flags: a.Flags}}
}

// GetArgop implements nfsv4.NfsArgop4.
func (a *AppendOffsetArgs) GetArgop() nfsv4.NfsOpnum4 { return OpAppendOffset }

// GetEncodedSizeBytes implements nfsv4.NfsArgop4.
func (a *AppendOffsetArgs) GetEncodedSizeBytes() int { return a.arg().GetEncodedSizeBytes() }

// WriteTo implements nfsv4.NfsArgop4.
func (a *AppendOffsetArgs) WriteTo(w io.Writer) (int64, error) { return a.arg().WriteTo(w) }

// ChainArgs is the private OpChain operation (CHAIN4args) as an
// nfsv4.NfsArgop4; it belongs first, before SEQUENCE.
type ChainArgs struct {
	extArg
	ID    uint64
	Seq   uint32
	Flags uint32 // 1: CHAIN4_LAST
}

func (a *ChainArgs) arg() extxdr.ExtArgop4 {
	return &extxdr.ExtArgop4_OP_CHAIN{Opchain: extxdr.Chain4args{Chain: a.ID, Seq: a.Seq, Flags: a.Flags}}
}

// GetArgop implements nfsv4.NfsArgop4.
func (a *ChainArgs) GetArgop() nfsv4.NfsOpnum4 { return OpChain }

// GetEncodedSizeBytes implements nfsv4.NfsArgop4.
func (a *ChainArgs) GetEncodedSizeBytes() int { return a.arg().GetEncodedSizeBytes() }

// WriteTo implements nfsv4.NfsArgop4.
func (a *ChainArgs) WriteTo(w io.Writer) (int64, error) { return a.arg().WriteTo(w) }

// AppendOffsetResult is a decoded OpAppendOffset result.
type AppendOffsetResult struct {
	nfsv4.NfsResop4_OP_ILLEGAL
	Status nfsv4.Nfsstat4
	Offset uint64 // valid if Status is NFS4_OK
}

// GetResop implements nfsv4.NfsResop4.
func (r *AppendOffsetResult) GetResop() nfsv4.NfsOpnum4 { return OpAppendOffset }

// TxnResult is a decoded TXN_BEGIN or TXN_END result.
type TxnResult struct {
	nfsv4.NfsResop4_OP_ILLEGAL
	Op     nfsv4.NfsOpnum4 // OpTxnBegin or OpTxnEnd
	Status nfsv4.Nfsstat4
	ID     [16]byte // TXN_BEGIN with NFS4_OK: the transaction id
	Report string   // TXN_END with NFS4ERR_NOT_SAME: the conflict report
}

// GetResop implements nfsv4.NfsResop4.
func (r *TxnResult) GetResop() nfsv4.NfsOpnum4 { return r.Op }

// Client is one TCP connection. Calls are serialized.
type Client struct {
	conn net.Conn
	mu   sync.Mutex
	xid  uint32
	// Uid and Gid are sent with AUTH_SYS.
	Uid, Gid uint32
	// Minor is the minor version used by Compound.
	Minor uint32

	// 4.1 session state.
	ClientID  uint64
	SessionID [16]byte
	Seq       uint32
	HasSess   bool
}

// Dial connects to addr.
func Dial(addr string) (*Client, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &Client{conn: c, xid: 1}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn exposes the connection for raw tests.
func (c *Client) Conn() net.Conn { return c.conn }

// RawReply is a decoded RPC reply.
type RawReply struct {
	Xid  uint32
	Msg  rpcv2.RpcMsg
	Body []byte // results after the reply header
}

// CallRaw sends one RPC call with the given program/version/procedure and
// argument bytes and reads the reply.
func (c *Client) CallRaw(prog, vers, proc uint32, args []byte) (*RawReply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xid++
	var cred bytes.Buffer
	p := rpcv2.AuthsysParms{Machinename: "test", Uid: c.Uid, Gid: c.Gid}
	if _, err := p.WriteTo(&cred); err != nil {
		return nil, err
	}
	msg := rpcv2.RpcMsg{Xid: c.xid, Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: 2, Prog: prog, Vers: vers, Proc: proc,
		Cred: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: cred.Bytes()},
		Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE},
	}}}
	var buf bytes.Buffer
	buf.Write([]byte{0, 0, 0, 0})
	if _, err := msg.WriteTo(&buf); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	rpc.PutRecordMark(b, len(b)-4+len(args))
	c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	bufs := net.Buffers{b, args}
	if _, err := bufs.WriteTo(c.conn); err != nil {
		return nil, err
	}
	return c.ReadReply()
}

// ReadReply reads one reply record.
func (c *Client) ReadReply() (*RawReply, error) {
	rec, err := rpc.ReadRecord(c.conn, 64<<20)
	if err != nil {
		return nil, err
	}
	r := bytes.NewReader(rec)
	var rr RawReply
	if _, err := rr.Msg.ReadFrom(r); err != nil {
		return nil, err
	}
	rr.Xid = rr.Msg.Xid
	rr.Body = rec[len(rec)-r.Len():]
	return &rr, nil
}

// Reply is a decoded COMPOUND reply.
type Reply struct {
	Status nfsv4.Nfsstat4
	Tag    string
	// Txn is the OpTxn result if the reply has one.
	Txn *nfsv4.Nfsstat4
	// Chain is the OpChain result if the reply has one.
	Chain   *nfsv4.Nfsstat4
	Results []nfsv4.NfsResop4
}

// Last returns the last result.
func (r *Reply) Last() nfsv4.NfsResop4 {
	if len(r.Results) == 0 {
		return nil
	}
	return r.Results[len(r.Results)-1]
}

// EncodeCompound encodes COMPOUND4args, with an OpTxn first if txn.
func EncodeCompound(minor uint32, txn bool, ops []nfsv4.NfsArgop4) []byte {
	size := 64
	for _, op := range ops {
		size += op.GetEncodedSizeBytes()
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	runtime.WriteUTF8String(buf, 1024, "test")
	runtime.WriteUnsignedInt(buf, minor)
	n := len(ops)
	if txn {
		n++
	}
	runtime.WriteUnsignedInt(buf, uint32(n))
	if txn {
		(&extxdr.ExtArgop4_OP_TXN{}).WriteTo(buf)
	}
	for _, op := range ops {
		if _, err := op.WriteTo(buf); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}

// DecodeCompound decodes COMPOUND4res, including the results of the
// txnfs extension operations (OpTxn, OpAppendOffset, the multi-compound
// transaction operations, OpChain).
func DecodeCompound(b []byte) (*Reply, error) {
	r := bytes.NewReader(b)
	var rep Reply
	st, _, err := runtime.ReadInt(r)
	if err != nil {
		return nil, err
	}
	rep.Status = nfsv4.Nfsstat4(st)
	if rep.Tag, _, err = runtime.ReadUTF8String(r, 1024); err != nil {
		return nil, err
	}
	n, _, err := runtime.ReadUnsignedInt(r)
	if err != nil {
		return nil, err
	}
	for i := uint32(0); i < n; i++ {
		var op nfsv4.NfsOpnum4
		if _, err := op.ReadFrom(r); err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
		r.Seek(-nfsv4.NfsOpnum4EncodedSizeBytes, io.SeekCurrent)
		if extxdr.IsOp(op) {
			res, _, err := extxdr.ReadExtResop4(r)
			if err != nil {
				return nil, fmt.Errorf("result %d: %w", i, err)
			}
			switch res := res.(type) {
			case *extxdr.ExtResop4_OP_TXN:
				rep.Txn = &res.Optxn.Status
			case *extxdr.ExtResop4_OP_TXN_JOIN:
				rep.Txn = &res.Optxnjoin.Status
			case *extxdr.ExtResop4_OP_CHAIN:
				rep.Chain = &res.Opchain.Status
			case *extxdr.ExtResop4_OP_APPEND_OFFSET:
				ar := &AppendOffsetResult{Status: res.Opappendoffset.GetStatus()}
				if ok, isOK := res.Opappendoffset.(*extxdr.AppendOffset4res_NFS4_OK); isOK {
					ar.Offset = ok.Offset
				}
				rep.Results = append(rep.Results, ar)
			case *extxdr.ExtResop4_OP_TXN_BEGIN:
				tr := &TxnResult{Op: OpTxnBegin, Status: res.Optxnbegin.GetStatus()}
				if ok, isOK := res.Optxnbegin.(*extxdr.TxnBegin4res_NFS4_OK); isOK {
					tr.ID = ok.Txnid
				}
				rep.Results = append(rep.Results, tr)
			case *extxdr.ExtResop4_OP_TXN_END:
				tr := &TxnResult{Op: OpTxnEnd, Status: res.Optxnend.GetStatus()}
				if c, isConflict := res.Optxnend.(*extxdr.TxnEnd4res_NFS4ERR_NOT_SAME); isConflict {
					tr.Report = c.Report
				}
				rep.Results = append(rep.Results, tr)
			}
			continue
		}
		res, _, err := nfsv4.ReadNfsResop4(r)
		if err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
		rep.Results = append(rep.Results, res)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", r.Len())
	}
	return &rep, nil
}

// ErrRPC reports a non-SUCCESS RPC reply.
var ErrRPC = errors.New("rpc call not accepted")

// CompoundRaw sends a COMPOUND (ops exactly as given).
func (c *Client) CompoundRaw(minor uint32, txn bool, ops ...nfsv4.NfsArgop4) (*Reply, error) {
	rr, err := c.CallRaw(nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER, 4, 1, EncodeCompound(minor, txn, ops))
	if err != nil {
		return nil, err
	}
	body, ok := rr.Msg.Body.(*rpcv2.RpcMsgBody_REPLY)
	if !ok {
		return nil, ErrRPC
	}
	acc, ok := body.Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
	if !ok || acc.Areply.ReplyData.GetStat() != rpcv2.SUCCESS {
		return nil, fmt.Errorf("%w: %#v", ErrRPC, body.Rbody)
	}
	return DecodeCompound(rr.Body)
}

// Compound sends ops with c.Minor; with a session, SEQUENCE is prepended
// and the slot sequence advanced.
func (c *Client) Compound(ops ...nfsv4.NfsArgop4) (*Reply, error) {
	return c.compound(false, ops)
}

// Txn sends ops as a transactional compound.
func (c *Client) Txn(ops ...nfsv4.NfsArgop4) (*Reply, error) {
	return c.compound(true, ops)
}

func (c *Client) compound(txn bool, ops []nfsv4.NfsArgop4) (*Reply, error) {
	if c.HasSess {
		c.Seq++
		seq := c.SequenceOp(c.Seq).(*nfsv4.NfsArgop4_OP_SEQUENCE)
		seq.Opsequence.SaCachethis = cacheThis(ops)
		ops = append([]nfsv4.NfsArgop4{seq}, ops...)
	}
	rep, err := c.CompoundRaw(c.Minor, txn, ops...)
	if err != nil {
		return nil, err
	}
	if c.HasSess && len(rep.Results) > 0 {
		rep.Results = rep.Results[1:] // drop SEQUENCE
	}
	return rep, nil
}

// cacheThis tells whether to ask the server to cache the reply: as Linux
// does, not for compounds that read data (idempotent, and possibly larger
// than the session's cached-reply limit).
func cacheThis(ops []nfsv4.NfsArgop4) bool {
	for _, op := range ops {
		switch op.GetArgop() {
		case nfsv4.OP_READ, nfsv4.OP_READ_PLUS, nfsv4.OP_READDIR:
			return false
		}
	}
	return true
}

// SequenceOp returns a SEQUENCE for slot 0 (sa_cachethis set).
func (c *Client) SequenceOp(seq uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{
		SaSessionid: c.SessionID, SaSequenceid: seq, SaSlotid: 0, SaHighestSlotid: 0, SaCachethis: true}}
}

// DefaultChannel is the fore channel NewSession asks for.
var DefaultChannel = nfsv4.ChannelAttrs4{CaMaxrequestsize: 2 << 20, CaMaxresponsesize: 2 << 20,
	CaMaxresponsesizeCached: 64 << 10, CaMaxoperations: 1024, CaMaxrequests: 8}

// NewSession runs EXCHANGE_ID and CREATE_SESSION for minor (1 or 2).
func (c *Client) NewSession(minor uint32, owner string) error {
	_, err := c.NewSessionWith(minor, owner, DefaultChannel)
	return err
}

// NewSessionWith is NewSession asking for the fore-channel attributes
// attrs; it returns those the server granted.
func (c *Client) NewSessionWith(minor uint32, owner string, attrs nfsv4.ChannelAttrs4) (nfsv4.ChannelAttrs4, error) {
	c.Minor = minor
	rep, err := c.CompoundRaw(minor, false, &nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
		EiaClientowner:  nfsv4.ClientOwner4{CoVerifier: [8]byte{1}, CoOwnerid: []byte(owner)},
		EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{},
	}})
	if err != nil {
		return nfsv4.ChannelAttrs4{}, err
	}
	if rep.Status != nfsv4.NFS4_OK {
		return nfsv4.ChannelAttrs4{}, fmt.Errorf("EXCHANGE_ID: %d", rep.Status)
	}
	ok := rep.Results[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK).EirResok4
	c.ClientID = ok.EirClientid
	rep, err = c.CompoundRaw(minor, false, &nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{
		CsaClientid: c.ClientID, CsaSequence: ok.EirSequenceid,
		CsaForeChanAttrs: attrs, CsaBackChanAttrs: attrs,
	}})
	if err != nil {
		return nfsv4.ChannelAttrs4{}, err
	}
	if rep.Status != nfsv4.NFS4_OK {
		return nfsv4.ChannelAttrs4{}, fmt.Errorf("CREATE_SESSION: %d", rep.Status)
	}
	cs := rep.Results[0].(*nfsv4.NfsResop4_OP_CREATE_SESSION).OpcreateSession.(*nfsv4.CreateSession4res_NFS4_OK).CsrResok4
	c.SessionID = cs.CsrSessionid
	c.Seq = 0
	c.HasSess = true
	return cs.CsrForeChanAttrs, nil
}

// SetClientID runs the 4.0 SETCLIENTID / SETCLIENTID_CONFIRM exchange.
func (c *Client) SetClientID(owner string) error {
	c.Minor = 0
	rep, err := c.CompoundRaw(0, false, &nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
		Client: nfsv4.NfsClientId4{Verifier: [8]byte{2}, Id: []byte(owner)},
		Callback: nfsv4.CbClient4{CbProgram: 0x40000000,
			CbLocation: nfsv4.Netaddr4{NaRNetid: "tcp", NaRAddr: "127.0.0.1.0.0"}},
	}})
	if err != nil {
		return err
	}
	if rep.Status != nfsv4.NFS4_OK {
		return fmt.Errorf("SETCLIENTID: %d", rep.Status)
	}
	ok := rep.Results[0].(*nfsv4.NfsResop4_OP_SETCLIENTID).Opsetclientid.(*nfsv4.Setclientid4res_NFS4_OK).Resok4
	rep, err = c.CompoundRaw(0, false, &nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4args{
		Clientid: ok.Clientid, SetclientidConfirm: ok.SetclientidConfirm}})
	if err != nil {
		return err
	}
	if rep.Status != nfsv4.NFS4_OK {
		return fmt.Errorf("SETCLIENTID_CONFIRM: %d", rep.Status)
	}
	c.ClientID = ok.Clientid
	return nil
}
