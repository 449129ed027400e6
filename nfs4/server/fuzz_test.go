package server_test

import (
	"context"
	"math"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"github.com/txnfs/txnfs/nfs4/internal/rpc"
	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// FuzzCompound feeds arbitrary COMPOUND arguments to the server's
// dispatcher: it must answer every input (GARBAGE_ARGS or a COMPOUND
// reply) without crashing, and the reply must decode.
func FuzzCompound(f *testing.F) {
	seeds := [][]nfsv4.NfsArgop4{
		{putroot(), getfh(), getattr(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_OWNER)},
		{putroot(), mkdir("d"), lookupp(), lookup("d"), savefh(), putroot(), rename("d", "e")},
		{putroot(), symlink("s", "t"), readlink(), remove("s")},
		{putroot(), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 4096, AttrRequest: []uint32{0xffffffff, 0xffffffff, 0xffffffff}}}},
		{putroot(), write(anon, math.MaxUint64, []byte("x"))},
		{putfh(make([]byte, 32)), getattr(0)},
		{putroot(), lookup("f"), write(anon, math.MaxUint64, []byte("appended")), appendOffset(), read(anon, 0, 1<<16)},
		{putroot(), appendOffset(), &testclient.AppendOffsetArgs{Flags: 7}},
		{&nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{Client: nfsv4.NfsClientId4{Id: []byte("f")}}}},
	}
	for _, ops := range seeds {
		f.Add(uint32(0), false, testclient.EncodeCompound(0, false, ops))
		f.Add(uint32(0), true, testclient.EncodeCompound(0, true, ops))
	}
	f.Add(uint32(1), false, testclient.EncodeCompound(1, false, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
		EiaClientowner: nfsv4.ClientOwner4{CoOwnerid: []byte("fz")}, EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}}}))
	f.Add(uint32(0), false, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x74, 0x78, 0x6e, 0, 0, 0, 0, 1})
	// Truncated PUTFH and WRITE (decoded without the generated decoder).
	for _, op := range []nfsv4.NfsArgop4{putfh(make([]byte, 32)), write(anon, 0, make([]byte, 100))} {
		b := testclient.EncodeCompound(1, false, []nfsv4.NfsArgop4{op})
		f.Add(uint32(0), false, b[:len(b)-5])
	}
	ts := startServer(f)
	f.Fuzz(func(t *testing.T, uid uint32, _ bool, args []byte) {
		rep := ts.srv.Handle(context.Background(), &rpc.Call{Prog: 100003, Vers: 4, Proc: 1, Args: args,
			Cred: rpc.Cred{Flavor: rpcv2.AUTH_SYS, Uid: uid % 3, Gid: uid % 3}})
		switch rep.Stat {
		case rpcv2.GARBAGE_ARGS:
		case rpcv2.SUCCESS:
			body := rep.Body
			for _, b := range rep.More {
				body = append(body[:len(body):len(body)], b...)
			}
			if rep.Done != nil {
				rep.Done()
			}
			if _, err := testclient.DecodeCompound(body); err != nil {
				t.Fatalf("reply does not decode: %v", err)
			}
		default:
			t.Fatalf("accept stat %d", rep.Stat)
		}
	})
}
