package fs_test

// The operation vocabulary of the model-based tests: each op is written
// once against the sys interface, which both the engine (a Txn) and the
// reference model implement, and reports a normalised result so that the
// two can be compared.

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/fs/internal/model"
	"pgregory.net/rapid"
)

// sys is the file-system surface an op runs against.
type sys interface {
	LookupPath(p string) (fs.Attr, error)
	GetAttr(ino fs.Ino) (fs.Attr, error)
	SetAttr(ino fs.Ino, sa fs.SetAttr) (fs.Attr, error)
	Create(dir fs.Ino, name string, req fs.CreateRequest) (fs.Attr, bool, error)
	Link(ino, dir fs.Ino, name string) (fs.Attr, error)
	Unlink(dir fs.Ino, name string) error
	Rmdir(dir fs.Ino, name string) error
	Remove(dir fs.Ino, name string) error
	Rename(srcDir fs.Ino, srcName string, dstDir fs.Ino, dstName string, fl fs.RenameFlags) error
	ReadDir(dir fs.Ino) ([]model.DirEntry, error)
	Readlink(ino fs.Ino) (string, error)
	Read(ino fs.Ino, off uint64, n int) ([]byte, bool, error)
	Write(ino fs.Ino, off uint64, data []byte) error
	Append(ino fs.Ino, data []byte) (uint64, error)
	YankPaste(src fs.Ino, off, n uint64, dst fs.Ino, dstOff uint64) (uint64, error)
	Punch(ino fs.Ino, off, n uint64) error
	Allocate(ino fs.Ino, off, n uint64) error
	Concat(dst fs.Ino, srcs []fs.Ino) error
	Copy(src, dst fs.Ino) error
	CopyRange(src fs.Ino, srcOff uint64, dst fs.Ino, dstOff, n uint64) (uint64, error)
	GetXattr(ino fs.Ino, name string) ([]byte, error)
	SetXattr(ino fs.Ino, name string, value []byte, fl fs.XattrFlags) error
	ListXattr(ino fs.Ino) ([]string, error)
	RemoveXattr(ino fs.Ino, name string) error
}

// modelSys is the reference model as a sys.
type modelSys struct{ *model.Model }

func (m modelSys) YankPaste(src fs.Ino, off, n uint64, dst fs.Ino, dstOff uint64) (uint64, error) {
	b, err := m.Yank(src, off, n)
	if err != nil {
		return 0, err
	}
	return uint64(len(b)), m.Paste(dst, dstOff, b)
}

// engineSys is an engine transaction as a sys.
type engineSys struct {
	ctx context.Context
	tx  *fs.Txn
}

