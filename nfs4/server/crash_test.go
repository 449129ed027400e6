package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// TestCrashDurability kills a real `txnfs serve` process with SIGKILL
// while clients run transactional compounds and stable writes, restarts
// it on the same data directory, and checks that every acknowledged
// commit is whole and nothing unacknowledged is half-visible.
func TestCrashDurability(t *testing.T) {
	start := crashHarness(t)

	type ack struct {
		dir  string
		data []byte
	}
	var mu sync.Mutex
	var acked []ack
	killDuring(start, "crash", func(c *testclient.Client, w, i int) bool {
		dir := fmt.Sprintf("t-%d-%d", w, i)
		body := bytes.Repeat([]byte{byte('a' + i%26)}, 10000+i)
		// A transactional set: a directory, two files with data.
		rep, err := c.Txn(putroot(), mkdir(dir),
			openCreate(c, "one"), write(current, 0, body), closeOp(current),
			putroot(), lookup(dir), openCreate(c, "two"), write(current, 0, body), closeOp(current))
		if err != nil {
			return false // the server died
		}
		if rep.Status == nfsv4.NFS4_OK {
			mu.Lock()
			acked = append(acked, ack{dir, body})
			mu.Unlock()
		}
		return true
	})
	if len(acked) == 0 {
		t.Fatal("no transaction was acknowledged before the kill")
	}

	c := restartedClient(t, start)
	for _, a := range acked {
		for _, f := range []string{"one", "two"} {
			rep := okT(t)(c.Compound(putroot(), lookup(a.dir), lookup(f), read(anon, 0, 1<<20)))
			if d, _ := readData(t, rep.Results[3]); !bytes.Equal(d, a.data) {
				t.Fatalf("%s/%s: %d bytes after restart, want %d", a.dir, f, len(d), len(a.data))
			}
		}
	}
	// Whatever else exists must be whole too (a commit may have landed
	// without its reply reaching the client).
	rep := okT(t)(c.Compound(putroot(), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 1 << 20, Dircount: 1 << 20}}))
	ok := rep.Results[1].(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
	checked := 0
	for e := ok.Reply.Entries; e != nil; e = e.Nextentry {
		if !strings.HasPrefix(e.Name, "t-") {
			continue
		}
		r := okT(t)(c.Compound(putroot(), lookup(e.Name), lookup("one"), read(anon, 0, 1<<20),
			putroot(), lookup(e.Name), lookup("two"), read(anon, 0, 1<<20)))
		one, _ := readData(t, r.Results[3])
		two, _ := readData(t, r.Results[7])
		if len(one) < 10000 || !bytes.Equal(one, two) {
			t.Fatalf("%s is partial after the crash: %d and %d bytes", e.Name, len(one), len(two))
		}
		checked++
	}
	if checked < len(acked) {
		t.Fatalf("only %d sets on disk, %d acknowledged", checked, len(acked))
	}
	t.Logf("%d acknowledged transactions, %d sets after restart", len(acked), checked)
}

// killDuring starts the server, runs step(c, w, i) for i = 0, 1, ... in
// four workers (each with its own session named prefix-w) until step
// returns false, SIGKILLs the server after a second and returns when
// every worker has stopped.
func killDuring(start func() (*exec.Cmd, string), prefix string, step func(c *testclient.Client, w, i int) bool) {
	cmd, addr := start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c, err := testclient.Dial(addr)
			if err != nil {
				return
			}
			defer c.Close()
			if err := c.NewSession(1, fmt.Sprintf("%s-%d", prefix, w)); err != nil {
				return
			}
			for i := 0; ctx.Err() == nil && step(c, w, i); i++ {
			}
		}(w)
	}
	time.Sleep(time.Second)
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	cancel()
	wg.Wait()
}

// restartedClient starts the server again (stopped at the end of the
// test) and returns a client with a session, closed at the end of the
// test.
func restartedClient(t *testing.T, start func() (*exec.Cmd, string)) *testclient.Client {
	t.Helper()
	_, addr := start() // crashHarness's cleanup stops it
	c, err := testclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.NewSession(1, "checker"); err != nil {
		t.Fatal(err)
	}
	return c
}

