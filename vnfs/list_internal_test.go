package vnfs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txnfs/txnfs/nfs4/client"
)

// TestListDirOneRoundPerLevel: a recursive listing costs one round trip
// per directory level, even with a directory of 300 entries (more than
// the 8 KiB READDIR reply of sessions 1-3 holds, which cost it a second,
// dependent round) and with the level split over several pipelined
// COMPOUNDs (operation cap 99, NFS-Ganesha's). A round is counted when a
// COMPOUND is sent while none is in flight; each is held 20 ms before it
// is sent, so the COMPOUNDs of one round overlap.
func TestListDirOneRoundPerLevel(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	for _, maxOps := range []int{0, 99} {
		t.Run(fmt.Sprintf("maxops=%d", maxOps), func(t *testing.T) {
			fsys, err := Dial(ctx, Config{Addr: addr, MaxOps: maxOps})
			if err != nil {
				t.Fatal(err)
			}
			defer fsys.Close()
			n := fsys.(*nfsFS)
			root := fmt.Sprintf("/rounds%d", maxOps)
			mk := []MkdirItem{{Path: root}}
			for i := 0; i < 40; i++ {
				mk = append(mk, MkdirItem{Path: fmt.Sprintf("%s/d%d", root, i)})
			}
			for i := 0; i < 120; i++ {
				mk = append(mk, MkdirItem{Path: fmt.Sprintf("%s/d%d/s%d", root, i%40, i)})
			}
			if _, err := fsys.VMkdir(ctx, mk); err != nil {
				t.Fatal(err)
			}
			var ws []IO
			for i := 0; i < 300; i++ { // one large directory on level 1
				ws = append(ws, IO{File: P(fmt.Sprintf("%s/d7/%s%d", root, strings.Repeat("n", 30), i)), Flags: Create})
			}
			for i := 0; i < 360; i++ {
				ws = append(ws, IO{File: P(fmt.Sprintf("%s/d%d/s%d/f%d", root, i%40, i%120, i)), Flags: Create})
			}
			if _, err := Unordered(fsys).VWrite(ctx, ws); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			inflight, rounds, compounds := 0, 0, 0
			n.sh.do = func(ctx context.Context, cp *client.Compound) (*client.Reply, error) {
				mu.Lock()
				if inflight == 0 {
					rounds++
				}
				inflight++
				compounds++
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				rep, err := n.c.Do(ctx, cp)
				mu.Lock()
				inflight--
				mu.Unlock()
				return rep, err
			}
			defer func() { n.sh.do = nil }()
			entries := 0
			err = fsys.VListDir(ctx, []string{root}, ListOptions{Mask: AttrStat, Recursive: true}, func(DirEntry) error {
				entries++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := 40 + 120 + 300 + 360; entries != want {
				t.Fatalf("%d entries, want %d", entries, want)
			}
			t.Logf("%d rounds, %d COMPOUNDs (op cap %d)", rounds, compounds, n.maxOps)
			if rounds != 3 {
				t.Fatalf("%d rounds for 3 levels", rounds)
			}
		})
	}
}
