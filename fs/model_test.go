package fs_test

// The operation vocabulary of the model-based tests: each op is written
// once against the sys interface, which both the engine (a Txn) and the
// reference model implement, and reports a normalised result so that the
// two can be compared.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/txnfs/txnfs/fs"
	"github.com/txnfs/txnfs/fs/internal/model"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"

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
// engine and model. ver and pver are only compared between two runs of the
// model (to decide whether a replayed transaction must commit): ver holds
// the change counters and attributes of what the op's path lookups
// returned, pver those of the intermediate directories of the paths.
type result struct {
	err, val, ver, pver string
}

func (r result) String() string {
	if r.err != "" {
		return "error " + r.err
	}
	return "ok " + r.val
}

// recSys records what LookupPath returned, for result.ver and .pver.
type recSys struct {
	sys
	ver, pver strings.Builder
}

func (r *recSys) LookupPath(p string) (fs.Attr, error) {
	a, err := r.sys.LookupPath(p)
	fmt.Fprintf(&r.ver, "%s:%s@%d ", p, attrVal(a), a.Change)
	if m, ok := r.sys.(modelSys); ok {
		cur := ""
		for _, name := range strings.Split(p, "/") {
			if name == "" {
				continue
			}
			pa, err := m.LookupPath(cur + "/")
			if err != nil {
				break
			}
			fmt.Fprintf(&r.pver, "%s/:%s@%d ", cur, attrVal(pa), pa.Change)
			cur += "/" + name
		}
	}
	return a, err
}

// runOp runs o on s and fills in the result's versions.
func runOp(o op, s sys) result {
	if _, ok := o.(opSnapshot); ok {
		return o.run(s)
	}
	rs := &recSys{sys: s}
	r := o.run(rs)
	r.ver += " | " + rs.ver.String()
	r.pver = rs.pver.String()
	return r
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
	path  string
	seed  byte
	n     int
	atEnd bool // Txn.AppendAtEnd: no offset returned or logged
}

