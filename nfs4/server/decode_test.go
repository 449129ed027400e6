package server

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestDecodeWriteAliasesRecord checks that a WRITE decoded by decodeStdOp
// has its data in the request record (recordReader), equal to what was
// sent, for random data lengths (all paddings) and trailing bytes
// (seeded: TXNFS_DECODE_SEED).
func TestDecodeWriteAliasesRecord(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("TXNFS_DECODE_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (TXNFS_DECODE_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := 0; i < 500; i++ {
		data := make([]byte, []int{rng.IntN(9), rng.IntN(5000), 64<<10 + rng.IntN(4)}[rng.IntN(3)])
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		var b bytes.Buffer
		b.Write(make([]byte, rng.IntN(3)*4)) // what precedes the WRITE
		lead := b.Len()
		op := &nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Offset: rng.Uint64(), Stable: nfsv4.FILE_SYNC4, Data: data}}
		op.WriteTo(&b)
		end := b.Len()
		b.Write(make([]byte, rng.IntN(3)*4)) // what follows
		args := b.Bytes()
		r := bytes.NewReader(args)
		r.Seek(int64(lead), 0)
		arg, ok := decodeStdOp(r, args, nfsv4.OP_WRITE)
		if !ok {
			t.Fatalf("WRITE of %d bytes does not decode", len(data))
		}
		if len(args)-r.Len() != end {
			t.Fatalf("WRITE of %d bytes: decoding ended at %d, want %d", len(data), len(args)-r.Len(), end)
		}
		got := arg.(*nfsv4.NfsArgop4_OP_WRITE).Opwrite.Data
		if !bytes.Equal(got, data) {
			t.Fatalf("WRITE of %d bytes: data differs", len(data))
		}
		if len(data) > 0 && !sameBytes(got, args[end-(len(data)+3)&^3:][:len(data)]) {
			t.Fatalf("WRITE of %d bytes: data is not in the record", len(data))
		}
		if cap(got) != len(got) {
			t.Fatalf("WRITE of %d bytes: data may be appended to over the record (cap %d)", len(data), cap(got))
		}
	}
}
