package server_test

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
	"github.com/txnfs/txnfs/nfs4/server"
)

func TestNullAndRPCErrors(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	accept := func(rr *testclient.RawReply) rpcv2.AcceptStat {
		t.Helper()
		acc, ok := rr.Msg.Body.(*rpcv2.RpcMsgBody_REPLY).Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
		if !ok {
			t.Fatalf("reply not accepted: %#v", rr.Msg.Body)
		}
		return acc.Areply.ReplyData.GetStat()
	}
	for _, tc := range []struct {
		name             string
		prog, vers, proc uint32
		args             []byte
		want             rpcv2.AcceptStat
	}{
		{"null", 100003, 4, 0, nil, rpcv2.SUCCESS},
		{"wrong program", 100005, 3, 0, nil, rpcv2.PROG_UNAVAIL},
		{"wrong version", 100003, 3, 0, nil, rpcv2.PROG_MISMATCH},
		{"wrong procedure", 100003, 4, 7, nil, rpcv2.PROC_UNAVAIL},
		{"garbage args", 100003, 4, 1, []byte{0, 0, 0}, rpcv2.GARBAGE_ARGS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr, err := c.CallRaw(tc.prog, tc.vers, tc.proc, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := accept(rr); got != tc.want {
				t.Fatalf("accept stat %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCompoundDecodingErrors(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	// Unknown opcode: NFS4ERR_OP_ILLEGAL with an OP_ILLEGAL result, and
	// nothing after it runs.
	args := testclient.EncodeCompound(0, false, []nfsv4.NfsArgop4{putroot()})
	args[len(args)-4-4+3] = 2 // count stays 1; append an unknown op below
	args = testclient.EncodeCompound(0, false, nil)
	args[len(args)-1] = 2            // two ops
	args = append(args, 0, 0, 0, 24) // PUTROOTFH
	args = append(args, 0, 0, 0x27, 0x10)
	rr, err := c.CallRaw(100003, 4, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := testclient.DecodeCompound(rr.Body)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != nfsv4.NFS4ERR_OP_ILLEGAL || len(rep.Results) != 2 || rep.Results[1].GetResop() != nfsv4.OP_ILLEGAL {
		t.Fatalf("got status %d with %d results", rep.Status, len(rep.Results))
	}
	// Minor version 3 does not exist.
	rep, err = c.CompoundRaw(3, false, putroot())
	wantStatus(t, rep, err, nfsv4.NFS4ERR_MINOR_VERS_MISMATCH)
	// A truncated operation is BADXDR.
	args = testclient.EncodeCompound(0, false, []nfsv4.NfsArgop4{lookup("abcdefgh")})
	rr, err = c.CallRaw(100003, 4, 1, args[:len(args)-6])
	if err != nil {
		t.Fatal(err)
	}
	rep, err = testclient.DecodeCompound(rr.Body)
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BADXDR)
	// 4.1 without SEQUENCE.
	rep, err = c.CompoundRaw(1, false, putroot())
	wantStatus(t, rep, err, nfsv4.NFS4ERR_OP_NOT_IN_SESSION)
}

func TestMalformedRecordsDoNotHurtOthers(t *testing.T) {
	ts := startServer(t)
	good := ts.session(t, 1, "good")
	for i, raw := range [][]byte{
		{0x80, 0, 0, 2, 1, 2},                          // a 2-byte record: no xid
		{0x80, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0},        // call header cut short
		{0x7f, 0xff, 0xff, 0xff, 1, 2, 3},              // 2 GiB fragment: closed
		{0x80, 0, 0, 12, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0}, // a REPLY sent to the server
	} {
		bad := ts.dial(t)
		if _, err := bad.Conn().Write(raw); err != nil {
			t.Fatal(err)
		}
		// The well-behaved client is unaffected.
		rep := okT(t)(good.Compound(putroot(), getattr(nfsv4.FATTR4_TYPE)))
		if len(rep.Results) != 2 {
			t.Fatalf("case %d: %d results", i, len(rep.Results))
		}
		bad.Close()
	}
}

func TestBasicFileIO41(t *testing.T) {
	for _, minor := range []uint32{1, 2} {
		t.Run(fmt.Sprintf("minor=%d", minor), func(t *testing.T) {
			ts := startServer(t)
			c := ts.session(t, minor, "basic")
			data := bytes.Repeat([]byte("txnfs!"), 50000) // 300 KB
			writeFile(t, c, "f", data)
			if got := readFile(t, c, "f"); !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, want %d", len(got), len(data))
			}
			rep := okT(t)(c.Compound(putroot(), lookup("f"), getattr(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_TYPE)))
			a := attrVals(t, rep.Results[2])
			if len(a.AttrVals) != 12 {
				t.Fatalf("attr vals %d bytes", len(a.AttrVals))
			}
			// type (4 bytes) then size (8 bytes): bits in ascending order
			if typ := a.AttrVals[3]; typ != byte(nfsv4.NF4REG) {
				t.Fatalf("type %d", typ)
			}
		})
	}
}

func TestSlotReplayCache(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "replay")
	c.Seq++
	seq := c.Seq
	ops := []nfsv4.NfsArgop4{c.SequenceOp(seq), putroot(), mkdir("d")}
	rep := okT(t)(c.CompoundRaw(1, false, ops...))
	// A retransmission gets the cached reply: the same result, not EXIST.
	rep2 := okT(t)(c.CompoundRaw(1, false, ops...))
	if len(rep2.Results) != len(rep.Results) {
		t.Fatalf("replay: %d results, want %d", len(rep2.Results), len(rep.Results))
	}
	// A sequence id that skips ahead is misordered.
	rep3, err := c.CompoundRaw(1, false, c.SequenceOp(seq+2), putroot())
	wantStatus(t, rep3, err, nfsv4.NFS4ERR_SEQ_MISORDERED)
	// The next one is fine and really executes (EXIST now).
	c.Seq++
	rep4, err := c.CompoundRaw(1, false, c.SequenceOp(c.Seq), putroot(), mkdir("d"))
	wantStatus(t, rep4, err, nfsv4.NFS4ERR_EXIST)
	// Unknown session and bad slot.
	badSess := c.SessionID
	badSess[0] ^= 1
	rep5, err := c.CompoundRaw(1, false, &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: badSess, SaSequenceid: 1}}, putroot())
	wantStatus(t, rep5, err, nfsv4.NFS4ERR_BADSESSION)
	seqBadSlot := &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: c.SessionID, SaSequenceid: 1, SaSlotid: 1000}}
	rep6, err := c.CompoundRaw(1, false, seqBadSlot, putroot())
	wantStatus(t, rep6, err, nfsv4.NFS4ERR_BADSLOT)
	// SEQUENCE not first.
	c.Seq++
	rep7, err := c.CompoundRaw(1, false, c.SequenceOp(c.Seq), putroot(), c.SequenceOp(c.Seq))
	wantStatus(t, rep7, err, nfsv4.NFS4ERR_SEQUENCE_POS)
}

