package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// libnfs speaks NFSv4.0 only; its URL is nfs://HOST//PATH?version=4&nfsport=PORT.
func libnfsURL(addr, path string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("nfs://%s/%s?version=4&nfsport=%s", host, path, port)
}

func runLibnfs(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// TestLibnfsInterop drives the server with Debian's libnfs-utils, an
// independent NFSv4.0 client: upload with nfs-cp, list with nfs-ls -R,
// read back with nfs-cat and nfs-cp, byte for byte.
func TestLibnfsInterop(t *testing.T) {
	for _, bin := range []string{"nfs-ls", "nfs-cp", "nfs-cat"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (apt-get install -y libnfs-utils): skipping the libnfs interop test", bin)
		}
	}
	ts := startServer(t)
	c := ts.session(t, 1, "setup")
	okT(t)(c.Compound(putroot(), mkdir("docs"), mkdir("deep")))
	small := []byte("hello from txnfs\n")
	writeFile(t, c, "hello.txt", small)

	tmp := t.TempDir()
	big := make([]byte, 3<<20+12345)
	rand.Read(big)
	// Upload the big file with our client (libnfs 4.0.0's NFSv4 writes of
	// more than a few bytes fail inside the client before reaching the
	// wire), and a small one with nfs-cp.
	for off := 0; off < len(big); off += 1 << 20 {
		end := min(off+1<<20, len(big))
		okT(t)(c.Compound(putroot(), lookup("docs"), openCreate(c, "big.bin"), write(current, uint64(off), big[off:end]), closeOp(current)))
	}
	local := filepath.Join(tmp, "up.txt")
	if err := os.WriteFile(local, []byte("up"), 0o644); err != nil {
		t.Fatal(err)
	}
	runLibnfs(t, "nfs-cp", local, libnfsURL(ts.addr, "/docs/up.txt"))
	rep := okT(t)(c.Compound(putroot(), lookup("docs"), lookup("up.txt"), read(anon, 0, 100)))
	if d, _ := readData(t, rep.Results[3]); string(d) != "up" {
		t.Fatalf("nfs-cp upload wrote %q", d)
	}

	if got := runLibnfs(t, "nfs-cat", libnfsURL(ts.addr, "/hello.txt")); got != string(small) {
		t.Fatalf("nfs-cat: %q", got)
	}
	back := filepath.Join(tmp, "back.bin")
	runLibnfs(t, "nfs-cp", libnfsURL(ts.addr, "/docs/big.bin"), back)
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("round trip through libnfs differs: %d bytes, want %d", len(got), len(big))
	}
	ls := runLibnfs(t, "nfs-ls", "-R", libnfsURL(ts.addr, "/"))
	for _, want := range []string{"hello.txt", "docs", "big.bin", "deep"} {
		if !strings.Contains(ls, want) {
			t.Fatalf("nfs-ls -R lacks %s:\n%s", want, ls)
		}
	}
	if !strings.Contains(ls, fmt.Sprint(len(big))) {
		t.Fatalf("nfs-ls -R does not show size %d:\n%s", len(big), ls)
	}
}
