package vnfs_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/txnfs/txnfs/internal/latencyproxy"
	"github.com/txnfs/txnfs/vnfs"
)

// TestLostReplies loses a reply in every vector call (the proxy forwards
// the request, drops the reply and resets the connection, with up to
// eight pipelined COMPOUNDs in flight on it): exclusive creates with
// writes, mkdirs, renames and removes must come back from the server's
// reply cache (sa_cachethis) and reads be run again, so every call
// succeeds and leaves exactly one effect per item. Against Ganesha this
// failed with ErrUncertain before the client set sa_cachethis.
func TestLostReplies(t *testing.T) {
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			px, err := latencyproxy.New(p.Addr, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			f, err := vnfs.Dial(ctx, vnfs.Config{Addr: px.Addr(), Root: p.Root})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			u := vnfs.Unordered(f)
			dir := fmt.Sprintf("/lost%d", seq.Add(1))
			const nDirs, nFiles = 20, 300
			drop := func(what string, call func() (int, error), want int) {
				t.Helper()
				px.DropNextReply()
				n, err := call()
				if err != nil || n != want {
					t.Fatalf("%s with a lost reply: %d of %d, %v", what, n, want, err)
				}
			}
			mk := []vnfs.MkdirItem{{Path: dir}}
			for i := 0; i < nDirs; i++ {
				mk = append(mk, vnfs.MkdirItem{Path: fmt.Sprintf("%s/d%d", dir, i)})
			}
			drop("mkdir", func() (int, error) { return f.VMkdir(ctx, mk) }, len(mk))
			data := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i*37) }
			var ws []vnfs.IO
			for i := 0; i < nFiles; i++ {
				ws = append(ws, vnfs.IO{File: vnfs.P(fmt.Sprintf("%s/d%d/f%d", dir, i%nDirs, i)), Data: data(i),
					Flags: vnfs.Create | vnfs.Exclusive})
			}
			drop("exclusive create+write", func() (int, error) { return u.VWrite(ctx, ws) }, nFiles)
			var rn []vnfs.RenameItem
			for i := 0; i < nFiles; i++ {
				rn = append(rn, vnfs.RenameItem{Old: fmt.Sprintf("%s/d%d/f%d", dir, i%nDirs, i), New: fmt.Sprintf("%s/d%d/g%d", dir, i%nDirs, i)})
			}
			drop("rename", func() (int, error) { return f.VRename(ctx, rn) }, nFiles)
			var rs []vnfs.IO
			for i := 0; i < nFiles; i++ {
				rs = append(rs, vnfs.IO{File: vnfs.P(rn[i].New), Data: make([]byte, 1000+i*37+10)})
			}
			drop("read", func() (int, error) { return f.VRead(ctx, rs) }, nFiles)
			for i, r := range rs {
				if !bytes.Equal(r.Data[:r.N], data(i)) {
					t.Fatalf("%s: read %d bytes, want %d", rn[i].New, r.N, len(data(i)))
				}
			}
			var rm []string
			for i := 0; i < nFiles; i++ {
				rm = append(rm, rn[i].New)
			}
			drop("remove files", func() (int, error) { return u.VRemove(ctx, rm) }, nFiles)
			rm = rm[:0]
			for i := nDirs - 1; i >= 0; i-- {
				rm = append(rm, mk[1+i].Path)
			}
			rm = append(rm, dir)
			drop("remove dirs", func() (int, error) { return f.VRemove(ctx, rm) }, len(rm))
			if _, err := vnfs.Stat(ctx, f, dir); err == nil {
				t.Fatalf("%s still exists", dir)
			}
		})
	}
}

// TestDialBadRoot: a root that does not resolve fails Dial with the path
// and the server's reason, whether the server takes the operation-cap
// probe (txnfs) or refuses it and is searched (Ganesha); so does a root
// that is a file.
func TestDialBadRoot(t *testing.T) {
	ctx := context.Background()
	for _, p := range peers {
		t.Run(p.Name, func(t *testing.T) {
			f, err := vnfs.Dial(ctx, vnfs.Config{Addr: p.Addr, Root: p.Root})
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("/badroot%d", seq.Add(1))
			if err := vnfs.WriteFile(ctx, f, name, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, c := range []struct{ root, want string }{
				{p.Root + "/no/such/dir", "NOENT"},
				{p.Root + name, "not a directory"},
			} {
				g, err := vnfs.Dial(ctx, vnfs.Config{Addr: p.Addr, Root: c.root})
				if err == nil {
					g.Close()
					t.Fatalf("Dial with root %q succeeded", c.root)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "root") {
					t.Errorf("root %q: %v, want %q", c.root, err, c.want)
				}
			}
		})
	}
}