func TestFileHandles(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "fh")
	fh := writeFile(t, c, "victim", []byte("x"))
	if len(fh) != 32 {
		t.Fatalf("handle is %d bytes", len(fh))
	}
	okT(t)(c.Compound(putfh(fh), getattr(nfsv4.FATTR4_SIZE)))
	for i := range fh {
		forged := append([]byte(nil), fh...)
		forged[i] ^= 0x40
		rep, err := c.Compound(putfh(forged))
		wantStatus(t, rep, err, nfsv4.NFS4ERR_BADHANDLE)
	}
	rep, err := c.Compound(putfh(fh[:31]))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_BADHANDLE)
	okT(t)(c.Compound(putroot(), remove("victim")))
	rep, err = c.Compound(putfh(fh))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_STALE)
	// No current file handle.
	rep, err = c.Compound(getfh())
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOFILEHANDLE)
	// Handles survive a restart of the server over the same data directory.
	fh2 := writeFile(t, c, "keep", []byte("y"))
	ts.stop()
	ts2 := startServerDir(t, ts.dir, nil)
	c2 := ts2.session(t, 1, "fh2")
	okT(t)(c2.Compound(putfh(fh2), getattr(nfsv4.FATTR4_SIZE)))
}

func TestNames(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "names")
	for _, tc := range []struct {
		name string
		want nfsv4.Nfsstat4
	}{
		{"", nfsv4.NFS4ERR_INVAL},
		{".", nfsv4.NFS4ERR_BADNAME},
		{"..", nfsv4.NFS4ERR_BADNAME},
		{"a/b", nfsv4.NFS4ERR_BADNAME},
		{"a\x00b", nfsv4.NFS4ERR_BADNAME},
		{strings.Repeat("n", 256), nfsv4.NFS4ERR_NAMETOOLONG},
	} {
		rep, err := c.Compound(putroot(), mkdir(tc.name))
		wantStatus(t, rep, err, tc.want)
		rep, err = c.Compound(putroot(), lookup(tc.name))
		wantStatus(t, rep, err, tc.want)
	}
	okT(t)(c.Compound(putroot(), mkdir(strings.Repeat("n", 255))))
	// LOOKUPP at the root stays at the root.
	rep := okT(t)(c.Compound(putroot(), lookupp(), getfh(), putroot(), getfh()))
	if !bytes.Equal(fhOf(t, rep.Results[2]), fhOf(t, rep.Results[4])) {
		t.Fatal("LOOKUPP at root moved")
	}
	rep, err := c.Compound(putroot(), lookup("missing"))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_NOENT)
}

