package server_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// TestPlainConflictsNoDelay runs plain (non-transactional) compounds that
// conflict in the engine — creators, removers, renamers, writers and
// openers of the same few names in one directory, several operations per
// compound like a pipelined `rm -r` — from concurrent clients, and checks
// that no operation is ever answered NFS4ERR_DELAY (a plain operation is
// its own engine transaction: the server retries conflicts itself) or
// fails with a server error. TXNFS_CONFLICT_SEED repeats a run,
// TXNFS_CONFLICT_ROUNDS sets the compounds per client (default 150).
func TestPlainConflictsNoDelay(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXNFS_CONFLICT_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rounds := 150
	if s := os.Getenv("TXNFS_CONFLICT_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	t.Logf("seed %d (TXNFS_CONFLICT_SEED to repeat), %d compounds per client", seed, rounds)
	ts := startServer(t)
	c0 := ts.session(t, 1, "conflict-setup")
	dir := fhOf(t, okT(t)(c0.Compound(putroot(), mkdir("d"), getfh())).Results[2])
	names := []string{"a", "b", "c", "d", "e"}
	const clients = 8
	type counts struct {
		ok, failed, ops int
		byStatus        map[nfsv4.Nfsstat4]int
	}
	var mu sync.Mutex
	total := counts{byStatus: map[nfsv4.Nfsstat4]int{}}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := 0; w < clients; w++ {
		c := ts.session(t, 1, fmt.Sprintf("conflict-%d", w))
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := counts{byStatus: map[nfsv4.Nfsstat4]int{}}
			for i := 0; i < rounds; i++ {
				ops := conflictOps(c, rng, dir, names)
				rep, err := c.Compound(ops...)
				if err != nil {
					errs <- err
					return
				}
				local.ops += len(rep.Results)
				if rep.Status == nfsv4.NFS4_OK {
					local.ok++
				} else {
					local.failed++
					local.byStatus[rep.Status]++
				}
				if rep.Status == nfsv4.NFS4ERR_STALE && staleAllowed(ops, len(rep.Results)) {
					continue
				}
				switch rep.Status {
				case nfsv4.NFS4ERR_DELAY, nfsv4.NFS4ERR_SERVERFAULT, nfsv4.NFS4ERR_IO, nfsv4.NFS4ERR_STALE,
					nfsv4.NFS4ERR_BADXDR, nfsv4.NFS4ERR_BAD_STATEID:
					errs <- fmt.Errorf("compound %d of a client: status %d after %d results (ops %v)",
						i, rep.Status, len(rep.Results), opCodes(ops))
					return
				}
			}
			mu.Lock()
			total.ok += local.ok
			total.failed += local.failed
			total.ops += local.ops
			for k, v := range local.byStatus {
				total.byStatus[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d compounds OK, %d failed (by status %v), %d operation results", total.ok, total.failed, total.byStatus, total.ops)
	if total.ok == 0 {
		t.Fatal("no compound succeeded")
	}
}

// conflictOps returns a random plain compound on names in dir.
func conflictOps(c *testclient.Client, rng *rand.Rand, dir []byte, names []string) []nfsv4.NfsArgop4 {
	pick := func() string { return names[rng.IntN(len(names))] }
	ops := []nfsv4.NfsArgop4{putfh(dir)}
	n := 1 + rng.IntN(4)
	for k := 0; k < n; k++ {
		switch rng.IntN(6) {
		case 0, 1:
			ops = append(ops, openCreate(c, pick()), write(current, uint64(rng.IntN(64)), []byte("data")),
				closeOp(current), putfh(dir))
		case 2:
			ops = append(ops, remove(pick()))
		case 3:
			ops = append(ops, savefh(), rename(pick(), pick()))
		case 4:
			ops = append(ops, lookup(pick()), write(anon, uint64(rng.IntN(64)), []byte("x")), putfh(dir))
		case 5:
			ops = append(ops, openWith(c, pick(), "owner", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE, nil),
				read(current, 0, 16), closeOp(current), putfh(dir))
		}
	}
	return ops
}

// staleAllowed reports whether result n (1-based) may legitimately be
// NFS4ERR_STALE: a WRITE with the anonymous stateid to a file found by
// the LOOKUP just before it, which another client can remove in between
// (a plain compound is not atomic: after a conflict the server runs it
// one operation at a time).
func staleAllowed(ops []nfsv4.NfsArgop4, n int) bool {
	return n >= 2 && n <= len(ops) && ops[n-1].GetArgop() == nfsv4.OP_WRITE && ops[n-2].GetArgop() == nfsv4.OP_LOOKUP
}

func opCodes(ops []nfsv4.NfsArgop4) []nfsv4.NfsOpnum4 {
	out := make([]nfsv4.NfsOpnum4, len(ops))
	for i, op := range ops {
		out[i] = op.GetArgop()
	}
	return out
}