func (e engineSys) LookupPath(p string) (fs.Attr, error) { return e.tx.LookupPath(e.ctx, p) }
func (e engineSys) GetAttr(ino fs.Ino) (fs.Attr, error)  { return e.tx.GetAttr(e.ctx, ino) }
func (e engineSys) SetAttr(ino fs.Ino, sa fs.SetAttr) (fs.Attr, error) {
	return e.tx.SetAttr(e.ctx, ino, sa)
}
func (e engineSys) Create(dir fs.Ino, name string, req fs.CreateRequest) (fs.Attr, bool, error) {
	return e.tx.Create(e.ctx, dir, name, req)
}
func (e engineSys) Link(ino, dir fs.Ino, name string) (fs.Attr, error) {
	return e.tx.Link(e.ctx, ino, dir, name)
}
func (e engineSys) Unlink(dir fs.Ino, name string) error { return e.tx.Unlink(e.ctx, dir, name) }
func (e engineSys) Rmdir(dir fs.Ino, name string) error  { return e.tx.Rmdir(e.ctx, dir, name) }
func (e engineSys) Remove(dir fs.Ino, name string) error { return e.tx.Remove(e.ctx, dir, name) }
func (e engineSys) Rename(sd fs.Ino, sn string, dd fs.Ino, dn string, fl fs.RenameFlags) error {
	return e.tx.Rename(e.ctx, sd, sn, dd, dn, fl)
}
func (e engineSys) ReadDir(dir fs.Ino) ([]model.DirEntry, error) {
	ents, err := readDirAll(e.ctx, e.tx, dir, 2)
	if err != nil {
		return nil, err
	}
	out := make([]model.DirEntry, len(ents))
	for i, de := range ents {
		out[i] = model.DirEntry{Name: de.Name, Type: de.Type}
	}
	return out, nil
}
func (e engineSys) Readlink(ino fs.Ino) (string, error) { return e.tx.Readlink(e.ctx, ino) }
func (e engineSys) Read(ino fs.Ino, off uint64, n int) ([]byte, bool, error) {
	buf := make([]byte, n)
	got, eof, err := e.tx.Read(e.ctx, ino, off, buf)
	if err != nil {
		return nil, false, err
	}
	return buf[:got], eof, nil
}
func (e engineSys) Write(ino fs.Ino, off uint64, data []byte) error {
	return e.tx.Write(e.ctx, ino, off, data)
}
func (e engineSys) Append(ino fs.Ino, data []byte) (uint64, error) {
	return e.tx.Append(e.ctx, ino, data)
}
func (e engineSys) YankPaste(src fs.Ino, off, n uint64, dst fs.Ino, dstOff uint64) (uint64, error) {
	s, err := e.tx.Yank(e.ctx, src, off, n)
	if err != nil {
		return 0, err
	}
	// Round-trip the slices through their encoding, as a client holding
	// them between requests would.
	b, err := s.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("Slices.MarshalBinary: %v", err)
	}
	var s2 fs.Slices
	if err := s2.UnmarshalBinary(b); err != nil {
		return 0, fmt.Errorf("Slices.UnmarshalBinary: %v", err)
	}
	if s2.Len() != s.Len() {
		return 0, fmt.Errorf("slices of %d bytes decode as %d", s.Len(), s2.Len())
	}
	return s.Len(), e.tx.Paste(e.ctx, dst, dstOff, s2)
}
func (e engineSys) Punch(ino fs.Ino, off, n uint64) error { return e.tx.Punch(e.ctx, ino, off, n) }
func (e engineSys) Allocate(ino fs.Ino, off, n uint64) error {
	return e.tx.Allocate(e.ctx, ino, off, n)
}
func (e engineSys) Concat(dst fs.Ino, srcs []fs.Ino) error { return e.tx.Concat(e.ctx, dst, srcs) }
func (e engineSys) Copy(src, dst fs.Ino) error             { return e.tx.Copy(e.ctx, src, dst) }
func (e engineSys) CopyRange(src fs.Ino, srcOff uint64, dst fs.Ino, dstOff, n uint64) (uint64, error) {
	return e.tx.CopyRange(e.ctx, src, srcOff, dst, dstOff, n)
}
func (e engineSys) GetXattr(ino fs.Ino, name string) ([]byte, error) {
	return e.tx.GetXattr(e.ctx, ino, name)
}
func (e engineSys) SetXattr(ino fs.Ino, name string, value []byte, fl fs.XattrFlags) error {
	return e.tx.SetXattr(e.ctx, ino, name, value, fl)
}
func (e engineSys) ListXattr(ino fs.Ino) ([]string, error) {
	names, err := e.tx.ListXattr(e.ctx, ino)
	sort.Strings(names)
	return names, err
}
func (e engineSys) RemoveXattr(ino fs.Ino, name string) error {
	return e.tx.RemoveXattr(e.ctx, ino, name)
}

// result is an op's normalised outcome. err and val must agree between
// engine and model; ver holds change counters, which only the model's own
// runs are compared on (to decide whether a replay must succeed).
type result struct {
	err, val, ver string
}

func (r result) String() string {
	if r.err != "" {
		return "error " + r.err
	}
	return "ok " + r.val
}

func errResult(err error) result { return result{err: errName(err)} }

func attrVal(a fs.Attr) string {
	return fmt.Sprintf("%v mode=%o nlink=%d size=%d uid=%d gid=%d rdev=%d", a.Type, a.Mode, a.Nlink, a.Size, a.Uid,
		a.Gid, a.Rdev)
}

func attrResult(a fs.Attr, err error) result {
	if err != nil {
		return errResult(err)
	}
	return result{val: attrVal(a), ver: fmt.Sprint(a.Change)}
}

// op is one operation of the model-based test.
type op interface {
	String() string
	run(s sys) result
}

func splitPath(p string) (dir, name string) {
	return path.Dir(p), path.Base(p)
}