func TestNamespaceOps(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 2, "ns")
	okT(t)(c.Compound(putroot(), mkdir("a"), putroot(), mkdir("b")))
	okT(t)(c.Compound(putroot(), lookup("a"), symlink("ln", "../target")))
	rep := okT(t)(c.Compound(putroot(), lookup("a"), lookup("ln"), readlink()))
	if got := string(rep.Results[3].(*nfsv4.NfsResop4_OP_READLINK).Opreadlink.(*nfsv4.Readlink4res_NFS4_OK).Resok4.Link); got != "../target" {
		t.Fatalf("readlink %q", got)
	}
	writeFile(t, c, "f", []byte("hello"))
	// LINK: saved = file, current = dir.
	okT(t)(c.Compound(putroot(), lookup("f"), savefh(), putroot(), lookup("a"), link("f2")))
	rep = okT(t)(c.Compound(putroot(), lookup("f"), getattr(nfsv4.FATTR4_NUMLINKS)))
	if v := attrVals(t, rep.Results[2]).AttrVals; v[3] != 2 {
		t.Fatalf("nlink %v", v)
	}
	// RENAME a directory into another: saved = source dir.
	okT(t)(c.Compound(putroot(), savefh(), lookup("b"), rename("a", "a2")))
	okT(t)(c.Compound(putroot(), lookup("b"), lookup("a2"), lookup("f2")))
	// LOOKUPP goes up.
	rep = okT(t)(c.Compound(putroot(), lookup("b"), lookup("a2"), lookupp(), getfh(), putroot(), lookup("b"), getfh()))
	if !bytes.Equal(fhOf(t, rep.Results[4]), fhOf(t, rep.Results[7])) {
		t.Fatal("LOOKUPP did not reach the parent")
	}
	// REMOVE of a non-empty directory fails; of a file succeeds.
	rep2, err := c.Compound(putroot(), lookup("b"), remove("a2"))
	wantStatus(t, rep2, err, nfsv4.NFS4ERR_NOTEMPTY)
	okT(t)(c.Compound(putroot(), lookup("b"), lookup("a2"), remove("f2"), remove("ln")))
	okT(t)(c.Compound(putroot(), lookup("b"), remove("a2")))
	// RESTOREFH without SAVEFH.
	rep2, err = c.Compound(putroot(), restorefh())
	wantStatus(t, rep2, err, nfsv4.NFS4ERR_RESTOREFH)
	// LOOKUP through a file.
	rep2, err = c.Compound(putroot(), lookup("f"), lookup("x"))
	wantStatus(t, rep2, err, nfsv4.NFS4ERR_NOTDIR)
}

