package server_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/testclient"
)

// TestPutFHRaces: plain compounds whose grouped runs check directory
// handles with PUTFH (fs.Txn.CheckHandle: not in the run's read set) and
// then create, remove, rename and link names in those directories, while
// other clients remove, recreate and rename the directories over each
// other. Every name a creator holds must stay in the directory it was put
// in, so a directory holding one can never be removed: PUTFH of its
// handle and the creator's REMOVE must succeed. A handle once answered
// with NFS4ERR_STALE must stay stale (inode numbers are not reused). At
// the end every handle ever seen is read back: a stale one must hold none
// of the creators' names (no entry was added to a removed directory), a
// live one exactly those the creators' results put there, and the file
// system's Check must pass. Randomized: the seed is logged and can be set
// with NFS4_PUTFH_RACE_SEED; NFS4_PUTFH_RACE_OPS sets the compounds per
// creator (default 1000, under a second here). The runs only overlap with
// two Ps or more, so the test raises GOMAXPROCS to 2 while it runs: with
// one P the grouped runs never interleave, and a CheckHandle made unsound
// (its record cached for later tracked reads) passed; with two, 2000
// compounds per creator caught it 5 times in 6 (a resurrected directory:
// a handle answered STALE and later accepted, entries naming removed
// directories in Check).
func TestPutFHRaces(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("NFS4_PUTFH_RACE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NFS4_PUTFH_RACE_SEED: %v", err)
		}
		seed = v
	}
	perCreator := 1000
	if testing.Short() {
		perCreator = 300
	}
	if s := os.Getenv("NFS4_PUTFH_RACE_OPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("NFS4_PUTFH_RACE_OPS: %q", s)
		}
		perCreator = v
	}
	t.Logf("seed %d (NFS4_PUTFH_RACE_SEED), %d compounds per creator", seed, perCreator)
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	ts := startServer(t)
	setup := ts.session(t, 1, "putfhrace-setup")
	const slots, creators, churners = 4, 4, 2

	// hs holds every directory handle ever created; dead the ones
	// answered with NFS4ERR_STALE.
	var mu sync.Mutex
	var hs [][]byte
	dead := map[string]time.Time{} // when a STALE answer was received
	addHandle := func(h []byte) {
		mu.Lock()
		hs = append(hs, slices.Clone(h))
		mu.Unlock()
	}
	pickHandle := func(rng *rand.Rand) []byte {
		mu.Lock()
		defer mu.Unlock()
		// Mostly recent handles (likely alive), sometimes any.
		if n := len(hs); n > 2*slots && rng.IntN(4) > 0 {
			return hs[n-1-rng.IntN(2*slots)]
		}
		return hs[rng.IntN(len(hs))]
	}
	hist := map[string][]string{}
	var events []string // churners' results, for failure reports
	sawStatus := func(h []byte, st nfsv4.Nfsstat4, sent, got time.Time, ev string) error {
		mu.Lock()
		defer mu.Unlock()
		hist[string(h)] = append(hist[string(h)], fmt.Sprintf("%s %s: %v", time.Now().Format("05.000000"), ev, st))
		switch st {
		case nfsv4.NFS4ERR_STALE:
			if d, ok := dead[string(h)]; !ok || got.Before(d) {
				dead[string(h)] = got
			}
		case nfsv4.NFS4_OK:
			// Only a compound sent after a STALE answer arrived is
			// ordered after it.
			if d, ok := dead[string(h)]; ok && sent.After(d) {
				return fmt.Errorf("PUTFH of a handle once stale succeeded: %x\n%s\nchurners:\n%s", h, strings.Join(hist[string(h)], "\n"), strings.Join(events[max(0, len(events)-30):], "\n"))
			}
		default:
			return fmt.Errorf("PUTFH: %v", st)
		}
		return nil
	}
	for i := 0; i < slots; i++ {
		rep := okT(t)(setup.Compound(putroot(), mkdir(fmt.Sprintf("D%d", i)), getfh()))
		addHandle(fhOf(t, rep.Last()))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, creators+churners)
	var wg sync.WaitGroup

	// Churners: rmdir (fails unless empty), mkdir, rmdir+mkdir in one
	// run, rename one slot's directory over another's.
	for w := 0; w < churners; w++ {
		c := ts.session(t, 1, fmt.Sprintf("putfhrace-churn-%d", w))
		rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d := fmt.Sprintf("D%d", rng.IntN(slots))
				var ops []nfsv4.NfsArgop4
				switch rng.IntN(4) {
				case 0:
					ops = []nfsv4.NfsArgop4{putroot(), remove(d)}
				case 1:
					ops = []nfsv4.NfsArgop4{putroot(), mkdir(d), getfh()}
				case 2:
					ops = []nfsv4.NfsArgop4{putroot(), remove(d), putroot(), mkdir(d), getfh()}
				case 3:
					ops = []nfsv4.NfsArgop4{putroot(), savefh(), rename(d, fmt.Sprintf("D%d", rng.IntN(slots)))}
				}
				sent := time.Now().Format("05.000000")
				rep, err := c.Compound(ops...)
				if err != nil {
					errs <- fmt.Errorf("churner: %v", err)
					return
				}
				ev := fmt.Sprintf("%s-%s churner %d %s: %d results, %v", sent, time.Now().Format("05.000000"), w, describe(ops), len(rep.Results), rep.Status)
				if rep.Status == nfsv4.NFS4_OK {
					if _, ok := ops[len(ops)-1].(*nfsv4.NfsArgop4_OP_GETFH); ok {
						ev += fmt.Sprintf(" fh %x", fhOf(t, rep.Last())[:8])
					}
				}
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
				if rep.Status == nfsv4.NFS4_OK {
					if _, ok := ops[len(ops)-1].(*nfsv4.NfsArgop4_OP_GETFH); ok {
						addHandle(fhOf(t, rep.Last()))
					}
				}
			}
		}()
	}

	// Creators: each holds names (symbolic links and hard links to
	// them) named after itself, in the directories its results put
	// them in.
	where := make([]map[string]string, creators) // name -> directory handle
	done := map[string]*atomic.Int64{"create": {}, "remove": {}, "rename": {}, "link": {}}
	var cwg sync.WaitGroup
	for w := 0; w < creators; w++ {
		c := ts.session(t, 1, fmt.Sprintf("putfhrace-create-%d", w))
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		live := map[string]string{}
		where[w] = live
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			next := 0
			newName := func() string {
				next++
				return fmt.Sprintf("c%d-%d", w, next)
			}
			type step struct {
				first, last int    // op indices
				kind        string // create, remove, rename, link
				name, to    string
				fh          []byte // the directory the name ends up in
				putfhs      []int  // indices of PUTFH ops, with their handles
				hs          [][]byte
			}
			// apply records in names (name -> directory handle) where
			// step s leaves its names.
			apply := func(names map[string]string, s step) {
				switch s.kind {
				case "create":
					names[s.name] = string(s.fh)
				case "remove":
					delete(names, s.name)
				case "rename":
					delete(names, s.name)
					names[s.to] = string(s.fh)
				case "link":
					names[s.to] = string(s.fh)
				}
			}
			for i := 0; i < perCreator; i++ {
				var ops []nfsv4.NfsArgop4
				var steps []step
				pending := maps.Clone(live)
				put := func(s *step, h []byte) {
					s.putfhs = append(s.putfhs, len(ops))
					s.hs = append(s.hs, h)
					ops = append(ops, putfh(h))
				}
				for k := 1 + rng.IntN(4); k > 0; k-- {
					s := step{first: len(ops)}
					kind := rng.IntN(4)
					if len(pending) == 0 {
						kind = 0
					} else if len(pending) >= 3 && kind == 0 {
						kind = 1
					}
					switch kind {
					case 0:
						s.kind, s.name, s.fh = "create", newName(), pickHandle(rng)
						put(&s, s.fh)
						ops = append(ops, symlink(s.name, "t"))
					case 1:
						s.kind, s.name = "remove", anyLiveOf(pending, rng)
						put(&s, []byte(pending[s.name]))
						ops = append(ops, remove(s.name))
					case 2:
						s.kind, s.name, s.to, s.fh = "rename", anyLiveOf(pending, rng), newName(), pickHandle(rng)
						put(&s, []byte(pending[s.name]))
						ops = append(ops, savefh())
						put(&s, s.fh)
						ops = append(ops, rename(s.name, s.to))
					case 3:
						s.kind, s.name, s.to, s.fh = "link", anyLiveOf(pending, rng), newName(), pickHandle(rng)
						put(&s, []byte(pending[s.name]))
						ops = append(ops, lookup(s.name), savefh())
						put(&s, s.fh)
						ops = append(ops, link(s.to))
					}
					s.last = len(ops) - 1
					apply(pending, s) // later steps plan with this one done
					steps = append(steps, s)
				}
				sent := time.Now()
				rep, err := c.Compound(ops...)
				got := time.Now()
				if err != nil {
					errs <- fmt.Errorf("creator %d: %v", w, err)
					return
				}
				for _, s := range steps {
					if s.first >= len(rep.Results) {
						break
					}
					failed := false
					for j, at := range s.putfhs {
						if at >= len(rep.Results) {
							break
						}
						st := opStatus(rep, at)
						if err := sawStatus(s.hs[j], st, sent, got, fmt.Sprintf("creator %d compound %d %s %s op %d/%d", w, i, s.kind, s.name, at, len(ops))); err != nil {
							errs <- fmt.Errorf("seed %d creator %d compound %d %s %s: %v", seed, w, i, s.kind, s.name, err)
							return
						}
						if st != nfsv4.NFS4_OK && j == 0 && s.kind != "create" {
							errs <- fmt.Errorf("seed %d creator %d compound %d %s %s: the directory holding it is stale", seed, w, i, s.kind, s.name)
							return
						}
						failed = failed || st != nfsv4.NFS4_OK
					}
					if failed {
						break
					}
					if s.last >= len(rep.Results) {
						errs <- fmt.Errorf("seed %d creator %d compound %d: %d results, status %v", seed, w, i, len(rep.Results), rep.Status)
						return
					}
					st := opStatus(rep, s.last)
					if st != nfsv4.NFS4_OK {
						// The target directory went away after its
						// PUTFH (outside a grouped run).
						if s.kind != "remove" && (st == nfsv4.NFS4ERR_STALE || st == nfsv4.NFS4ERR_NOENT) {
							break
						}
						errs <- fmt.Errorf("seed %d creator %d compound %d %s %s: %v", seed, w, i, s.kind, s.name, st)
						return
					}
					done[s.kind].Add(1)
					apply(live, s)
				}
				if rep.Status == nfsv4.NFS4_OK && len(rep.Results) != len(ops) {
					errs <- fmt.Errorf("seed %d creator %d compound %d: OK with %d of %d results", seed, w, i, len(rep.Results), len(ops))
					return
				}
			}
		}()
	}
	cwg.Wait()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every handle: stale ones hold no creator's name, live ones
	// exactly the creators' names put there.
	want := map[string][]string{}
	for _, live := range where {
		for n, h := range live {
			want[h] = append(want[h], n)
		}
	}
	stale, alive := 0, 0
	for _, h := range hs {
		rep, err := setup.Compound(putfh(h), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 1 << 20, Dircount: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		switch rep.Status {
		case nfsv4.NFS4ERR_STALE:
			stale++
		case nfsv4.NFS4_OK:
			alive++
			if _, ok := dead[string(h)]; ok {
				t.Errorf("seed %d: a handle seen stale is alive again", seed)
			}
			ok := rep.Last().(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
			for e := ok.Reply.Entries; e != nil; e = e.Nextentry {
				if strings.HasPrefix(e.Name, "c") {
					got = append(got, e.Name)
				}
			}
		default:
			t.Fatalf("seed %d: PUTFH+READDIR: %v", seed, rep.Status)
		}
		w := want[string(h)]
		delete(want, string(h))
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("seed %d: directory (stale: %v) holds %q, the creators' results put %q there", seed, rep.Status == nfsv4.NFS4ERR_STALE, got, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("seed %d: names in unknown directories: %v", seed, want)
	}
	t.Logf("%d directory handles: %d stale, %d alive; done: %d creates, %d removes, %d renames, %d links",
		len(hs), stale, alive, done["create"].Load(), done["remove"].Load(), done["rename"].Load(), done["link"].Load())
	rep, err := ts.eng.FS.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("seed %d: Check: %v", seed, rep.Problems)
	}
}

func anyLiveOf(m map[string]string, rng *rand.Rand) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names[rng.IntN(len(names))]
}

// opStatus is the status of operation i of a plain compound's reply,
// which ends with the first failing operation.
func opStatus(rep *testclient.Reply, i int) nfsv4.Nfsstat4 {
	if i == len(rep.Results)-1 {
		return rep.Status
	}
	return nfsv4.NFS4_OK
}

func describe(ops []nfsv4.NfsArgop4) string {
	var b strings.Builder
	for _, op := range ops {
		switch a := op.(type) {
		case *nfsv4.NfsArgop4_OP_REMOVE:
			fmt.Fprintf(&b, "REMOVE %s; ", a.Opremove.Target)
		case *nfsv4.NfsArgop4_OP_CREATE:
			fmt.Fprintf(&b, "MKDIR %s; ", a.Opcreate.Objname)
		case *nfsv4.NfsArgop4_OP_RENAME:
			fmt.Fprintf(&b, "RENAME %s %s; ", a.Oprename.Oldname, a.Oprename.Newname)
		}
	}
	return b.String()
}
