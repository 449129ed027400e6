package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/nfs4/client"
	"github.com/txnfs/txnfs/nfs4/server"
)

// TestChainRandomSyncsWrites is TestChainRandomSyncs with small-file
// writes (OPEN creating a new file exclusively, WRITE, CLOSE: vNFS's
// vectorized write; one in 12 creates a file that exists: NFS4ERR_EXIST
// stops the chain), two chains at a time, while every
// sync is delayed at random and fails now and then: once a reply is not
// OK every later one is NFS4ERR_IO or refused; a refused COMPOUND left
// nothing (no file), an answered one its file with its data. The seed is
// printed on failure (TXNFS_SEED replays it). (16 chained COMPOUNDs in
// flight at most, the client's slots: with more, a round could stall
// for the chain wait, see TestChainMoreCompoundsThanSlots.)
func TestChainRandomSyncsWrites(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TXNFS_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var rmu sync.Mutex
	random := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.IntN(n)
	}
	ts := startServer(t)
	c := ts.dialClient(t)
	putFile(t, c, "taken", []byte("taken"))
	var failed atomic.Int64
	server.SetSyncForTest(ts.srv, func(ctx context.Context, sync func(context.Context) error) error {
		time.Sleep(time.Duration(random(3000)) * time.Microsecond)
		if random(25) == 0 {
			failed.Add(1)
			return fmt.Errorf("injected: %w", fs.ErrIO)
		}
		return sync(ctx)
	})
	const rounds, chains, chainLen = 5, 2, 8
	var mu sync.Mutex
	var problems []string
	for r := range rounds {
		var wg sync.WaitGroup
		for ch := range chains {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := c.NewChainID()
				names, statuses := make([]string, chainLen), make([]string, chainLen)
				var cwg sync.WaitGroup
				for k := range chainLen {
					names[k] = fmt.Sprintf("r%d-ch%d-%d", r, ch, k)
					if random(12) == 0 {
						names[k] = "taken"
					}
					cp := &client.Compound{Chain: &client.Chain{ID: id, Seq: uint32(k), Last: k == chainLen-1}}
					cp.PutRootFH()
					cp.Open(c.ClientID(), []byte(fmt.Sprintf("o-%d-%d-%d", r, ch, k)), client.OpenArgs{
						Name: names[k], Access: nfsv4.OPEN4_SHARE_ACCESS_BOTH, Create: true, Exclusive: true})
					cp.Write(client.CurrentStateid, 0, []byte(names[k]), true)
					cp.Close(client.CurrentStateid)
					cwg.Add(1)
					go func() {
						defer cwg.Done()
						time.Sleep(time.Duration(random(2000)) * time.Microsecond)
						statuses[k] = chainOutcome(c.Do(context.Background(), cp))
					}()
				}
				cwg.Wait()
				bad := func(format string, args ...any) {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("chain %v: ", statuses)+fmt.Sprintf(format, args...))
					mu.Unlock()
				}
				checkChainOutcomes(t, c, names, statuses, bad, func(k int) {
					if got := string(getFile(t, c, names[k])); got != names[k] {
						bad("COMPOUND %d: file holds %q", k, got)
					}
				})
			}()
		}
		wg.Wait()
	}
	if len(problems) > 0 {
		t.Fatalf("seed %d: %d problems, first: %s", seed, len(problems), problems[0])
	}
	t.Logf("%d injected sync failures", failed.Load())
}