func TestReaddirPaging(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "rd")
	const n = 300
	var ops []nfsv4.NfsArgop4
	ops = append(ops, putroot(), mkdir("d"))
	for i := 0; i < n; i++ {
		ops = append(ops, mkdir(fmt.Sprintf("entry-%03d", i)), lookupp())
	}
	okT(t)(c.Compound(ops...))
	var dirFH []byte
	rep := okT(t)(c.Compound(putroot(), lookup("d"), getfh()))
	dirFH = fhOf(t, rep.Results[2])
	var names []string
	cookie := uint64(0)
	var verf [8]byte
	pages := 0
	for {
		rep := okT(t)(c.Compound(putfh(dirFH), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
			Cookie: cookie, Cookieverf: verf, Dircount: 512, Maxcount: 2048,
			AttrRequest: []uint32{1<<nfsv4.FATTR4_TYPE | 1<<nfsv4.FATTR4_SIZE | 1<<nfsv4.FATTR4_FILEID},
		}}))
		ok := rep.Results[1].(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
		verf = ok.Cookieverf
		pages++
		for e := ok.Reply.Entries; e != nil; e = e.Nextentry {
			names = append(names, e.Name)
			cookie = e.Cookie
		}
		if ok.Reply.Eof {
			break
		}
		if pages > n {
			t.Fatal("READDIR does not end")
		}
	}
	if pages < 3 {
		t.Fatalf("only %d pages with a 2 KiB maxcount", pages)
	}
	sort.Strings(names)
	if len(names) != n {
		t.Fatalf("%d names, want %d", len(names), n)
	}
	for i, nm := range names {
		if nm != fmt.Sprintf("entry-%03d", i) {
			t.Fatalf("name %d = %q", i, nm)
		}
	}
	// Too small a maxcount.
	rep2, err := c.Compound(putfh(dirFH), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 10}})
	wantStatus(t, rep2, err, nfsv4.NFS4ERR_TOOSMALL)
	rep2, err = c.Compound(putfh(dirFH), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Cookie: 1, Maxcount: 4096}})
	wantStatus(t, rep2, err, nfsv4.NFS4ERR_BAD_COOKIE)
}