func (o opAppend) String() string {
	return fmt.Sprintf("append %s n=%d seed=%d at-end=%v", o.path, o.n, o.seed, o.atEnd)
}
func (o opAppend) run(s sys) result {
	a, r := lookup(s, o.path)
	if r != nil {
		return *r
	}
	if o.atEnd {
		if e, ok := s.(engineSys); ok {
			return errResult(e.tx.AppendAtEnd(e.ctx, a.Ino, pattern(o.seed, o.n)))
		}
		_, err := s.Append(a.Ino, pattern(o.seed, o.n))
		return errResult(err)
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
		return opAppend{path: file("path"), seed: rapid.Byte().Draw(t, "seed"), n: genLen(t, "n"), atEnd: rapid.Bool().Draw(t, "at-end")}
	case "yankpaste":
		if ok, _ := yankWorks(); !ok {
			return opStat{path: any("path")} // see TestYankPaste
		}
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
			path: any("path"), name: rapid.SampledFrom([]string{"user.a", "user.b", "trusted.t"}).Draw(t, "xname"),
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

// opSnapshot reads the whole tree inside a transaction (so the
// transaction's read set covers everything).
type opSnapshot struct{}

func (opSnapshot) String() string { return "snapshot" }
func (opSnapshot) run(s sys) result {
	switch s := s.(type) {
	case engineSys:
		snap, err := snapshotTxn(s.ctx, s.tx)
		if err != nil {
			return errResult(err)
		}
		return result{val: snapString(snap)}
	case modelSys:
		var ver strings.Builder
		for _, e := range s.Snapshot() {
			a, _ := s.LookupPath(e.Path)
			fmt.Fprintf(&ver, "%s@%d ", e.Path, a.Change)
		}
		return result{val: snapString(s.Snapshot()), ver: ver.String()}
	}
	panic("unknown sys")
}

func snapString(s model.Snapshot) string {
	var b strings.Builder
	for _, e := range s {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// The model-based test.

type loggedOp struct {
	op   op
	mres result // the model's result when the op ran
}

// openTxn is an explicit transaction of the test.
type openTxn struct {
	tx *fs.Txn
	// m is the transaction's view of the model: a clone of the committed
	// model taken at its first operation (when the engine's snapshot is
	// taken too); nil before.
	m    *model.Model
	base string // fingerprint of m when cloned
	log  []loggedOp
}

type harness struct {
	ctx       context.Context
	f         *testFS
	committed *model.Model
	txns      [2]*openTxn
	pins      []pinned
	kind      storeKind
}

type pinned struct{ eng, mod fs.Ino }

var errTestAbort = errors.New("test: abort the transaction")

// spuriousPathAborts counts aborts caused only by intermediate path
// components (reported by TestModel).
var spuriousPathAborts atomic.Int64

// modelStats counts what the model-based tests did.
var modelStats struct {
	ops, commits, conflicts atomic.Int64
	reusePuts               atomic.Uint64 // puts into recycled space
}

// fingerprint changes whenever a model changes.
func fingerprint(m *model.Model) string {
	var sum uint64
	for _, n := range m.Nodes {
		sum += n.Version
	}
	return fmt.Sprintf("%d/%d/%d", len(m.Nodes), m.NextIno, sum)
}

func sameResult(t *rapid.T, what string, o op, eng, mod result) {
	t.Helper()
	if eng.err != mod.err || eng.val != mod.val {
		t.Fatalf("%s %v:\nengine: %v\nmodel:  %v", what, o, eng, mod)
	}
}

func (h *harness) autocommit(t *rapid.T, abort bool) {
	o := genOp(t, infoOf(h.committed))
	var eres result
	runs := 0
	opts := fs.TxnOptions{NoSync: rapid.Bool().Draw(t, "nosync")}
	err := h.f.DoOpts(h.ctx, fs.RootCred, opts, func(tx *fs.Txn) error {
		runs++
		eres = runOp(o, engineSys{h.ctx, tx})
		if abort {
			return errTestAbort
		}
		return nil
	})
	m := h.committed
	if abort {
		m = m.Clone()
		if !errors.Is(err, errTestAbort) {
			t.Fatalf("Do returning an error: got %v", err)
		}
	} else if err != nil {
		t.Fatalf("Do %v: %v", o, err)
	}
	if runs != 1 {
		t.Fatalf("Do ran fn %d times without concurrency", runs)
	}
	mres := runOp(o, modelSys{m})
	t.Logf("do%s %v -> %v", map[bool]string{true: "-abort"}[abort], o, mres)
	sameResult(t, "do", o, eres, mres)
	modelStats.ops.Add(1)
}

func (h *harness) begin(t *rapid.T) {
	slot := rapid.IntRange(0, 1).Draw(t, "slot")
	if h.txns[slot] != nil {
		t.Skip("slot busy")
	}
	tx, err := h.f.Begin(h.ctx, fs.RootCred, fs.TxnOptions{NoSync: rapid.Bool().Draw(t, "nosync")})
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	h.txns[slot] = &openTxn{tx: tx}
	t.Logf("begin T%d", slot)
}

func (h *harness) pickTxn(t *rapid.T) (int, *openTxn) {
	var open []int
	for i, ot := range h.txns {
		if ot != nil {
			open = append(open, i)
		}
	}
	if len(open) == 0 {
		t.Skip("no open transaction")
	}
	slot := rapid.SampledFrom(open).Draw(t, "txn")
	return slot, h.txns[slot]
}

func (h *harness) txnOp(t *rapid.T, snapshot bool) {
	slot, ot := h.pickTxn(t)
	if ot.m == nil {
		ot.m = h.committed.Clone()
		ot.base = fingerprint(ot.m)
	}
	var o op = opSnapshot{}
	if !snapshot {
		o = genOp(t, infoOf(ot.m))
	}
	eres := runOp(o, engineSys{h.ctx, ot.tx})
	mres := runOp(o, modelSys{ot.m})
	t.Logf("T%d %v -> %v", slot, o, mres)
	sameResult(t, fmt.Sprintf("T%d", slot), o, eres, mres)
	ot.log = append(ot.log, loggedOp{o, mres})
	modelStats.ops.Add(1)
}

func (h *harness) commit(t *rapid.T) {
	slot, ot := h.pickTxn(t)
	h.txns[slot] = nil
	err := ot.tx.Commit(h.ctx)
	t.Logf("commit T%d -> %v", slot, errName(err))
	if ot.m == nil {
		if err != nil {
			t.Fatalf("commit of an empty transaction: %v", err)
		}
		return
	}
	// Replay the transaction's log on the committed state, as the
	// engine does (WTF §2.6).
	replay := h.committed.Clone()
	same, exact, exactPath := true, true, true
	for i, lo := range ot.log {
		r := runOp(lo.op, modelSys{replay})
		if r.err != lo.mres.err || r.val != lo.mres.val {
			t.Logf("  replayed op %d %v differs: was %v, now %v", i, lo.op, lo.mres, r)
			same, exact, exactPath = false, false, false
			break
		}
		if r.ver != lo.mres.ver {
			exact = false
		}
		if r.pver != lo.mres.pver {
			exactPath = false
		}
	}
	readOnly := fingerprint(ot.m) == ot.base
	switch {
	case err != nil && !errors.Is(err, fs.ErrConflict):
		t.Fatalf("commit T%d: %v", slot, err)
	case !same && err == nil && !readOnly:
		t.Fatalf("commit T%d succeeded although a replayed operation gives a different result", slot)
	case exact && exactPath && err != nil:
		t.Fatalf("commit T%d: spurious %v: every replayed operation gives the same result", slot, err)
	case exact && err != nil:
		// Only the attributes of intermediate directories of looked-up
		// paths changed: the engine logs every path component; see
		// TestNoSpuriousAbortLookupPath.
		spuriousPathAborts.Add(1)
	}
	if err == nil {
		modelStats.commits.Add(1)
	} else {
		modelStats.conflicts.Add(1)
	}
	if err == nil && same {
		if readOnly && model.Diff(replay.Snapshot(), h.committed.Snapshot()) != "" {
			// The transaction changed nothing in its own snapshot, so
			// its commit may serialize it at that snapshot (nothing to
			// write, nothing to validate) or replay it on the current
			// state, where its operations may now change something.
			got, err := snapshot(h.ctx, h.f.FS)
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if model.Diff(h.committed.Snapshot(), got) == "" {
				t.Logf("  read-only transaction serialized at its snapshot")
				return
			}
		}
		h.committed = replay
	}
}

func (h *harness) abort(t *rapid.T) {
	slot, ot := h.pickTxn(t)
	h.txns[slot] = nil
	ot.tx.Abort()
	t.Logf("abort T%d", slot)
	if err := ot.tx.Commit(h.ctx); !errors.Is(err, fs.ErrTxnDone) {
		t.Fatalf("Commit after Abort: %v, want ErrTxnDone", err)
	}
}

func (h *harness) noTxns(t *rapid.T) {
	if h.txns[0] != nil || h.txns[1] != nil {
		t.Skip("transactions open")
	}
}

// fsAppend runs the group-committed FS.Append.
func (h *harness) fsAppend(t *rapid.T) {
	ti := infoOf(h.committed)
	if len(ti.files) == 0 {
		t.Skip("no files")
	}
	p := rapid.SampledFrom(ti.files).Draw(t, "path")
	data := pattern(rapid.Byte().Draw(t, "seed"), genLen(t, "n"))
	ma, err := h.committed.LookupPath(p)
	if err != nil {
		t.Fatalf("model lookup %s: %v", p, err)
	}
	var ea fs.Attr
	if err := h.f.View(h.ctx, fs.RootCred, func(tx *fs.Txn) error {
		ea, err = tx.LookupPath(h.ctx, p)
		return err
	}); err != nil {
		t.Fatalf("engine lookup %s: %v", p, err)
	}
	eoff, eerr := h.f.AppendOpts(h.ctx, fs.RootCred, fs.TxnOptions{NoSync: rapid.Bool().Draw(t, "nosync")}, ea.Ino, data)
	moff, merr := h.committed.Append(ma.Ino, data)
	t.Logf("fs-append %s n=%d -> %d %v", p, len(data), moff, errName(merr))
	if eoff != moff || errName(eerr) != errName(merr) {
		t.Fatalf("FS.Append %s: engine %d %v, model %d %v", p, eoff, eerr, moff, merr)
	}
}

// pin keeps a file open (as an NFS/FUSE open would).
func (h *harness) pin(t *rapid.T) {
	h.noTxns(t)
	ti := infoOf(h.committed)
	if len(ti.files) == 0 {
		t.Skip("no files")
	}
	p := rapid.SampledFrom(ti.files).Draw(t, "path")
	ma, _ := h.committed.LookupPath(p)
	var ea fs.Attr
	if err := h.f.View(h.ctx, fs.RootCred, func(tx *fs.Txn) (err error) {
		ea, err = tx.LookupPath(h.ctx, p)
		return err
	}); err != nil {
		t.Fatalf("engine lookup %s: %v", p, err)
	}
	h.f.Pin(ea.Ino)
	h.committed.Pin(ma.Ino)
	h.pins = append(h.pins, pinned{ea.Ino, ma.Ino})
	t.Logf("pin %s", p)
}

func (h *harness) unpin(t *rapid.T) {
	h.noTxns(t)
	if len(h.pins) == 0 {
		t.Skip("nothing pinned")
	}
	i := rapid.IntRange(0, len(h.pins)-1).Draw(t, "pin")
	p := h.pins[i]
	h.pins = append(h.pins[:i], h.pins[i+1:]...)
	if err := h.f.Unpin(h.ctx, p.eng); err != nil {
		t.Fatalf("Unpin: %v", err)
	}
	h.committed.Unpin(p.mod)
	t.Logf("unpin #%d", i)
}

// statPinned reads a pinned (perhaps unlinked) inode by number.
func (h *harness) statPinned(t *rapid.T) {
	if len(h.pins) == 0 {
		t.Skip("nothing pinned")
	}
	p := rapid.SampledFrom(h.pins).Draw(t, "pin")
	var eres result
	if err := h.f.View(h.ctx, fs.RootCred, func(tx *fs.Txn) error {
		s := engineSys{h.ctx, tx}
		a, err := s.GetAttr(p.eng)
		eres = attrResult(a, err)
		if err == nil {
			b, eof, err := s.Read(p.eng, 0, int(a.Size)+1)
			eres.val += fmt.Sprintf(" %x %v %v", b, eof, errName(err))
		}
		return nil
	}); err != nil {
		t.Fatalf("View: %v", err)
	}
	s := modelSys{h.committed}
	a, err := s.GetAttr(p.mod)
	mres := attrResult(a, err)
	if err == nil {
		b, eof, err := s.Read(p.mod, 0, int(a.Size)+1)
		mres.val += fmt.Sprintf(" %x %v %v", b, eof, errName(err))
	}
	sameResult(t, "stat pinned", opStat{"#pinned"}, eres, mres)
}

// sync is the durability barrier; it changes nothing visible.
func (h *harness) sync(t *rapid.T) {
	if err := h.f.Sync(h.ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	t.Logf("sync")
}

// gc runs two garbage collections (the second frees what both found
// unreferenced), possibly while transactions are open: nothing live or
// in use by an open transaction may be freed.
func (h *harness) gc(t *rapid.T) {
	for i := 0; i < 2; i++ {
		if _, err := h.f.CollectGarbage(h.ctx); err != nil {
			t.Fatalf("CollectGarbage: %v", err)
		}
	}
	t.Logf("gc")
}

func (h *harness) check(t *rapid.T) {
	if probs := h.committed.Check(); len(probs) > 0 {
		t.Fatalf("model invariants broken (a bug in the model): %v", probs)
	}
	got, err := snapshot(h.ctx, h.f.FS)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if d := model.Diff(h.committed.Snapshot(), got); d != "" {
		t.Fatalf("engine and model trees differ:\n%s", d)
	}
}

func (h *harness) finish(t *rapid.T) {
	for i, ot := range h.txns {
		if ot != nil {
			ot.tx.Abort()
			h.txns[i] = nil
		}
	}
	for _, p := range h.pins {
		if err := h.f.Unpin(h.ctx, p.eng); err != nil {
			t.Fatalf("Unpin: %v", err)
		}
		h.committed.Unpin(p.mod)
	}
	h.pins = nil
	h.check(t)
	rep, err := h.f.Check(h.ctx)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("Check found problems:\n%s", joinLines(rep.Problems, 20))
	}
}

func runModelTest(t *rapid.T, kind storeKind) {
	h := &harness{ctx: context.Background(), committed: model.New(), kind: kind}
	inline := rapid.SampledFrom([]int{-1, 16, fs.DefaultInlineMax}).Draw(t, "inlineMax")
	// reuseMin 1: every put takes space the collector recycled when it
	// can (see gc.go), so stale data in reused ranges would show.
	reuseMin := rapid.SampledFrom([]int{0, 1}).Draw(t, "reuseMin")
	h.f = newTestFS(t, fsOpts{kind: kind, inlineMax: inline, slicesOrdered: rapid.Bool().Draw(t, "slicesOrdered"), reuseMin: reuseMin})
	t.Repeat(skipActions(map[string]func(*rapid.T){
		"do":          func(t *rapid.T) { h.autocommit(t, false) },
		"do-abort":    func(t *rapid.T) { h.autocommit(t, true) },
		"begin":       h.begin,
		"txn-op":      func(t *rapid.T) { h.txnOp(t, false) },
		"txn-op2":     func(t *rapid.T) { h.txnOp(t, false) },
		"txn-op3":     func(t *rapid.T) { h.txnOp(t, false) },
		"txn-snap":    func(t *rapid.T) { h.txnOp(t, true) },
		"commit":      h.commit,
		"abort":       h.abort,
		"fs-append":   h.fsAppend,
		"pin":         h.pin,
		"unpin":       h.unpin,
		"stat-pinned": h.statPinned,
		"gc":          h.gc,
		"sync":        h.sync,
		"":            h.check,
	}))
	h.finish(t)
	if l, ok := h.f.Slices.(*slice.Local); ok {
		modelStats.reusePuts.Add(l.Stats().ReusePuts)
	}
}

// skipActions drops the actions named in TXNFS_MODEL_SKIP (comma
// separated), to bisect a failure or to look past a known bug.
func skipActions(actions map[string]func(*rapid.T)) map[string]func(*rapid.T) {
	for _, name := range strings.Split(os.Getenv("TXNFS_MODEL_SKIP"), ",") {
		delete(actions, name)
	}
	return actions
}

// TestModel runs random sequences of namespace, data, slicing, xattr and
// transaction operations (autocommitted, in explicit transactions, two
// interleaved transactions, aborts) on the engine and on the reference
// model; after every step the trees must be identical, and a transaction
// may fail with ErrConflict only if replaying it on the committed state
// gives different results (WTF §2.6: zero spurious aborts).
//
// Reproduce a failure with the printed -rapid.seed (or the fail file
// rapid writes under testdata/rapid).
func TestModel(t *testing.T) {
	setRapidDefaults(scale(300, 3000), scale(100, 200))
	rapid.Check(t, func(t *rapid.T) { runModelTest(t, storeMem) })
	if n := spuriousPathAborts.Load(); n > 0 {
		t.Logf("%d transactions aborted only because a directory on a looked-up path changed", n)
	}
	t.Logf("%d operations, %d explicit transactions committed, %d aborted with ErrConflict, %d puts into recycled space",
		modelStats.ops.Load(), modelStats.commits.Load(), modelStats.conflicts.Load(), modelStats.reusePuts.Load())
}

// TestModelPebble is TestModel on the pebble kv backend (fewer runs).
func TestModelPebble(t *testing.T) {
	setRapidDefaults(scale(40, 400), scale(80, 150))
	rapid.Check(t, func(t *rapid.T) { runModelTest(t, storePebble) })
}

// yankWorks runs TestYankPasteProbe in a subprocess, once, so that a crash
// of Yank/Paste (a stack overflow is not recoverable) fails TestYankPaste
// instead of killing every test of the package.
var yankWorks = sync.OnceValues(func() (bool, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestYankPasteProbe$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TXNFS_PROBE=yank")
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
})

// TestYankPaste checks yank, the Slices encoding and paste on one file,
// in a subprocess (see yankWorks).
func TestYankPaste(t *testing.T) {
	if ok, out := yankWorks(); !ok {
		if len(out) > 3000 {
			out = out[:3000] + "..."
		}
		t.Fatalf("BUG: yank/paste fail or crash the process:\n%s", out)
	}
}

func TestYankPasteProbe(t *testing.T) {
	if os.Getenv("TXNFS_PROBE") != "yank" {
		t.Skip("run by TestYankPaste in a subprocess")
	}
	for _, inline := range []int{-1, fs.DefaultInlineMax} {
		f := newTestFS(t, fsOpts{inlineMax: inline})
		m := model.New()
		ctx := context.Background()
		ops := []op{
			opCreate{path: "/f", typ: fs.TypeRegular, mode: 0o644},
			opCreate{path: "/g", typ: fs.TypeRegular, mode: 0o644},
			opWrite{path: "/f", off: 0, seed: 1, n: 10000},
			opRange{kind: "punch", path: "/f", off: 100, n: 200},
			opYankPaste{src: "/f", off: 50, n: 9000, dst: "/g", dstOff: 7},
			opYankPaste{src: "/f", off: 5000, n: 1 << 20, dst: "/f", dstOff: 0},
			opYankPaste{src: "/g", off: 20000, n: 10, dst: "/f", dstOff: 0},
			opYankPaste{src: "/g", off: 0, n: 10, dst: "/", dstOff: 0},
			opYankPaste{src: "/", off: 0, n: 10, dst: "/g", dstOff: 0},
		}
		for _, o := range ops {
			var eres result
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				eres = o.run(engineSys{ctx, tx})
				return nil
			})
			mres := runOp(o, modelSys{m})
			if eres.err != mres.err || eres.val != mres.val {
				t.Fatalf("%v: engine %v, model %v", o, eres, mres)
			}
		}
		requireSameTree(t, m.Snapshot(), mustSnapshot(t, f.FS))
		_ = ctx
	}
}

// TestNoSpuriousAbortLookupPath: WTF §2.6 aborts a transaction only "if
// any replayed operation returns a value different from the logged call".
// LookupPath returns the attributes of the last component only, so a
// concurrent change to an ancestor directory's attributes (here: a new
// entry in the root) must not abort a transaction that looked up a path
// through it.
func TestNoSpuriousAbortLookupPath(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		d, _, err := tx.Create(ctx, fs.RootIno, "d", fs.CreateRequest{Type: fs.TypeDirectory, Mode: 0o755})
		if err != nil {
			return err
		}
		_, _, err = tx.Create(ctx, d.Ino, "f", fs.CreateRequest{Type: fs.TypeRegular, Mode: 0o644})
		return err
	})
	tx, err := f.Begin(ctx, fs.RootCred, fs.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := tx.LookupPath(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Write(ctx, a.Ino, 0, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	// A concurrent transaction changes the root (not /d/f).
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		_, _, err := tx.Create(ctx, fs.RootIno, "other", fs.CreateRequest{Type: fs.TypeRegular})
		return err
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("BUG: spurious abort: %v (replaying LookupPath(\"/d/f\") returns the same attributes; "+
			"only the root's, an intermediate result the caller never saw, changed)", err)
	}
}

// sparseFile is a reference for files too big to hold in memory: only
// non-zero bytes are stored.
type sparseFile struct {
	size uint64
	b    map[uint64]byte
}

func (f *sparseFile) write(off uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	for i, c := range data {
		if c == 0 {
			delete(f.b, off+uint64(i))
		} else {
			f.b[off+uint64(i)] = c
		}
	}
	f.size = max(f.size, off+uint64(len(data)))
}

func (f *sparseFile) read(off, n uint64) []byte {
	if off >= f.size {
		return nil
	}
	n = min(n, f.size-off)
	out := make([]byte, n)
	for i := range out {
		out[i] = f.b[off+uint64(i)]
	}
	return out
}

func (f *sparseFile) truncate(size uint64) {
	for k := range f.b {
		if k >= size {
			delete(f.b, k)
		}
	}
	f.size = size
}

// TestRegionBoundaries runs data and slicing operations at offsets around
// the first two region boundaries (meta.RegionSize) of large sparse files
// and compares windows of them with a sparse reference.
func TestRegionBoundaries(t *testing.T) {
	const R = meta.RegionSize
	setRapidDefaults(scale(30, 300), scale(40, 100))
	rapid.Check(t, func(t *rapid.T) { runWindows(t, []uint64{0, R, 2 * R}, 12000, 9000, false) })
}

// TestChunkFragmentation runs the same operations around the first
// layout-2 chunk boundaries (meta.ChunkSize, 256 KiB apart) with many small
// writes, so the files get span records of many extents with writes,
// pastes and punches straddling record boundaries, and records are
// compacted, split, merged and defragmented.
// Reproduce a failure with the printed -rapid.seed.
func TestChunkFragmentation(t *testing.T) {
	const C = meta.ChunkSize
	setRapidDefaults(scale(10, 200), scale(300, 1000))
	rapid.Check(t, func(t *rapid.T) {
		runWindows(t, []uint64{0, C, 2 * C}, 6000, rapid.SampledFrom([]int{64, 700, 9000}).Draw(t, "max-n"), true)
	})
}

// runWindows runs random data and slicing operations on two files at
// offsets within ±win/2 of the given windows (ascending, the first 0,
// more than 3*win apart), of up to maxN bytes, and checks the windows and
// the gaps between them against a sparse reference. With compactOften the
// engine compacts record lists longer than 4 and splits (or defragments) compacted
// lists longer than 8.
func runWindows(t *rapid.T, windows []uint64, win, maxN int, compactOften bool) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{inlineMax: rapid.SampledFrom([]int{-1, 64}).Draw(t, "inline")})
	if compactOften {
		fs.SetCompactionForTest(f.FS, 4, 8)
	}
	var inos [2]fs.Ino
	refs := [2]*sparseFile{{b: map[uint64]byte{}}, {b: map[uint64]byte{}}}
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		for i := range inos {
			a, _, err := tx.Create(ctx, fs.RootIno, fmt.Sprintf("f%d", i), fs.CreateRequest{Type: fs.TypeRegular})
			if err != nil {
				return err
			}
			inos[i] = a.Ino
		}
		return nil
	})
	genOff := func(label string) uint64 {
		base := rapid.SampledFrom(windows).Draw(t, label+"-base")
		d := rapid.IntRange(-win/2, win/2).Draw(t, label)
		if base == 0 {
			return uint64(max(d, 0))
		}
		return uint64(int64(base) + int64(d))
	}
	check := func() {
		err := f.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			for i, ino := range inos {
				a, err := tx.GetAttr(ctx, ino)
				if err != nil {
					return err
				}
				if a.Size != refs[i].size {
					return fmt.Errorf("f%d: size %d, want %d", i, a.Size, refs[i].size)
				}
				// Data lies within [w-win/2, w+win/2+9000) of each window w.
				for _, w := range windows {
					lo := max(w, uint64(win)) - uint64(win)
					buf := make([]byte, 3*win)
					n, _, err := tx.Read(ctx, ino, lo, buf)
					if err != nil {
						return err
					}
					if want := refs[i].read(lo, uint64(3*win)); !bytes.Equal(buf[:n], want) {
						return fmt.Errorf("f%d: window at %d differs (%d bytes, want %d)", i, lo, n, len(want))
					}
				}
				// No data outside the windows.
				for k := 0; k+1 < len(windows); k++ {
					gap := [2]uint64{windows[k] + 2*uint64(win), windows[k+1] - uint64(win)}
					d, eof, err := tx.Seek(ctx, ino, gap[0], fs.SeekData)
					if err != nil {
						return err
					}
					if !eof && d < gap[1] && d < a.Size {
						return fmt.Errorf("f%d: SeekData(%d) = %d, inside a gap that holds no data", i, gap[0], d)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	actions := map[string]func(*rapid.T){
		"write": func(t *rapid.T) {
			i := rapid.IntRange(0, 1).Draw(t, "file")
			off := genOff("off")
			data := pattern(rapid.Byte().Draw(t, "seed")|1, rapid.IntRange(1, maxN).Draw(t, "n"))
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.Write(ctx, inos[i], off, data) })
			refs[i].write(off, data)
		},
		"truncate": func(t *rapid.T) {
			i := rapid.IntRange(0, 1).Draw(t, "file")
			size := genOff("size")
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				_, err := tx.SetAttr(ctx, inos[i], fs.SetAttr{Size: &size})
				return err
			})
			refs[i].truncate(size)
		},
		"punch": func(t *rapid.T) {
			i := rapid.IntRange(0, 1).Draw(t, "file")
			off, n := genOff("off"), uint64(rapid.IntRange(1, maxN).Draw(t, "n"))
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { return tx.Punch(ctx, inos[i], off, n) })
			if off < refs[i].size {
				refs[i].write(off, make([]byte, min(n, refs[i].size-off)))
			}
		},
		"yankpaste": func(t *rapid.T) {
			i, j := rapid.IntRange(0, 1).Draw(t, "src"), rapid.IntRange(0, 1).Draw(t, "dst")
			off, n, dst := genOff("off"), uint64(rapid.IntRange(1, maxN).Draw(t, "n")), genOff("dstoff")
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
				s, err := tx.Yank(ctx, inos[i], off, n)
				if err != nil {
					return err
				}
				return tx.Paste(ctx, inos[j], dst, s)
			})
			data := refs[i].read(off, n)
			refs[j].write(dst, data)
		},
		"copyrange": func(t *rapid.T) {
			i, j := rapid.IntRange(0, 1).Draw(t, "src"), rapid.IntRange(0, 1).Draw(t, "dst")
			off, n, dst := genOff("off"), uint64(rapid.IntRange(1, maxN).Draw(t, "n")), genOff("dstoff")
			var got uint64
			do(t, f.FS, func(ctx context.Context, tx *fs.Txn) (err error) {
				got, err = tx.CopyRange(ctx, inos[i], off, inos[j], dst, n)
				return err
			})
			data := refs[i].read(off, n)
			if got != uint64(len(data)) {
				t.Fatalf("CopyRange copied %d, want %d", got, len(data))
			}
			refs[j].write(dst, data)
		},
		"append": func(t *rapid.T) {
			i := rapid.IntRange(0, 1).Draw(t, "file")
			if refs[i].size > windows[len(windows)-1]+uint64(win/2) {
				t.Skip("too far")
			}
			data := pattern(rapid.Byte().Draw(t, "seed")|1, rapid.IntRange(1, 3000).Draw(t, "n"))
			for k := 0; k+1 < len(windows); k++ { // appended data must stay out of the gaps check looks at
				if lo, hi := refs[i].size, refs[i].size+uint64(len(data)); hi > windows[k]+2*uint64(win) && lo < windows[k+1]-uint64(win) {
					t.Skip("would append into a gap")
				}
			}
			off, err := f.Append(ctx, fs.RootCred, inos[i], data)
			if err != nil || off != refs[i].size {
				t.Fatalf("Append: off %d err %v, want off %d", off, err, refs[i].size)
			}
			refs[i].write(off, data)
		},
		"": func(t *rapid.T) { check() },
	}
	if compactOften { // mostly writes, so chunk lists grow
		for _, k := range []string{"write2", "write3", "write4"} {
			actions[k] = actions["write"]
		}
	}
	t.Repeat(actions)
	requireCheckClean(t, f.FS)
}

