package vnfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnsureDirectory makes sure dir and all its ancestors exist (vNFS
// ensure_directory): one VGetAttrs finds the first missing ancestor, one
// VMkdir creates the rest. A non-directory in the way is ENOTDIR.
func EnsureDirectory(ctx context.Context, f FS, dir string, mode uint32) error {
	c, err := cleanPath(dir)
	if err != nil {
		return err
	}
	if c == "" {
		return nil
	}
	comps := strings.Split(c, "/")
	items := make([]AttrItem, len(comps))
	for i := range comps {
		items[i] = AttrItem{File: P(strings.Join(comps[:i+1], "/")), Mask: AttrType}
	}
	k, err := f.VGetAttrs(ctx, items)
	for i := 0; i < k; i++ {
		if items[i].Attr.Type != TypeDir {
			return &Error{Op: "mkdir", Index: i, Path: items[i].File.Path, Err: syscall.ENOTDIR}
		}
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mk := make([]MkdirItem, 0, len(comps)-k)
	for i := k; i < len(comps); i++ {
		mk = append(mk, MkdirItem{Path: items[i].File.Path, Mode: mode})
	}
	if _, err := f.VMkdir(ctx, mk); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// RemoveRecursive removes paths and everything below them (vNFS
// rm_recursive): one recursive VListDir, unordered VRemoves of the files,
// and one VRemove of the directories, deepest first. A missing path is an
// error (fs.ErrNotExist), as with rm -r.
//
// Files are removed while the listing goes on: whenever a level of the
// trees has been listed completely and at least earlyRemove files are
// pending, they are handed to an unordered VRemove that runs while the
// next levels are listed, so the removals overlap the listing's
// depth-many round trips. Only completely listed levels are removed early:
// removing a directory's entries while its READDIR cookies are still in
// use could make a server skip entries. The scalar baseline removes after
// the listing, one call at a time, like rm(1).
func RemoveRecursive(ctx context.Context, f FS, paths ...string) error {
	items := make([]AttrItem, len(paths))
	for i, p := range paths {
		items[i] = AttrItem{File: P(p), Mask: AttrType}
	}
	if _, err := f.VGetAttrs(ctx, items); err != nil {
		return err
	}
	var files, dirs, tops []string
	var roots []string
	for i, p := range paths {
		if items[i].Attr.Type == TypeDir {
			roots = append(roots, p)
			tops = append(tops, p)
		} else {
			files = append(files, p)
		}
	}
	_, scalar := f.(*scalarFS)
	rmFiles := Unordered(f)
	var (
		mu    sync.Mutex
		rmErr error
		wg    sync.WaitGroup
	)
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return rmErr
	}
	jobs := make(chan []string, 64)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for batch := range jobs {
			if failed() != nil {
				continue
			}
			if _, err := rmFiles.VRemove(ctx, batch); err != nil {
				mu.Lock()
				if rmErr == nil {
					rmErr = err
				}
				mu.Unlock()
			}
		}
	}()
	flush := func() {
		if len(files) > 0 {
			jobs <- files
			files = nil
		}
	}
	var err error
	if len(roots) > 0 {
		depth := 0
		err = f.VListDir(ctx, roots, ListOptions{Recursive: true}, func(e DirEntry) error {
			if e.Depth > depth {
				// Every directory above e.Depth is listed.
				depth = e.Depth
				if !scalar && len(files) >= earlyRemove {
					flush()
				}
				if err := failed(); err != nil {
					return err
				}
			}
			if e.Attr.Type == TypeDir {
				dirs = append(dirs, e.Path())
			} else {
				files = append(files, e.Path())
			}
			return nil
		})
	}
	if err == nil {
		flush()
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		err = failed()
	}
	if err != nil {
		return err
	}
	// Directories in order, breadth-first reversed: children before
	// parents.
	rm := make([]string, 0, len(dirs)+len(tops))
	for i := len(dirs) - 1; i >= 0; i-- {
		rm = append(rm, dirs[i])
	}
	for i := len(tops) - 1; i >= 0; i-- {
		rm = append(rm, tops[i])
	}
	_, err = f.VRemove(ctx, rm)
	return err
}

// earlyRemove is the fewest listed files RemoveRecursive removes while
// it goes on listing (about one COMPOUND's worth).
const earlyRemove = 256

// ReadFile reads a whole file (one round trip for files up to 256 KiB).
func ReadFile(ctx context.Context, f FS, p string) ([]byte, error) {
	buf := make([]byte, 256<<10)
	var out []byte
	off := uint64(0)
	for {
		ios := []IO{{File: P(p), Offset: off, Data: buf}}
		if _, err := f.VRead(ctx, ios); err != nil {
			return nil, err
		}
		out = append(out, buf[:ios[0].N]...)
		off += uint64(ios[0].N)
		if ios[0].EOF || ios[0].N == 0 {
			return out, nil
		}
		if len(buf) < 16<<20 {
			buf = make([]byte, 4*len(buf))
		}
	}
}

// WriteFile creates or truncates p and writes data (stable).
func WriteFile(ctx context.Context, f FS, p string, data []byte, mode uint32) error {
	_, err := f.VWrite(ctx, []IO{{File: P(p), Data: data, Flags: Create | Truncate | Stable, Mode: mode}})
	return err
}

// AppendFile appends data to p, creating it if needed.
func AppendFile(ctx context.Context, f FS, p string, data []byte) error {
	_, err := f.VWrite(ctx, []IO{{File: P(p), Offset: AppendOffset, Data: data, Flags: Create}})
	return err
}

// Stat returns the attributes of p (not following a final symlink).
func Stat(ctx context.Context, f FS, p string) (Attr, error) {
	it := []AttrItem{{File: P(p), Mask: AttrStat}}
	_, err := f.VGetAttrs(ctx, it)
	return it[0].Attr, err
}

// Mkdir creates one directory.
func Mkdir(ctx context.Context, f FS, p string, mode uint32) error {
	_, err := f.VMkdir(ctx, []MkdirItem{{Path: p, Mode: mode}})
	return err
}

// Remove removes one file or empty directory.
func Remove(ctx context.Context, f FS, p string) error {
	_, err := f.VRemove(ctx, []string{p})
	return err
}

// Rename renames one object.
func Rename(ctx context.Context, f FS, oldPath, newPath string) error {
	_, err := f.VRename(ctx, []RenameItem{{Old: oldPath, New: newPath}})
	return err
}

// Symlink creates one symbolic link.
func Symlink(ctx context.Context, f FS, target, p string) error {
	_, err := f.VSymlink(ctx, []SymlinkItem{{Path: p, Target: target}})
	return err
}

// Readlink reads one symbolic link.
func Readlink(ctx context.Context, f FS, p string) (string, error) {
	it := []ReadlinkItem{{Path: p}}
	_, err := f.VReadlink(ctx, it)
	return it[0].Target, err
}

// Link creates one hard link.
func Link(ctx context.Context, f FS, oldPath, newPath string) error {
	_, err := f.VHardlink(ctx, []LinkItem{{Old: oldPath, New: newPath}})
	return err
}

// ReadDir lists one directory with the attributes in mask, sorted by name.
func ReadDir(ctx context.Context, f FS, dir string, mask AttrMask) ([]DirEntry, error) {
	var out []DirEntry
	err := f.VListDir(ctx, []string{dir}, ListOptions{Mask: mask}, func(e DirEntry) error {
		out = append(out, e)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// Mounts resolves tool arguments — local paths and nfs://HOST[:PORT]/path
// URLs — to an FS and a path in it, keeping one connection per server.
// It is safe for concurrent use; Close closes every connection.
type Mounts struct {
	// Config is the template for NFS connections (Addr is set per URL).
	Config Config
	// DialTimeout bounds how long Resolve waits for a new server to
	// accept a connection and a session (default DefaultDialTimeout):
	// a server that accepts connections and never answers gives an
	// error instead of a hang.
	DialTimeout time.Duration

	mu    sync.Mutex
	nfs   map[string]FS
	local FS
}

// Target is a resolved argument.
type Target struct {
	FS   FS
	Path string // path in FS
	// Server is "host:port" for NFS targets, "" for local ones.
	Server string
	// Arg is the argument as given.
	Arg string
	// Slash says that Arg ends with a slash (and is not the root):
	// POSIX tools then require a directory, or a symbolic link to one.
	Slash bool
}

// IsNFS reports whether arg is an nfs:// URL.
func IsNFS(arg string) bool { return strings.HasPrefix(arg, "nfs://") }

// Resolve returns the FS and path for arg.
func (m *Mounts) Resolve(ctx context.Context, arg string) (Target, error) {
	if arg == "" {
		// filepath.Abs would make it the working directory ("rm -r
		// $UNSET" removing it); POSIX tools answer ENOENT.
		return Target{}, fmt.Errorf("'': %w", syscall.ENOENT)
	}
	if !IsNFS(arg) {
		abs, err := filepath.Abs(arg)
		if err != nil {
			return Target{}, err
		}
		m.mu.Lock()
		if m.local == nil {
			m.local = Local("/")
		}
		l := m.local
		m.mu.Unlock()
		return Target{FS: l, Path: abs, Arg: arg, Slash: strings.HasSuffix(arg, "/") && abs != "/"}, nil
	}
	host, p, err := parseURL(arg)
	if err != nil {
		return Target{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nfs == nil {
		m.nfs = map[string]FS{}
	}
	f, ok := m.nfs[host]
	if !ok {
		cfg := m.Config
		cfg.Addr = host
		cfg.Root = "/"
		timeout := m.DialTimeout
		if timeout <= 0 {
			timeout = DefaultDialTimeout
		}
		dctx, cancel := context.WithTimeout(ctx, timeout)
		f, err = Dial(dctx, cfg)
		cancel()
		if err != nil {
			return Target{}, dialError(ctx, arg, host, timeout, err)
		}
		m.nfs[host] = f
	}
	return Target{FS: f, Path: p, Server: host, Arg: arg, Slash: strings.HasSuffix(arg, "/") && p != "/"}, nil
}

// DefaultDialTimeout is Mounts.DialTimeout's default.
const DefaultDialTimeout = 30 * time.Second

// parseURL splits an nfs://HOST[:PORT]/path URL into the server's
// host:port (port 2049 when omitted) and the cleaned path. It refuses
// what it would otherwise silently drop or misread: user information,
// a query or a fragment ('?' and '#' in names are written %3F and %23),
// an empty or out-of-range port.
func parseURL(arg string) (hostport, p string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("bad URL %q: %s", arg, why)
	}
	u, err := url.Parse(arg)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return bad(err.Error())
	}
	switch {
	case u.Scheme != "nfs" || u.Opaque != "":
		return bad("want nfs://HOST[:PORT]/path")
	case u.User != nil:
		return bad("user information is not supported")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("a query is not supported (write '?' in a name as %3F)")
	case u.Fragment != "" || strings.HasSuffix(arg, "#"):
		return bad("a fragment is not supported (write '#' in a name as %23)")
	case u.Hostname() == "":
		return bad("no host")
	}
	port := u.Port()
	if port == "" && strings.HasSuffix(u.Host, ":") {
		return bad("empty port")
	}
	if port == "" {
		port = "2049"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad(fmt.Sprintf("port %q is not in 1-65535", port))
	}
	hostport = net.JoinHostPort(u.Hostname(), port)
	if h, _, err := net.SplitHostPort(hostport); err != nil || strings.ContainsAny(h, "[]") {
		return bad(fmt.Sprintf("bad host %q", u.Hostname()))
	}
	return hostport, path.Clean("/" + u.Path), nil
}

// dialError explains a failed connection to the server of arg.
func dialError(ctx context.Context, arg, host string, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: connecting to %s: %w", arg, host, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %s did not answer within %v", arg, host, timeout)
	}
	return fmt.Errorf("%s: %w", arg, err)
}

// Stats sums the RPC counters of the NFS connections.
func (m *Mounts) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s Stats
	for _, f := range m.nfs {
		if x, ok := f.(StatsFS); ok {
			t := x.Stats()
			s.Compounds += t.Compounds
			s.Ops += t.Ops
			s.BytesIn += t.BytesIn
			s.BytesOut += t.BytesOut
		}
	}
	return s
}

// Close closes all connections.
func (m *Mounts) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, f := range m.nfs {
		errs = append(errs, f.Close())
	}
	m.nfs = nil
	if m.local != nil {
		m.local.Close()
		m.local = nil
	}
	return errors.Join(errs...)
}