// lookup resolves p; on failure it returns the result to report.
func lookup(s sys, p string) (fs.Attr, *result) {
	a, err := s.LookupPath(p)
	if err != nil {
		r := result{err: errName(err), val: "lookup " + p}
		return a, &r
	}
	return a, nil
}

// lookupVer resolves p and records the version of what it found.
func lookupVer(s sys, p string, ver *strings.Builder) (fs.Attr, *result) {
	a, r := lookup(s, p)
	if r == nil {
		fmt.Fprintf(ver, "%s@%d ", p, a.Change)
	}
	return a, r
}

type opCreate struct {
	path   string
	typ    fs.FileType
	mode   uint32
	target string
	excl   bool
}

func (o opCreate) String() string {
	return fmt.Sprintf("create %s %v mode=%o excl=%v target=%q", o.path, o.typ, o.mode, o.excl, o.target)
}
func (o opCreate) run(s sys) result {
	dp, name := splitPath(o.path)
	var ver strings.Builder
	d, r := lookupVer(s, dp, &ver)
	if r != nil {
		return *r
	}
	a, created, err := s.Create(d.Ino, name, fs.CreateRequest{Type: o.typ, Mode: o.mode, Target: o.target,
		Exclusive: o.excl, Rdev: 0})
	res := attrResult(a, err)
	res.val += fmt.Sprintf(" created=%v", created)
	res.ver += " " + ver.String()
	return res
}

type opLink struct{ src, dst string }

func (o opLink) String() string { return fmt.Sprintf("link %s %s", o.src, o.dst) }
func (o opLink) run(s sys) result {
	var ver strings.Builder
	a, r := lookupVer(s, o.src, &ver)
	if r != nil {
		return *r
	}
	dp, name := splitPath(o.dst)
	d, r := lookupVer(s, dp, &ver)
	if r != nil {
		return *r
	}
	res := attrResult(s.Link(a.Ino, d.Ino, name))
	res.ver += " " + ver.String()
	return res
}

type opRemove struct {
	path string
	kind string // unlink, rmdir, remove
}

func (o opRemove) String() string { return fmt.Sprintf("%s %s", o.kind, o.path) }
func (o opRemove) run(s sys) result {
	dp, name := splitPath(o.path)
	var ver strings.Builder
	d, r := lookupVer(s, dp, &ver)
	if r != nil {
		return *r
	}
	var err error
	switch o.kind {
	case "unlink":
		err = s.Unlink(d.Ino, name)
	case "rmdir":
		err = s.Rmdir(d.Ino, name)
	default:
		err = s.Remove(d.Ino, name)
	}
	return result{err: errName(err), ver: ver.String()}
}

type opRename struct {
	src, dst string
	fl       fs.RenameFlags
}

func (o opRename) String() string { return fmt.Sprintf("rename %s %s %+v", o.src, o.dst, o.fl) }
func (o opRename) run(s sys) result {
	sp, sn := splitPath(o.src)
	dp, dn := splitPath(o.dst)
	var ver strings.Builder
	sd, r := lookupVer(s, sp, &ver)
	if r != nil {
		return *r
	}
	dd, r := lookupVer(s, dp, &ver)
	if r != nil {
		return *r
	}
	err := s.Rename(sd.Ino, sn, dd.Ino, dn, o.fl)
	return result{err: errName(err), ver: ver.String()}
}

type opWrite struct {
	path string
	off  uint64
	seed byte
	n    int
}

func (o opWrite) String() string {
	return fmt.Sprintf("write %s off=%d n=%d seed=%d", o.path, o.off, o.n, o.seed)
}
func (o opWrite) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	return errResult(s.Write(a.Ino, o.off, pattern(o.seed, o.n)))
}

type opAppend struct {
	path string
	seed byte
	n    int
}

func (o opAppend) String() string { return fmt.Sprintf("append %s n=%d seed=%d", o.path, o.n, o.seed) }
func (o opAppend) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	off, err := s.Append(a.Ino, pattern(o.seed, o.n))
	if err != nil {
		return errResult(err)
	}
	return result{val: fmt.Sprintf("off=%d", off)}
}

type opSetAttr struct {
	path string
	sa   fs.SetAttr
	desc string
}