// TestAppendExtension checks WRITE at offset 2^64-1 followed by
// OpAppendOffset (docs/protocol.md §2): concurrent appenders through an
// open stateid (group-committed FS.Append), the anonymous stateid and
// transactional compounds all get distinct, non-overlapping offsets, and
// the file holds each record at the offset returned for it.
func TestAppendExtension(t *testing.T) {
	ts := startServer(t)
	const writers, each = 9, 12
	setup := ts.session(t, 1, "setup")
	fh := writeFile(t, setup, "log", nil)
	type rec struct {
		off  uint64
		data string
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		c := ts.session(t, 1, fmt.Sprintf("app-%d", w))
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			sid := anon
			if w%3 == 0 {
				rep, err := c.Compound(putroot(), openWith(c, "log", "o", nfsv4.OPEN4_SHARE_ACCESS_WRITE, 0, nil))
				if err != nil || rep.Status != nfsv4.NFS4_OK {
					errs <- fmt.Errorf("open: %v %v", err, rep)
					return
				}
				sid = openSid(t, rep.Results[1])
			}
			for i := 0; i < each; i++ {
				data := fmt.Sprintf("[w%d-%02d-%s]", w, i, strings.Repeat("x", w))
				ops := []nfsv4.NfsArgop4{putfh(fh), write(sid, math.MaxUint64, []byte(data)), appendOffset()}
				var rep *testclient.Reply
				var err error
				if w%3 == 2 {
					rep, err = c.Txn(ops...)
				} else {
					rep, err = c.Compound(ops...)
				}
				if err != nil || rep.Status != nfsv4.NFS4_OK {
					errs <- fmt.Errorf("append: %v %+v", err, rep)
					return
				}
				ar := rep.Results[2].(*testclient.AppendOffsetResult)
				mu.Lock()
				recs = append(recs, rec{ar.Offset, data})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := readFile(t, setup, "log")
	total := 0
	for _, r := range recs {
		total += len(r.data)
	}
	if len(got) != total {
		t.Fatalf("log has %d bytes, appended %d", len(got), total)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].off < recs[j].off })
	next := uint64(0)
	for _, r := range recs {
		if r.off != next {
			t.Fatalf("record %q at offset %d, want %d (gap or overlap)", r.data, r.off, next)
		}
		if s := string(got[r.off : r.off+uint64(len(r.data))]); s != r.data {
			t.Fatalf("offset %d holds %q, want %q", r.off, s, r.data)
		}
		next += uint64(len(r.data))
	}
}

// TestAppendOffsetErrors checks OpAppendOffset's rules: it reports the
// offset of the immediately preceding WRITE (plain WRITEs included, in
// 4.0 too), and is NFS4ERR_INVAL anywhere else or with non-zero flags.
func TestAppendOffsetErrors(t *testing.T) {
	ts := startServer(t)
	c := ts.session(t, 1, "c")
	fh := writeFile(t, c, "f", []byte("hello"))
	rep, err := c.Compound(putfh(fh), write(anon, 3, []byte("LO")), appendOffset())
	okT(t)(rep, err)
	if ar := rep.Results[2].(*testclient.AppendOffsetResult); ar.Offset != 3 {
		t.Fatalf("offset %d after WRITE at 3", ar.Offset)
	}
	rep, err = c.Compound(putfh(fh), appendOffset())
	wantStatus(t, rep, err, nfsv4.NFS4ERR_INVAL)
	rep, err = c.Compound(putfh(fh), write(anon, math.MaxUint64, []byte("!")), getattr(nfsv4.FATTR4_SIZE), appendOffset())
	wantStatus(t, rep, err, nfsv4.NFS4ERR_INVAL)
	rep, err = c.Compound(putfh(fh), write(anon, math.MaxUint64, []byte("?")), &testclient.AppendOffsetArgs{Flags: 1})
	wantStatus(t, rep, err, nfsv4.NFS4ERR_INVAL)
	if got := string(readFile(t, c, "f")); got != "helLO!?" {
		t.Fatalf("file %q", got)
	}
	// A failed WRITE stops the compound before OpAppendOffset.
	rep, err = c.Compound(putroot(), write(anon, math.MaxUint64, []byte("x")), appendOffset())
	wantStatus(t, rep, err, nfsv4.NFS4ERR_ISDIR)
	if len(rep.Results) != 2 {
		t.Fatalf("%d results after a failed WRITE", len(rep.Results))
	}
	// 4.0, no session.
	c0 := ts.dial(t)
	if err := c0.SetClientID("c0"); err != nil {
		t.Fatal(err)
	}
	rep, err = c0.Compound(putfh(fh), write(anon, math.MaxUint64, []byte("0")), appendOffset())
	okT(t)(rep, err)
	if ar := rep.Results[2].(*testclient.AppendOffsetResult); ar.Offset != 7 {
		t.Fatalf("4.0 append at %d, want 7", ar.Offset)
	}
}