// TestBadNames: invalid names and targets are rejected with a clear error
// by every operation that takes a name, agreeing with the model, and
// nothing changes.
func TestBadNames(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t, fsOpts{})
	m := model.New()
	setup := []op{
		opCreate{path: "/d", typ: fs.TypeDirectory, mode: 0o755},
		opCreate{path: "/f", typ: fs.TypeRegular, mode: 0o644},
	}
	for _, o := range setup {
		do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error { o.run(engineSys{ctx, tx}); return nil })
		o.run(modelSys{m})
	}
	before := captureState(t, f)
	bad := []string{"", ".", "..", "a/b", "/", "a\x00b", strings.Repeat("n", fs.MaxNameLen+1)}
	ok := strings.Repeat("n", fs.MaxNameLen)
	type call struct {
		name string
		run  func(s sys, d, f fs.Ino, name string) error
	}
	calls := []call{
		{"create", func(s sys, d, _ fs.Ino, n string) error {
			_, _, err := s.Create(d, n, fs.CreateRequest{Type: fs.TypeRegular, Exclusive: true})
			return err
		}},
		{"mkdir", func(s sys, d, _ fs.Ino, n string) error {
			_, _, err := s.Create(d, n, fs.CreateRequest{Type: fs.TypeDirectory})
			return err
		}},
		{"link", func(s sys, d, f fs.Ino, n string) error { _, err := s.Link(f, d, n); return err }},
		{"unlink", func(s sys, d, _ fs.Ino, n string) error { return s.Unlink(d, n) }},
		{"rmdir", func(s sys, d, _ fs.Ino, n string) error { return s.Rmdir(d, n) }},
		{"remove", func(s sys, d, _ fs.Ino, n string) error { return s.Remove(d, n) }},
		{"rename-src", func(s sys, d, _ fs.Ino, n string) error {
			return s.Rename(d, n, d, "x", fs.RenameFlags{})
		}},
		{"rename-dst", func(s sys, _, _ fs.Ino, n string) error {
			return s.Rename(fs.RootIno, "f", fs.RootIno, n, fs.RenameFlags{})
		}},
	}
	for _, c := range calls {
		for _, name := range bad {
			var eerr error
			err := f.Do(ctx, fs.RootCred, func(tx *fs.Txn) error {
				s := engineSys{ctx, tx}
				d, _ := s.LookupPath("/d")
				fa, _ := s.LookupPath("/f")
				eerr = c.run(s, d.Ino, fa.Ino, name)
				return errTestAbort
			})
			if !errors.Is(err, errTestAbort) {
				t.Fatalf("Do: %v", err)
			}
			ms := modelSys{m.Clone()}
			d, _ := ms.LookupPath("/d")
			fa, _ := ms.LookupPath("/f")
			merr := c.run(ms, d.Ino, fa.Ino, name)
			if errName(eerr) != errName(merr) || eerr == nil {
				t.Errorf("%s %q: engine %v, model %v", c.name, name, eerr, merr)
			}
		}
	}
	// Names of exactly MaxNameLen bytes and long symlink targets.
	do(t, f.FS, func(ctx context.Context, tx *fs.Txn) error {
		if _, _, err := tx.Create(ctx, fs.RootIno, ok, fs.CreateRequest{Type: fs.TypeRegular}); err != nil {
			t.Errorf("create of a %d-byte name: %v", len(ok), err)
		}
		if _, _, err := tx.Create(ctx, fs.RootIno, "long", fs.CreateRequest{Type: fs.TypeSymlink,
			Target: strings.Repeat("t", fs.MaxSymlink+1)}); !errors.Is(err, fs.ErrNameTooLong) {
			t.Errorf("symlink with a %d-byte target: %v, want ErrNameTooLong", fs.MaxSymlink+1, err)
		}
		if _, _, err := tx.Create(ctx, fs.RootIno, "empty", fs.CreateRequest{Type: fs.TypeSymlink}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("symlink with an empty target: %v, want ErrInvalid", err)
		}
		if _, _, err := tx.Create(ctx, fs.RootIno, "t", fs.CreateRequest{Type: 99}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("create of type 99: %v, want ErrInvalid", err)
		}
		return errTestAbort
	})
	requireSameState(t, before, captureState(t, f))
}
