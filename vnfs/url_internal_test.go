package vnfs

import (
	"context"
	"net"
	"path"
	"strings"
	"testing"
	"time"
)

// TestParseURL: URL parts that Resolve used to drop silently (a query,
// a fragment: "rm nfs://h/dir/f#1" removed /dir/f), ports that only
// failed at dial time with a misleading message, and an IPv6 literal
// without a port ("[[::1]]:2049").
func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url, host, path, err string
	}{
		{"nfs://127.0.0.1:2050/a/b", "127.0.0.1:2050", "/a/b", ""},
		{"nfs://127.0.0.1", "127.0.0.1:2049", "/", ""},
		{"nfs://h:7/", "h:7", "/", ""},
		{"nfs://[::1]/x", "[::1]:2049", "/x", ""},
		{"nfs://[::1]:2050/x", "[::1]:2050", "/x", ""},
		{"nfs://h/a/../../b", "h:2049", "/b", ""},
		{"nfs://h/a b/%23c%3F", "h:2049", "/a b/#c?", ""},
		{"nfs://h/x?y=1", "", "", "a query is not supported"},
		{"nfs://h/x?", "", "", "a query is not supported"},
		{"nfs://h/x#1", "", "", "write '#' in a name as %23"},
		{"nfs://h/x#", "", "", "write '#' in a name as %23"},
		{"nfs://u@h/x", "", "", "user information"},
		{"nfs://h:/x", "", "", "empty port"},
		{"nfs://h:0/x", "", "", `port "0" is not in 1-65535`},
		{"nfs://h:99999/x", "", "", `port "99999" is not in 1-65535`},
		{"nfs://h:x/", "", "", "invalid port"},
		{"nfs:///x", "", "", "no host"},
		{"nfs://:2049/x", "", "", "no host"},
		{"nfs://h/%zz", "", "", `invalid URL escape "%zz"`},
		{"nfs://]/x", "", "", `bad host "]"`}, // FuzzParseURL
	} {
		host, p, err := parseURL(c.url)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), c.url) {
				t.Errorf("%s: err %v, want one naming the URL and %q", c.url, err, c.err)
			}
			continue
		}
		if err != nil || host != c.host || p != c.path {
			t.Errorf("%s: %q %q %v, want %q %q", c.url, host, p, err, c.host, c.path)
		}
	}
}

// TestResolveSilentServer: a server that accepts connections and never
// answers made every tool hang until interrupted.
func TestResolveSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // read nothing, answer nothing
		}
	}()
	m := &Mounts{DialTimeout: 300 * time.Millisecond}
	defer m.Close()
	arg := "nfs://" + l.Addr().String() + "/x"
	start := time.Now()
	// The test's own bound, so that a regression fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = m.Resolve(ctx, arg)
	if err == nil || !strings.Contains(err.Error(), "did not answer within 300ms") || !strings.HasPrefix(err.Error(), arg+": ") {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

// FuzzParseURL: parseURL never panics; what it accepts dials a valid
// host:port and names a clean absolute path.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"nfs://h/x", "nfs://[::1]:2049/a/../b", "nfs://h:0/", "nfs://h/%2F#x", "nfs://u@h/?q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, p, err := parseURL(s)
		if err != nil {
			return
		}
		if _, port, err := net.SplitHostPort(host); err != nil || port == "" || port == "0" {
			t.Fatalf("%q: host %q", s, host)
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			t.Fatalf("%q: path %q", s, p)
		}
	})
}