// crashHarness builds cmd/txnfs and returns a function that starts it on
// one data directory (skips with -short).
func crashHarness(t *testing.T) func() (*exec.Cmd, string) {
	if testing.Short() {
		t.Skip("builds and kills the txnfs binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	bin := filepath.Join(t.TempDir(), "txnfs")
	build := exec.Command(goTool, "build", "-o", bin, "github.com/txnfs/txnfs/cmd/txnfs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := t.TempDir()
	return func() (*exec.Cmd, string) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		cmd := exec.Command(bin, "serve", "--data", data, "--listen", addr, "--gc-interval", "0")
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Whatever happens to the test, the server goes with it.
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		for i := 0; i < 200; i++ {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return cmd, addr
			}
			time.Sleep(25 * time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server did not start:\n%s", logs.String())
		return nil, ""
	}
}

// TestCrashPlainDurability kills a real `txnfs serve` with SIGKILL while
// clients send plain compounds — UNSTABLE WRITEs made durable by a later
// COMMIT, FILE_SYNC WRITEs, directory creations (plain compounds commit
// NoSync and sync once before the reply) — restarts it and checks that
// everything acknowledged as durable survived: the COMMITted and stable
// data, and the created directories.
func TestCrashPlainDurability(t *testing.T) {
	start := crashHarness(t)
	type ack struct {
		name string
		data []byte // nil: a directory
	}
	var mu sync.Mutex
	var acked []ack
	var unstable int
	killDuring(start, "plaincrash", func(c *testclient.Client, w, i int) bool {
		name := fmt.Sprintf("p-%d-%d", w, i)
		body := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i*7%5000)
		switch i % 3 {
		case 0: // UNSTABLE WRITE, then COMMIT in another compound
			rep, err := c.Compound(putroot(), openCreate(c, name),
				&nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: current, Stable: nfsv4.UNSTABLE4, Data: body}},
				getfh())
			if err != nil || rep.Status != nfsv4.NFS4_OK {
				return false
			}
			res := rep.Results[2].(*nfsv4.NfsResop4_OP_WRITE).Opwrite.(*nfsv4.Write4res_NFS4_OK).Resok4
			if res.Committed != nfsv4.UNSTABLE4 {
				mu.Lock()
				unstable = -1 << 30 // the server should not sync UNSTABLE writes
				mu.Unlock()
			}
			sid, fh := openSid(t, rep.Results[1]), fhOf(t, rep.Results[3])
			rep, err = c.Compound(putfh(fh), &nfsv4.NfsArgop4_OP_COMMIT{}, closeOp(sid))
			if err != nil || rep.Status != nfsv4.NFS4_OK {
				return false
			}
			v := rep.Results[1].(*nfsv4.NfsResop4_OP_COMMIT).Opcommit.(*nfsv4.Commit4res_NFS4_OK).Resok4.Writeverf
			if v != res.Writeverf {
				return false // the server restarted in between: the client would resend
			}
			mu.Lock()
			acked = append(acked, ack{name, body})
			unstable++
			mu.Unlock()
		case 1: // FILE_SYNC WRITE
			rep, err := c.Compound(putroot(), openCreate(c, name), write(current, 0, body), closeOp(current))
			if err != nil || rep.Status != nfsv4.NFS4_OK {
				return false
			}
			mu.Lock()
			acked = append(acked, ack{name, body})
			mu.Unlock()
		case 2: // a directory
			rep, err := c.Compound(putroot(), mkdir(name))
			if err != nil || rep.Status != nfsv4.NFS4_OK {
				return false
			}
			mu.Lock()
			acked = append(acked, ack{name, nil})
			mu.Unlock()
		}
		return true
	})
	if len(acked) == 0 || unstable <= 0 {
		t.Fatalf("%d acknowledged compounds, %d COMMITted unstable writes (negative: a WRITE UNSTABLE was answered FILE_SYNC)", len(acked), unstable)
	}

	c := restartedClient(t, start)
	for _, a := range acked {
		if a.data == nil {
			okT(t)(c.Compound(putroot(), lookup(a.name)))
			continue
		}
		rep := okT(t)(c.Compound(putroot(), lookup(a.name), read(anon, 0, 1<<20)))
		if d, _ := readData(t, rep.Results[2]); !bytes.Equal(d, a.data) {
			t.Fatalf("%s: %d bytes after restart, want %d", a.name, len(d), len(a.data))
		}
	}
	t.Logf("%d acknowledged compounds (%d COMMITted unstable writes) survived", len(acked), unstable)
}