func (o opSetAttr) String() string { return fmt.Sprintf("setattr %s %s", o.path, o.desc) }
func (o opSetAttr) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	return attrResult(s.SetAttr(a.Ino, o.sa))
}

type opStat struct{ path string }

func (o opStat) String() string { return "stat " + o.path }
func (o opStat) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	return attrResult(s.GetAttr(a.Ino))
}

type opRead struct {
	path string
	off  uint64
	n    int
}

func (o opRead) String() string { return fmt.Sprintf("read %s off=%d n=%d", o.path, o.off, o.n) }
func (o opRead) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	b, eof, err := s.Read(a.Ino, o.off, o.n)
	if err != nil {
		return errResult(err)
	}
	return result{val: fmt.Sprintf("eof=%v %x", eof, b)}
}

type opReadDir struct{ path string }

func (o opReadDir) String() string { return "readdir " + o.path }
func (o opReadDir) run(s sys) result {
	var ver strings.Builder
	a, r := lookupVer(s, o.path, &ver)
	if r != nil {
		return *r
	}
	ents, err := s.ReadDir(a.Ino)
	if err != nil {
		return errResult(err)
	}
	return result{val: fmt.Sprint(ents), ver: ver.String()}
}

type opReadlink struct{ path string }

func (o opReadlink) String() string { return "readlink " + o.path }
func (o opReadlink) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	t, err := s.Readlink(a.Ino)
	if err != nil {
		return errResult(err)
	}
	return result{val: t}
}

type opYankPaste struct {
	src       string
	off, n    uint64
	dst       string
	dstOff    uint64
	roundTrip bool
}

func (o opYankPaste) String() string {
	return fmt.Sprintf("yank %s off=%d n=%d | paste %s off=%d", o.src, o.off, o.n, o.dst, o.dstOff)
}
func (o opYankPaste) run(s sys) result {
	a, r := lookup(s, o.src)
	if r != nil {
		return *r
	}
	d, r := lookup(s, o.dst)
	if r != nil {
		return *r
	}
	n, err := s.YankPaste(a.Ino, o.off, o.n, d.Ino, o.dstOff)
	if err != nil {
		return errResult(err)
	}
	return result{val: fmt.Sprintf("len=%d", n)}
}

type opRange struct {
	kind   string // punch, allocate
	path   string
	off, n uint64
}

func (o opRange) String() string { return fmt.Sprintf("%s %s off=%d n=%d", o.kind, o.path, o.off, o.n) }
func (o opRange) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	if o.kind == "punch" {
		return errResult(s.Punch(a.Ino, o.off, o.n))
	}
	return errResult(s.Allocate(a.Ino, o.off, o.n))
}

type opConcat struct {
	dst  string
	srcs []string
}

func (o opConcat) String() string { return fmt.Sprintf("concat %s <- %v", o.dst, o.srcs) }
func (o opConcat) run(s sys) result {
	d, r := lookup(s, o.dst)
	if r != nil {
		return *r
	}
	var inos []fs.Ino
	for _, p := range o.srcs {
		a, r := lookup(s, p)
		if r != nil {
			return *r
		}
		inos = append(inos, a.Ino)
	}
	return errResult(s.Concat(d.Ino, inos))
}

type opCopy struct{ src, dst string }

func (o opCopy) String() string { return fmt.Sprintf("copy %s -> %s", o.src, o.dst) }
func (o opCopy) run(s sys) result {
	a, r := lookup(s, o.src)
	if r != nil {
		return *r
	}
	d, r := lookup(s, o.dst)
	if r != nil {
		return *r
	}
	return errResult(s.Copy(a.Ino, d.Ino))
}

type opCopyRange struct {
	src       string
	srcOff    uint64
	dst       string
	dstOff, n uint64
}

func (o opCopyRange) String() string {
	return fmt.Sprintf("copyrange %s@%d -> %s@%d n=%d", o.src, o.srcOff, o.dst, o.dstOff, o.n)
}
func (o opCopyRange) run(s sys) result {
	a, r := lookup(s, o.src)
	if r != nil {
		return *r
	}
	d, r := lookup(s, o.dst)
	if r != nil {
		return *r
	}
	n, err := s.CopyRange(a.Ino, o.srcOff, d.Ino, o.dstOff, o.n)
	if err != nil {
		return errResult(err)
	}
	return result{val: fmt.Sprintf("n=%d", n)}
}