// TestSessionSizeLimits checks the negotiated channel sizes (RFC 8881
// §2.10.6.4, §18.46.3): a request above ca_maxrequestsize is
// NFS4ERR_REQ_TOO_BIG without consuming the slot; a reply above
// ca_maxresponsesize fails the operation that overflows it with
// NFS4ERR_REP_TOO_BIG, and above ca_maxresponsesize_cached (when
// sa_cachethis is set) with NFS4ERR_REP_TOO_BIG_TO_CACHE. In 4.0 the
// server's own limit gives NFS4ERR_RESOURCE.
func TestSessionSizeLimits(t *testing.T) {
	ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.MaxIO = 64 << 10; c.MaxRequest = 96 << 10 })
	c := ts.dial(t)
	got, err := c.NewSessionWith(1, "small", nfsv4.ChannelAttrs4{CaMaxrequestsize: 8 << 10,
		CaMaxresponsesize: 8 << 10, CaMaxresponsesizeCached: 2 << 10, CaMaxoperations: 64, CaMaxrequests: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got.CaMaxrequestsize != 8<<10 || got.CaMaxresponsesize != 8<<10 || got.CaMaxresponsesizeCached != 2<<10 {
		t.Fatalf("granted %+v", got)
	}
	fh := writeFile(t, c, "f", bytes.Repeat([]byte("a"), 6<<10))

	seq := c.Seq + 1
	rep, err := c.CompoundRaw(1, false, c.SequenceOp(seq), putfh(fh), write(anon, 0, make([]byte, 9<<10)))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_REQ_TOO_BIG)
	if len(rep.Results) != 1 {
		t.Fatalf("%d results for a too-big request", len(rep.Results))
	}
	// The slot was not consumed: the same sequence id is a new request.
	rep, err = c.CompoundRaw(1, false, c.SequenceOp(seq), putfh(fh), getattr(nfsv4.FATTR4_SIZE))
	okT(t)(rep, err)
	c.Seq = seq

	rep, err = c.Compound(putfh(fh), read(anon, 0, 4<<10), read(anon, 0, 4<<10))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_REP_TOO_BIG)
	if len(rep.Results) != 3 {
		t.Fatalf("%d results, want the overflowing READ last", len(rep.Results))
	}
	// sa_cachethis with a reply above the cached limit.
	seq = c.Seq + 1
	rep, err = c.CompoundRaw(1, false, c.SequenceOp(seq), putfh(fh), read(anon, 0, 4<<10))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_REP_TOO_BIG_TO_CACHE)
	c.Seq = seq
	okT(t)(c.Compound(putfh(fh), read(anon, 0, 4<<10)))

	// 4.0: the server's MaxRequest bounds the reply.
	c0 := ts.dial(t)
	if err := c0.SetClientID("c0"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, ts.session(t, 1, "big"), "big", bytes.Repeat([]byte("b"), 64<<10))
	rep, err = c0.Compound(putroot(), lookup("big"), read(anon, 0, 64<<10), read(anon, 0, 64<<10))
	wantStatus(t, rep, err, nfsv4.NFS4ERR_RESOURCE)
}

// TestSessionSlotsFitInflight: a session is granted no more slots than a
// connection runs requests at once (Config.MaxInflight), whatever the
// client asks for, so a chained COMPOUND waiting for its predecessor can
// never hold the last place the predecessor needs to be read (with 64
// slots and 32 requests per connection, 32 waiting successors stalled
// the connection for the 10 s chain wait; found by D11).
func TestSessionSlotsFitInflight(t *testing.T) {
	for _, inflight := range []int{0, 5} {
		ts := startServerDir(t, t.TempDir(), func(c *server.Config) { c.MaxInflight = inflight })
		c := ts.dial(t)
		attrs := testclient.DefaultChannel
		attrs.CaMaxrequests = 1000
		got, err := c.NewSessionWith(1, "slots", attrs)
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(inflight)
		if inflight == 0 {
			want = 32 // the default MaxInflight
		}
		if got.CaMaxrequests != want {
			t.Fatalf("MaxInflight %d: granted %d slots, want %d", inflight, got.CaMaxrequests, want)
		}
	}
}
