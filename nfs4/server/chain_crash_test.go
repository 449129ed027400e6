package server_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/client"
)

// TestCrashChainDurability kills a real `txnfs serve` with SIGKILL while
// clients keep chains of COMPOUNDs in flight (a chain's next COMPOUND
// runs while the previous one syncs), restarts it and checks that every
// COMPOUND whose reply was NFS4_OK survived: its directory, and the mode
// its SETATTR set (a SETATTR changes no directory, so its run would
// commit durably inside its execution were it not chained). A chain is
// c-W-I (MKDIR), SETATTR on it, c-W-I/d (MKDIR), SETATTR on that, then
// c-W-I/d/f created with 192 KiB of FILE_SYNC data (a covered slice put).
func TestCrashChainDurability(t *testing.T) {
	start := crashHarness(t)
	cmd, addr := start()
	type ack struct {
		path []string
		mode uint32 // 0: a MKDIR (or a file, with data)
		data []byte
	}
	var mu sync.Mutex
	var acked []ack
	var chains int
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(context.Background(), client.Config{Addr: addr})
			if err != nil {
				return
			}
			defer c.Close()
			for i := 0; ctx.Err() == nil; i++ {
				top := fmt.Sprintf("c-%d-%d", w, i)
				mode := uint32(0o700 | (i % 64))
				body := bytes.Repeat([]byte{byte(w*16 + i)}, 192<<10)
				steps := []ack{{[]string{top}, 0, nil}, {[]string{top}, mode, nil}, {[]string{top, "d"}, 0, nil},
					{[]string{top, "d"}, mode ^ 0o077, nil}, {[]string{top, "d", "f"}, 0, body}}
				id := c.NewChainID()
				var cwg sync.WaitGroup
				for k, s := range steps {
					cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(k), Last: k == len(steps)-1}}
					cp.PutRootFH()
					for _, p := range s.path[:len(s.path)-1] {
						cp.Lookup(p)
					}
					switch {
					case s.data != nil:
						cp.Open(c.ClientID(), c.OpenOwner(), client.OpenArgs{Name: s.path[len(s.path)-1],
							Access: nfsv4.OPEN4_SHARE_ACCESS_WRITE, Create: true})
						cp.Write(client.CurrentStateid, 0, s.data, true)
						cp.Close(client.CurrentStateid)
					case s.mode == 0:
						cp.Mkdir(s.path[len(s.path)-1], nfsv4.Fattr4{})
					default:
						cp.Lookup(s.path[len(s.path)-1])
						cp.SetAttr(nfsv4.Stateid4{}, (&client.SetAttrs{SetMode: true, Mode: s.mode}).Encode())
					}
					cwg.Add(1)
					go func() {
						defer cwg.Done()
						rep, err := c.Do(context.Background(), cp)
						if err == nil && rep.Status == nfsv4.NFS4_OK {
							mu.Lock()
							acked = append(acked, s)
							mu.Unlock()
						}
					}()
				}
				cwg.Wait()
				mu.Lock()
				chains++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	cancel()
	wg.Wait()
	if len(acked) == 0 {
		t.Fatal("no chained COMPOUND was acknowledged before the kill")
	}

	_, addr = start()
	c, err := client.Dial(context.Background(), client.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	files := 0
	for _, a := range acked {
		var cp client.Compound
		cp.PutRootFH()
		if a.data != nil {
			for _, p := range a.path {
				cp.Lookup(p)
			}
			// The anonymous stateid: an OPEN would wait for the grace
			// period after the restart.
			ri := cp.Read(nfsv4.Stateid4{}, 0, 1<<20)
			rep, err := c.Do(context.Background(), &cp)
			if err != nil || rep.Status != nfsv4.NFS4_OK {
				t.Fatalf("%v acknowledged, gone after the crash: %v %v", a.path, err, rep)
			}
			got := rep.Results[ri].(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4.Data
			if !bytes.Equal(got, a.data) {
				t.Fatalf("%v: %d bytes after the crash, acknowledged %d", a.path, len(got), len(a.data))
			}
			files++
			continue
		}
		for _, p := range a.path {
			cp.Lookup(p)
		}
		cp.GetAttr(client.MakeBitmap(nfsv4.FATTR4_MODE))
		rep, err := c.Do(context.Background(), &cp)
		if err != nil || rep.Status != nfsv4.NFS4_OK {
			t.Fatalf("%v acknowledged, gone after the crash: %v %v", a.path, err, rep)
		}
		if a.mode == 0 {
			continue
		}
		at, err := client.DecodeAttrs(attrVals(t, rep.Results[len(rep.Results)-1]))
		if err != nil {
			t.Fatal(err)
		}
		// A later acknowledged SETATTR of the same chain only sets the
		// other directory's mode: each path's mode is its own.
		if at.Mode&0o7777 != a.mode {
			t.Fatalf("%v: mode %o after the crash, acknowledged %o", a.path, at.Mode, a.mode)
		}
	}
	if files == 0 {
		t.Fatal("no file's COMPOUND was acknowledged")
	}
	t.Logf("%d chains sent, %d acknowledged COMPOUNDs survived (%d files)", chains, len(acked), files)
}
