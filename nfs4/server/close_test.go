package server_test

import (
	"fmt"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// current is the 4.1 current stateid (RFC 8881 §16.2.3.1.2).
var currentSid = nfsv4.Stateid4{Seqid: 1}

// closeCompound sends ops as a plain or a transactional compound.
func closeCompound(c *testclient.Client, txn bool, ops ...nfsv4.NfsArgop4) (*testclient.Reply, error) {
	if txn {
		return c.Txn(ops...)
	}
	return c.Compound(ops...)
}

// TestCloseCurrentStateidPattern runs the vNFS client's pattern — OPEN f1,
// WRITE(current), CLOSE(current), OPEN f2, WRITE(current), CLOSE(current)
// — in plain and transactional compounds, with two files and with the same
// file twice: the current stateid after the second OPEN is that OPEN's,
// whatever CLOSE did before. Afterwards no open state is left.
func TestCloseCurrentStateidPattern(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "closepattern")
	for _, txn := range []bool{false, true} {
		for _, same := range []bool{false, true} {
			t.Run(fmt.Sprintf("txn=%v/same=%v", txn, same), func(t *testing.T) {
				f1 := fmt.Sprintf("p-%v-%v-1", txn, same)
				f2 := fmt.Sprintf("p-%v-%v-2", txn, same)
				off2 := uint64(0)
				if same {
					f2, off2 = f1, 1
				}
				rep := okT(t)(closeCompound(c, txn, putroot(),
					openCreate(c, f1), write(currentSid, 0, []byte("a")), closeOp(currentSid),
					putroot(),
					openCreate(c, f2), write(currentSid, off2, []byte("b")), closeOp(currentSid)))
				want := map[string]string{f1: "a", f2: "b"}
				if same {
					want = map[string]string{f1: "ab"}
				}
				for name, data := range want {
					if got := string(readFile(t, c, name)); got != data {
						t.Fatalf("%s holds %q, want %q", name, got, data)
					}
				}
				// Both opens are closed: their stateids are bad.
				for _, i := range []int{1, 5} {
					sid := openSid(t, rep.Results[i])
					r, err := c.Compound(putroot(), lookup(f1), read(sid, 0, 1))
					wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
				}
			})
		}
	}
}

// TestReopenAfterCloseStaysOpen checks OPEN f, CLOSE, OPEN f (same
// owner) in one compound: the second open survives the compound (a CLOSE
// that takes effect at the commit must not close the reopened state).
func TestReopenAfterCloseStaysOpen(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "reopen")
	for _, txn := range []bool{false, true} {
		name := fmt.Sprintf("r-%v", txn)
		rep := okT(t)(closeCompound(c, txn, putroot(),
			openCreate(c, name), write(currentSid, 0, []byte("1")), closeOp(currentSid),
			putroot(), openCreate(c, name), write(currentSid, 1, []byte("2"))))
		sid := openSid(t, rep.Results[5])
		r := okT(t)(c.Compound(putroot(), lookup(name), read(sid, 0, 10)))
		if d, _ := readData(t, r.Results[2]); string(d) != "12" {
			t.Fatalf("txn=%v: read %q through the reopened state", txn, d)
		}
		okT(t)(c.Compound(putroot(), lookup(name), closeOp(sid)))
	}
}

// TestCloseThenUseInOneCompound checks that a stateid CLOSEd earlier in a
// compound is bad for the operations after it, in plain (grouped) and
// transactional compounds alike, although in those the CLOSE itself takes
// effect at the commit.
func TestCloseThenUseInOneCompound(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "closeuse")
	for _, txn := range []bool{false, true} {
		name := fmt.Sprintf("f-%v", txn)
		rep := okT(t)(c.Compound(putroot(), openCreate(c, name), getfh()))
		sid, fh := openSid(t, rep.Results[1]), fhOf(t, rep.Results[2])
		for _, use := range []nfsv4.NfsArgop4{write(sid, 0, []byte("y")), read(sid, 0, 1), closeOp(sid)} {
			r, err := closeCompound(c, txn, putfh(fh), write(sid, 0, []byte("x")), closeOp(sid), use)
			wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
			if len(r.Results) != 4 {
				t.Fatalf("txn=%v: %d results, want the failure at the 4th", txn, len(r.Results))
			}
			if txn {
				// Rolled back: still open, still empty.
				okT(t)(c.Compound(putfh(fh), read(sid, 0, 1)))
				if got := string(readFile(t, c, name)); got != "" {
					t.Fatalf("file holds %q after a rolled-back transaction", got)
				}
				continue
			}
			// Plain: the WRITE and CLOSE before the failure took effect.
			if got := string(readFile(t, c, name)); got != "x" {
				t.Fatalf("file holds %q", got)
			}
			r, err = c.Compound(putfh(fh), read(sid, 0, 1))
			wantStatus(t, r, err, nfsv4.NFS4ERR_BAD_STATEID)
			break
		}
	}
}
