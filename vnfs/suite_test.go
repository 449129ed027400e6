package vnfs_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/txnfs/txnfs/internal/nfspeers"
	"github.com/txnfs/txnfs/vnfs"
)

// The same suite runs against NFS-Ganesha, the txnfs server, the local
// file system (POSIX fallback) and the scalar baseline client.

var peers []*nfspeers.Peer

func TestMain(m *testing.M) {
	os.Exit(func() int {
		work, err := os.MkdirTemp("", "vnfs-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(work)
		ctx := context.Background()
		if os.Getenv("VNFS_NO_GANESHA") == "" {
			if p, err := nfspeers.StartGanesha(ctx, work+"/g"); err != nil {
				fmt.Fprintf(os.Stderr, "vnfs tests: skipping NFS-Ganesha: %v\n", err)
			} else {
				defer p.Stop()
				peers = append(peers, p)
			}
		}
		p, err := nfspeers.StartTxnfs(ctx, work+"/t", nil)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vnfs tests: txnfs server: %v\n", err)
			return 1
		}
		defer p.Stop()
		peers = append(peers, p)
		return m.Run()
	}())
}

// env is one file system under test.
type env struct {
	name   string
	fs     vnfs.FS
	dir    string // a fresh directory for the test
	peer   *nfspeers.Peer
	local  string // for local: the absolute root
	txn    bool   // the FS supports transactions
	nfs    bool
	scalar bool
}

func (e *env) stats() vnfs.Stats {
	if s, ok := e.fs.(vnfs.StatsFS); ok {
		return s.Stats()
	}
	return vnfs.Stats{}
}

var seq atomic.Int64

type suiteOpts struct {
	scalar bool // also run the scalar baseline
	only   string
	cfg    func(*vnfs.Config)
}

// forEach runs fn once per file system.
func forEach(t *testing.T, fn func(t *testing.T, e *env), opts ...suiteOpts) {
	var o suiteOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx := context.Background()
	type variant struct {
		peer   *nfspeers.Peer
		scalar bool
	}
	var vs []variant
	for _, p := range peers {
		vs = append(vs, variant{peer: p})
		if o.scalar {
			vs = append(vs, variant{peer: p, scalar: true})
		}
	}
	for _, v := range vs {
		name := v.peer.Name
		if v.scalar {
			name += "-scalar"
		}
		t.Run(name, func(t *testing.T) {
			cfg := vnfs.Config{Addr: v.peer.Addr, Root: v.peer.Root, Scalar: v.scalar}
			if os.Getenv("VNFS_TEST_CACHE") != "" {
				cfg.Cache = 64 << 20 // the whole suite with the data cache
			}
			if o.cfg != nil {
				o.cfg(&cfg)
			}
			f, err := vnfs.Dial(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := f.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			dir := fmt.Sprintf("/t%d", seq.Add(1))
			if err := vnfs.Mkdir(ctx, f, dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fn(t, &env{name: name, fs: f, dir: dir, peer: v.peer, txn: v.peer.Txn && !v.scalar, nfs: true, scalar: v.scalar})
		})
	}
	t.Run("local", func(t *testing.T) {
		root := t.TempDir()
		f := vnfs.Local(root)
		defer f.Close()
		dir := fmt.Sprintf("/t%d", seq.Add(1))
		if err := os.Mkdir(root+dir, 0o755); err != nil {
			t.Fatal(err)
		}
		fn(t, &env{name: "local", fs: f, dir: dir, local: root})
	})
}