type opXattr struct {
	kind  string // set, get, remove, list
	path  string
	name  string
	value string
	fl    fs.XattrFlags
}

func (o opXattr) String() string {
	return fmt.Sprintf("xattr-%s %s %s=%q %+v", o.kind, o.path, o.name, o.value, o.fl)
}
func (o opXattr) run(s sys) result {
	var ver strings.Builder
	a, r := lookupVer(s, o.path, &ver)
	if r != nil {
		return *r
	}
	switch o.kind {
	case "set":
		return errResult(s.SetXattr(a.Ino, o.name, []byte(o.value), o.fl))
	case "get":
		v, err := s.GetXattr(a.Ino, o.name)
		if err != nil {
			return errResult(err)
		}
		return result{val: string(v)}
	case "remove":
		return errResult(s.RemoveXattr(a.Ino, o.name))
	default:
		names, err := s.ListXattr(a.Ino)
		if err != nil {
			return errResult(err)
		}
		return result{val: fmt.Sprint(names), ver: ver.String()}
	}
}

// Generators.

var (
	nameAlphabet = []string{"a", "b", "c", "d"}
	offsets      = []uint64{0, 0, 1, 7, 100, 4090, 4096, 9000, 70000}
	lengths      = []int{1, 3, 17, 300, 4096, 5000}
)

// genPath draws an existing path most of the time, else a random one.
func genPath(t *rapid.T, existing []string, label string) string {
	if len(existing) > 0 && rapid.IntRange(0, 9).Draw(t, label+"-existing") < 7 {
		return rapid.SampledFrom(existing).Draw(t, label)
	}
	depth := rapid.IntRange(1, 3).Draw(t, label+"-depth")
	p := ""
	for i := 0; i < depth; i++ {
		p += "/" + rapid.SampledFrom(nameAlphabet).Draw(t, label+"-name")
	}
	return p
}

// genNewPath draws a path in an existing directory most of the time.
func genNewPath(t *rapid.T, dirs, existing []string, label string) string {
	if rapid.IntRange(0, 9).Draw(t, label+"-indir") < 8 {
		d := rapid.SampledFrom(dirs).Draw(t, label+"-dir")
		return strings.TrimSuffix(d, "/") + "/" + rapid.SampledFrom(nameAlphabet).Draw(t, label+"-name")
	}
	return genPath(t, existing, label)
}

func genOff(t *rapid.T, label string) uint64 {
	return rapid.SampledFrom(offsets).Draw(t, label) + uint64(rapid.IntRange(0, 9).Draw(t, label+"+"))
}

func genLen(t *rapid.T, label string) int {
	return rapid.SampledFrom(lengths).Draw(t, label) + rapid.IntRange(0, 9).Draw(t, label+"+")
}

// treeInfo lists a model's paths for generators.
type treeInfo struct {
	all, dirs, files []string
}

func infoOf(m *model.Model) treeInfo {
	var ti treeInfo
	for _, e := range m.Snapshot() {
		ti.all = append(ti.all, e.Path)
		switch e.Type {
		case fs.TypeDirectory:
			ti.dirs = append(ti.dirs, e.Path)
		case fs.TypeRegular:
			ti.files = append(ti.files, e.Path)
		}
	}
	return ti
}

// genOp draws one transactional operation.
func genOp(t *rapid.T, ti treeInfo) op {
	any := func(l string) string { return genPath(t, ti.all, l) }
	file := func(l string) string {
		if len(ti.files) > 0 && rapid.IntRange(0, 9).Draw(t, l+"-f") < 8 {
			return rapid.SampledFrom(ti.files).Draw(t, l)
		}
		return any(l)
	}
	newPath := func(l string) string { return genNewPath(t, ti.dirs, ti.all, l) }
	kind := rapid.SampledFrom([]string{
		"create", "create", "mkdir", "mkdir", "symlink", "fifo", "link", "remove", "remove", "rename", "rename",
		"write", "write", "write", "truncate", "read", "stat", "readdir", "readlink", "chmod", "chown",
		"append", "yankpaste", "punch", "allocate", "concat", "copy", "copyrange", "xattr",
	}).Draw(t, "op")
	switch kind {
	case "create":
		return opCreate{path: newPath("path"), typ: fs.TypeRegular, mode: 0o644,
			excl: rapid.Bool().Draw(t, "excl")}
	case "mkdir":
		return opCreate{path: newPath("path"), typ: fs.TypeDirectory, mode: 0o755}
	case "symlink":
		return opCreate{path: newPath("path"), typ: fs.TypeSymlink, mode: 0o777,
			target: rapid.SampledFrom([]string{"a", "../b", "/x/y/z", strings.Repeat("t", 300)}).Draw(t, "target")}
	case "fifo":
		return opCreate{path: newPath("path"), typ: fs.TypeFIFO, mode: 0o600}
	case "link":
		return opLink{src: file("src"), dst: newPath("dst")}
	case "remove":
		return opRemove{path: any("path"), kind: rapid.SampledFrom([]string{"unlink", "rmdir", "remove"}).Draw(t, "kind")}
	case "rename":
		o := opRename{src: any("src"), dst: newPath("dst")}
		switch rapid.IntRange(0, 9).Draw(t, "flags") {
		case 0:
			o.fl.NoReplace = true
		case 1:
			o.fl.Exchange = true
		}
		if rapid.IntRange(0, 4).Draw(t, "dst-existing") == 0 {
			o.dst = any("dst2")
		}
		return o
	case "write":
		return opWrite{path: file("path"), off: genOff(t, "off"), seed: rapid.Byte().Draw(t, "seed"), n: genLen(t, "n")}
	case "truncate":
		size := genOff(t, "size")
		return opSetAttr{path: file("path"), sa: fs.SetAttr{Size: &size}, desc: fmt.Sprintf("size=%d", size)}
	case "read":
		return opRead{path: file("path"), off: genOff(t, "off"), n: genLen(t, "n")}
	case "stat":
		return opStat{path: any("path")}
	case "readdir":
		return opReadDir{path: genPath(t, ti.dirs, "path")}
	case "readlink":
		return opReadlink{path: any("path")}
	case "chmod":
		mode := rapid.SampledFrom([]uint32{0o644, 0o600, 0o755, 0o2755, 0o4755, 0o1777}).Draw(t, "mode")
		return opSetAttr{path: any("path"), sa: fs.SetAttr{Mode: &mode}, desc: fmt.Sprintf("mode=%o", mode)}
	case "chown":
		uid := uint32(rapid.IntRange(0, 2).Draw(t, "uid"))
		gid := uint32(rapid.IntRange(0, 2).Draw(t, "gid"))
		return opSetAttr{path: any("path"), sa: fs.SetAttr{Uid: &uid, Gid: &gid}, desc: fmt.Sprintf("uid=%d gid=%d", uid, gid)}
	case "append":
		return opAppend{path: file("path"), seed: rapid.Byte().Draw(t, "seed"), n: genLen(t, "n")}
	case "yankpaste":
		return opYankPaste{src: file("src"), off: genOff(t, "off"), n: uint64(genLen(t, "n")), dst: file("dst"),
			dstOff: genOff(t, "dstoff")}
	case "punch", "allocate":
		return opRange{kind: kind, path: file("path"), off: genOff(t, "off"), n: uint64(genLen(t, "n"))}
	case "concat":
		n := rapid.IntRange(1, 3).Draw(t, "nsrc")
		o := opConcat{dst: file("dst")}
		for i := 0; i < n; i++ {
			o.srcs = append(o.srcs, file("src"))
		}
		return o
	case "copy":
		return opCopy{src: file("src"), dst: file("dst")}
	case "copyrange":
		return opCopyRange{src: file("src"), srcOff: genOff(t, "srcoff"), dst: file("dst"), dstOff: genOff(t, "dstoff"),
			n: uint64(genLen(t, "n"))}
	default:
		o := opXattr{kind: rapid.SampledFrom([]string{"set", "set", "get", "remove", "list"}).Draw(t, "xkind"),
			path: any("path"), name: rapid.SampledFrom([]string{"user.a", "user.b"}).Draw(t, "xname"),
			value: rapid.SampledFrom([]string{"", "v1", "value-2"}).Draw(t, "xvalue")}
		switch rapid.IntRange(0, 5).Draw(t, "xflags") {
		case 0:
			o.fl.Create = true
		case 1:
			o.fl.Replace = true
		}
		return o
	}
}
