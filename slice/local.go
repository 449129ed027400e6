package slice

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/txnfs/txnfs/internal/byterange"
)

// DefaultFiles is the number of backing files OpenLocal spreads Puts over
// when LocalOptions.Files is zero.
const DefaultFiles = 4

// MaxFiles bounds LocalOptions.Files.
const MaxFiles = 1 << 10

// writebackMin: Puts of at least this many bytes start their writeback at
// once (see startWriteback); smaller ones are left to the next Sync, which
// flushes them together.
const writebackMin = 64 << 10

// DefaultDirectMin is LocalOptions.DirectMin when it is zero: puts of at
// least 256 KiB go to disk with O_DIRECT (see LocalOptions.DirectMin).
const DefaultDirectMin = 256 << 10

// directAlign is the file offset, length and memory alignment of O_DIRECT
// writes: 4 KiB satisfies every logical block size and page size Linux file
// systems ask for.
const directAlign = 4096

// ErrEmpty is returned by Put for empty data.
var ErrEmpty = errors.New("slice: empty slice")

// castagnoli is the CRC32C table every Pointer.CRC is computed with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of data, as stored in
// Pointer.CRC.
func Checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli) }

const (
	backingPrefix = "slices-"
	backingSuffix = ".dat"
	lockName      = "slices.lock"
)

// BackingName returns the file name of backing file id inside the store's
// directory, e.g. "slices-000001.dat".
func BackingName(id uint32) string {
	return fmt.Sprintf("%s%06d%s", backingPrefix, id, backingSuffix)
}

// parseBackingName is the inverse of BackingName. Only canonical names are
// accepted, so two names never map to one id.
func parseBackingName(name string) (uint32, bool) {
	digits, ok := strings.CutPrefix(name, backingPrefix)
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, backingSuffix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || id == 0 || BackingName(uint32(id)) != name {
		return 0, false
	}
	return uint32(id), true
}

// LocalOptions configures OpenLocal.
type LocalOptions struct {
	// FS is the disk seam; nil means vfs.Default. It must allow WriteAt,
	// ReadAt and SyncData on one File to overlap (vfs.Default, vfs.MemFS
	// and errorfs over either do).
	FS vfs.FS
	// Dir holds the backing files; it is created if missing.
	Dir string
	// Files is the number of backing files Puts are spread over
	// (backing ids 1..Files); 0 means DefaultFiles. Backing files with
	// larger ids found in Dir stay readable and freeable.
	Files int
	// Logger receives open/sync-failure/corruption reports; nil discards.
	Logger *slog.Logger
	// DirectMin: puts of at least this many bytes are written with
	// O_DIRECT, straight from a 4 KiB-aligned buffer to the disk, bypassing
	// the page cache (see "Direct writes" in the package doc); 0 means
	// DefaultDirectMin, negative disables direct writes. Only used when FS
	// is vfs.Default (direct writes bypass the vfs seam, so fault-injecting
	// and in-memory file systems always get buffered writes), and only for
	// files whose file system accepts O_DIRECT: otherwise, or when a direct
	// write is refused with EINVAL, the file falls back to buffered writes.
	DirectMin int
	// ReuseMax bounds the freed space kept for reuse (see Recycle and
	// "Reuse pool" in the package doc), in bytes over all backing files;
	// 0 means DefaultReuseMax, negative disables the pool (Recycle then
	// punches like Free).
	ReuseMax int64
	// ReuseMin: puts of at least this many bytes take their space from the
	// reuse pool when it holds a fitting range; 0 means DefaultReuseMin,
	// negative never reuses.
	ReuseMin int
	// Unstaged: direct puts whose data is 4 KiB-aligned in memory and a
	// multiple of 4 KiB long are written straight from the caller's
	// buffer, synchronously, instead of being copied into a staging
	// buffer and written in the background. It pays for callers that wait
	// for the write anyway (the NFS server: a WRITE's reply waits for its
	// commit, which waits for the write; its records place WRITE payloads
	// aligned); a FUSE mount answers a WRITE before the data is on disk
	// and keeps the background write (measured: seq-1M through a local
	// mount 0.62 of a local directory staged, 0.43 unstaged, in the same
	// run; docs/slice.md "Unstaged direct puts").
	Unstaged bool
	// Covered: a direct put into reused space below the file's synced
	// watermark (written, allocated blocks, the file's size durable) is a
	// covered put: Sync and
	// SyncAll wait for its O_DIRECT write to complete and do not
	// fdatasync its file for it. The caller promises a device cache flush
	// on the same device (the metadata log's fdatasync, see datadir)
	// before it relies on the put being durable, and records the covered
	// puts it commits (Covered) so that recovery can check them
	// (docs/engine.md "Durability", "Covered puts"). Everything else
	// (appends, buffered writes) is synced as without it.
	Covered bool
	// DirectVFS (tests only): direct puts also when FS is not
	// vfs.Default, written with the FS's File.WriteAt standing in for an
	// O_DIRECT pwrite (a write the device completed when it returns): how
	// a model of a device with a volatile cache (datadir's power-cut
	// test) sees covered puts.
	DirectVFS bool
}

// Validate reports whether o can be used (after defaults are applied).
func (o *LocalOptions) Validate() error {
	if o.Dir == "" {
		return errors.New("slice: LocalOptions.Dir is empty")
	}
	if o.Files < 0 || o.Files > MaxFiles {
		return fmt.Errorf("slice: LocalOptions.Files = %d, want 0..%d", o.Files, MaxFiles)
	}
	return nil
}

func (o *LocalOptions) withDefaults() LocalOptions {
	r := *o
	if r.FS == nil {
		r.FS = vfs.Default
	}
	if r.Files == 0 {
		r.Files = DefaultFiles
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if r.DirectMin == 0 {
		r.DirectMin = DefaultDirectMin
	}
	if r.FS != vfs.Default && !r.DirectVFS {
		r.DirectMin = -1
	}
	if r.ReuseMax == 0 {
		r.ReuseMax = DefaultReuseMax
	}
	if r.ReuseMin == 0 {
		r.ReuseMin = DefaultReuseMin
	}
	return r
}

// LocalStats are cumulative counters of a Local store.
type LocalStats struct {
	Puts, PutBytes uint64
	DirectPuts     uint64 // puts written with O_DIRECT
	// UnstagedPuts counts the direct puts written synchronously straight
	// from the caller's buffer (4 KiB-aligned, a multiple of 4 KiB long),
	// without a staging copy (LocalOptions.Unstaged, WithUnstaged); they
	// are also in DirectPuts.
	UnstagedPuts uint64
	// LentPuts counts the direct puts written in the background straight
	// from the caller's buffer (WithLoan); they are also in DirectPuts.
	LentPuts         uint64
	DirectInFlight   uint64 // direct writes started and not yet returned (a gauge, not cumulative)
	Syncs            uint64 // Sync calls
	Fsyncs           uint64 // SyncData calls on backing files
	Reads, ReadBytes uint64 // slices read from disk and bytes read
	Corrupt          uint64 // reads that failed verification
	Frees, FreeBytes uint64
	// ReusePuts and ReuseBytes count puts that took their space from the
	// reuse pool and the bytes they took; RecycledBytes the bytes Recycle
	// put in the pool; PoolBytes is the pool's size now (a gauge).
	ReusePuts, ReuseBytes uint64
	RecycledBytes         uint64
	PoolBytes             uint64
}

type localStats struct {
	puts, putBytes   atomic.Uint64
	directPuts       atomic.Uint64
	unstagedPuts     atomic.Uint64
	lentPuts         atomic.Uint64
	syncs, fsyncs    atomic.Uint64
	reads, readBytes atomic.Uint64
	corrupt          atomic.Uint64
	frees, freeBytes atomic.Uint64
	reusePuts        atomic.Uint64
	reuseBytes       atomic.Uint64
	recycledBytes    atomic.Uint64
}

// Local is a Store over append-only backing files in one directory of a
// vfs.FS. See the package documentation for the layout and guarantees.
type Local struct {
	fs   vfs.FS
	dir  string
	log  *slog.Logger
	lock io.Closer

	byID     map[uint32]*backing // read-only after OpenLocal
	all      []*backing          // sorted by id
	writable []*backing          // ids 1..Files; Put picks among these

	directMin  int            // puts of at least this many bytes go direct; <= 0: never
	directBufs chan *[]byte   // staging buffers not in use (see getStaging)
	directMade atomic.Int32   // staging buffers allocated, at most maxDirectInflight
	directWG   sync.WaitGroup // asynchronous direct writes; Close waits

	unstaged bool  // LocalOptions.Unstaged
	covered  bool  // LocalOptions.Covered
	reuseMax int64 // bound of the reuse pool in bytes; <= 0: no pool
	reuseMin int   // puts of at least this many bytes may reuse; <= 0: never
	reuse    reusePool

	// life is held shared by every operation and exclusively by Close.
	life   sync.RWMutex
	closed bool // guarded by life

	stats localStats
}

var _ Store = (*Local)(nil)

// backing is one append-only backing file.
//
// Lock order: mu, then smu, then dmu. None is held across SyncData or an
// O_DIRECT write.
type backing struct {
	id       uint32
	name     string
	f        vfs.File
	fd       uintptr // f.Fd(); vfs.InvalidFd if not an OS file
	writable bool

	// mu serializes writes (appends and zero-fills) to f, and guards pool.
	mu sync.Mutex
	// pool holds freed, block-aligned ranges still allocated and written,
	// sorted and disjoint, which large puts take before appending (see
	// reuse.go).
	pool byterange.Set
	// dfd is a second descriptor of the file opened with O_DIRECT, or -1
	// (disabled, not an OS file, refused at open). Set at open, closed by
	// Close.
	dfd int
	// dvfs: direct writes go through f (LocalOptions.DirectVFS); dfd is
	// then vfsDirectFD.
	dvfs bool
	// directOff is set when the file system refused a direct write: the
	// file takes buffered writes only from then on.
	directOff atomic.Bool
	// directOK is set once a direct write to the file succeeded: later
	// ones run asynchronously (see appendDirect).
	directOK atomic.Bool
	// dmu guards the direct writes in flight and the failed ones (a leaf
	// lock).
	dmu struct {
		sync.Mutex
		writes []*directWrite
		// failed are the ranges of asynchronous direct writes that
		// failed (e.g. ENOSPC): their puts' Sync and WaitWritten fail,
		// so no commit names them, and the file stays in service. Past
		// maxFailedWrites the file's sync fails for good instead.
		failed []failedWrite
	}
	// size is the next append offset. Every byte below it has been
	// written, or its write failed: then the range was never handed out,
	// or (an asynchronous direct write) it is in dmu.failed, whose
	// pointer fails Sync and WaitWritten. Written under mu, read
	// atomically anywhere.
	size atomic.Uint64

	// smu guards the group-commit state.
	smu struct {
		sync.Mutex
		synced uint64 // every byte below synced is durable, except dirty
		// dirty are the puts into reused space (below synced) that no
		// completed SyncData covers yet.
		dirty    []*dirtyWrite
		inflight *syncCall // the SyncData running now, if any
		failed   error     // sticky: set by the first failed SyncData
		// allocated are the ranges whose blocks are allocated (no hole,
		// no unwritten extent) with that allocation durable: written in
		// this run by a write that completed before a SyncData that
		// succeeded, and not punched since. Only there a put is covered
		// (LocalOptions.Covered): the device flush that makes a covered
		// put durable commits no file system metadata, and filling a
		// hole (a range DrainPool gave back) or an unwritten extent (a
		// put never synced before a restart) changes some. base is the
		// size at open: bytes below it were written before the restart;
		// of those, the data ranges at open (dataRanges: no holes, no
		// unwritten extents) less those punched since, preOpen, join
		// allocated at the first SyncData that succeeds (which commits
		// whatever metadata an earlier process left uncommitted).
		allocated byterange.Set
		base      uint64
		preOpen   byterange.Set
	}
}

// failedWrite is the range of a direct write that failed, and its error.
type failedWrite struct {
	off, end uint64
	err      error
}

// maxFailedWrites bounds the failed direct writes a file remembers (16
// bytes of range each); one more makes its sync fail for good.
const maxFailedWrites = 1 << 16

// failedIn returns the error of a failed direct write overlapping
// [off, end), or nil.
func (b *backing) failedIn(off, end uint64) error {
	b.dmu.Lock()
	defer b.dmu.Unlock()
	for _, f := range b.dmu.failed {
		if f.off < end && off < f.end {
			return f.err
		}
	}
	return nil
}

// syncCall is one SyncData shared by every Sync that needs bytes below upto.
type syncCall struct {
	upto   uint64        // backing size when the call started
	covers []*dirtyWrite // dirty puts written when the call started
	done   chan struct{} // closed when the call finished
	// punched are the ranges punched while the call ran: not allocated
	// when it returns, whatever it covered (smu guards it).
	punched byterange.Set
}

// OpenLocal opens (creating if needed) the store in o.Dir. Existing backing
// files are appended to after their current size; whatever an un-synced
// tail holds is never referenced by a durable pointer and is left alone.
// The directory is locked against a second OpenLocal until Close.
func OpenLocal(ctx context.Context, o LocalOptions) (*Local, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &Local{fs: o.FS, dir: o.Dir, log: o.Logger.With("component", "slice.local", "dir", o.Dir), byID: map[uint32]*backing{},
		directMin: o.DirectMin, directBufs: make(chan *[]byte, maxDirectInflight),
		reuseMax: o.ReuseMax, reuseMin: o.ReuseMin, unstaged: o.Unstaged, covered: o.Covered}
	ok := false
	defer func() {
		if !ok {
			l.closeFiles()
		}
	}()

	if err := mkdirAllSynced(l.fs, l.dir); err != nil {
		return nil, fmt.Errorf("slice: create %s: %w", l.dir, err)
	}
	lock, err := l.fs.Lock(l.fs.PathJoin(l.dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("slice: lock %s: %w", l.dir, err)
	}
	l.lock = lock

	names, err := l.fs.List(l.dir)
	if err != nil {
		return nil, fmt.Errorf("slice: list %s: %w", l.dir, err)
	}
	ids := map[uint32]bool{}
	for _, name := range names {
		if id, ok := parseBackingName(name); ok {
			ids[id] = true
		}
	}
	created := 0
	for id := uint32(1); id <= uint32(o.Files); id++ {
		if !ids[id] {
			ids[id] = true
			created++
		}
	}
	for id := range ids {
		b := &backing{id: id, name: l.fs.PathJoin(l.dir, BackingName(id)), writable: id <= uint32(o.Files), dfd: -1}
		// Register before opening so a failure below closes what opened.
		l.byID[id] = b
		l.all = append(l.all, b)
		f, err := l.fs.OpenReadWrite(b.name, vfs.WriteCategoryUnspecified)
		if err != nil {
			return nil, fmt.Errorf("slice: open %s: %w", b.name, err)
		}
		b.f, b.fd = f, f.Fd()
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("slice: stat %s: %w", b.name, err)
		}
		b.size.Store(uint64(st.Size()))
		b.smu.base = uint64(st.Size())
		if b.writable && o.Covered {
			if b.smu.preOpen, err = dataRanges(b.fd, b.smu.base); err != nil {
				l.log.Info("no data map (lseek SEEK_DATA); no covered put below the size at open", "backing", id, "err", err)
				b.smu.preOpen = nil
			}
		}
		if b.writable && l.directMin > 0 && o.DirectVFS && o.FS != vfs.Default {
			b.dfd, b.dvfs = vfsDirectFD, true
		} else if b.writable && l.directMin > 0 && b.fd != vfs.InvalidFd {
			if dfd, err := openDirect(b.name); err == nil {
				b.dfd = dfd
			} else {
				l.log.Info("O_DIRECT refused; buffered writes only", "backing", id, "err", err)
			}
		}
		// synced stays 0: after a restart the page cache may still hold
		// bytes that never reached the disk, so the first Sync fsyncs.
	}
	slices.SortFunc(l.all, func(a, b *backing) int { return int(a.id) - int(b.id) })
	for _, b := range l.all {
		if b.writable {
			l.writable = append(l.writable, b)
		}
	}
	if created > 0 {
		if err := syncDir(l.fs, l.dir); err != nil {
			return nil, fmt.Errorf("slice: sync dir %s: %w", l.dir, err)
		}
	}
	for _, b := range l.all {
		l.log.Debug("backing file", "id", b.id, "size", b.size.Load(), "writable", b.writable)
	}
	l.log.Info("opened slice store", "backings", len(l.all), "created", created)
	ok = true
	return l, nil
}

// mkdirAllSynced creates dir and any missing parents, syncing the parent of
// each directory it creates so the new entries survive a crash.
func mkdirAllSynced(fs vfs.FS, dir string) error {
	var missing []string
	for d := dir; ; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		} else if !oserror.IsNotExist(err) {
			return err
		}
		missing = append(missing, d)
		if parent := fs.PathDir(d); parent == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := syncDir(fs, fs.PathDir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// enter starts an operation; exit must follow if it returns nil.
func (l *Local) enter(ctx context.Context) error {
	l.life.RLock()
	if l.closed {
		l.life.RUnlock()
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		l.life.RUnlock()
		return err
	}
	return nil
}

func (l *Local) exit() { l.life.RUnlock() }

// Stats returns a snapshot of the store's counters.
func (l *Local) Stats() LocalStats {
	s := &l.stats
	var inflight uint64
	for _, b := range l.all { // read-only after OpenLocal
		b.dmu.Lock()
		inflight += uint64(len(b.dmu.writes))
		b.dmu.Unlock()
	}
	return LocalStats{
		Puts: s.puts.Load(), PutBytes: s.putBytes.Load(), DirectPuts: s.directPuts.Load(), UnstagedPuts: s.unstagedPuts.Load(), LentPuts: s.lentPuts.Load(), DirectInFlight: inflight,
		Syncs: s.syncs.Load(), Fsyncs: s.fsyncs.Load(),
		Reads: s.reads.Load(), ReadBytes: s.readBytes.Load(),
		Corrupt: s.corrupt.Load(),
		Frees:   s.frees.Load(), FreeBytes: s.freeBytes.Load(),
		ReusePuts: s.reusePuts.Load(), ReuseBytes: s.reuseBytes.Load(), RecycledBytes: s.recycledBytes.Load(),
		PoolBytes: l.poolBytes(),
	}
}

// Put implements Store. It picks backing file hint%Files, or the next
// healthy one if that file's last fsync failed, and appends data there.
// data is neither modified nor retained.
func (l *Local) Put(ctx context.Context, hint uint64, data []byte) (Pointer, error) {
	return l.put(ctx, hint, Payload{data: data})
}

// PutPayload implements PayloadPutter: Put of p.Data() with p.CRC() as
// its checksum, without hashing the data (see Payload for what a wrong CRC
// leads to).
func (l *Local) PutPayload(ctx context.Context, hint uint64, p Payload) (Pointer, error) {
	return l.put(ctx, hint, p)
}

// put is Put of pl.data, with its CRC32C pl.crc if pl.known (PutPayload).
func (l *Local) put(ctx context.Context, hint uint64, pl Payload) (Pointer, error) {
	data := pl.data
	if err := checkPut(data); err != nil {
		return Pointer{}, err
	}
	if err := l.enter(ctx); err != nil {
		return Pointer{}, err
	}
	defer l.exit()
	loan, unstaged := loanFrom(ctx), l.unstaged
	if unstagedFrom(ctx) {
		loan, unstaged = nil, true // see WithLoan
	}
	n := uint64(len(l.writable))
	for i := range n {
		b := l.writable[(hint+i)%n]
		if b.syncFailed() != nil {
			continue
		}
		off, direct, crc, err := l.append(b, pl, unstaged, loan)
		if err != nil {
			return Pointer{}, fmt.Errorf("slice: put %d bytes to %s: %w", len(data), b.name, err)
		}
		if direct {
			l.stats.directPuts.Add(1)
		} else if len(data) >= writebackMin {
			startWriteback(b.fd, off, uint64(len(data)))
		}
		l.stats.puts.Add(1)
		l.stats.putBytes.Add(uint64(len(data)))
		return Pointer{Backing: b.id, Offset: off, Length: uint32(len(data)), CRC: crc}, nil
	}
	return Pointer{}, fmt.Errorf("slice: put: every backing file has a failed sync (reopen the store): %w", l.writable[hint%n].syncFailed())
}

// append writes data at the end of b and returns its offset, whether it
// went direct (see appendDirect) and its CRC32C: pl.crc if pl.known
// (PutPayload), else computed here. A failed write still consumes its
// range, which is never handed out and never reused.
func (l *Local) append(b *backing, pl Payload, unstaged bool, loan *Loan) (off uint64, direct bool, crc uint32, err error) {
	data, crc := pl.data, pl.crc
	haveCRC := pl.known
	if b.dfd >= 0 && !b.directOff.Load() && len(data) >= l.directMin {
		var refused bool
		off, crc, refused, err = l.appendDirect(b, pl, unstaged, loan)
		if !refused {
			return off, true, crc, err
		}
		haveCRC = true
		if !b.directOff.Swap(true) {
			l.log.Warn("O_DIRECT write refused; this backing file falls back to buffered writes", "backing", b.id, "err", err)
		}
	}
	if !haveCRC {
		crc = Checksum(data)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if off, ok := l.takeReuse(b, alignUp(uint64(len(data)))); ok {
		return off, false, crc, b.writeReused(data, off)
	}
	off, err = b.appendBuffered(data)
	return off, false, crc, err
}

// writeReused writes data through the page cache at off, in a range taken
// from the reuse pool, and marks it dirty for Sync. b.mu is held. A failed
// write leaves the range garbage, which the collector finds again.
func (b *backing) writeReused(data []byte, off uint64) error {
	n, err := b.f.WriteAt(data, int64(off))
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return err
	}
	b.smu.Lock()
	b.smu.dirty = append(b.smu.dirty, &dirtyWrite{off: off, end: off + alignUp(uint64(len(data)))})
	b.smu.Unlock()
	return nil
}

// appendBuffered writes data at b's size through the page cache. b.mu is
// held.
func (b *backing) appendBuffered(data []byte) (uint64, error) {
	off := b.size.Load()
	// WriteAt, not Write: vfs.File.Write may scribble on its argument.
	n, err := b.f.WriteAt(data, int64(off))
	b.size.Store(off + uint64(len(data)))
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	return off, err
}

// maxDirectInflight bounds the asynchronous direct writes of one store
// (and so their staging buffers: MaxSize each).
const maxDirectInflight = 16

// appendDirect copies data into a pooled 4 KiB-aligned staging buffer
// (zero-padded to a multiple of 4 KiB), computing its CRC32C on the way
// (copyChecksum), reserves b's size rounded up to
// 4 KiB under b.mu, and writes it there with O_DIRECT outside the mutex.
// The gap before the slice and the padding after it are garbage.
//
// The first direct write to a file runs before appendDirect returns, as a
// probe: refused reports that the file system refused it (EINVAL: no
// O_DIRECT or a stricter alignment), and the caller falls back to a
// buffered write (the reserved range is garbage). Once one succeeded, the
// writes are asynchronous: appendDirect returns when the write is
// started, at most maxDirectInflight run at once per store, and until one
// returns it is listed in b.dmu, where Sync (see written), ReadAt and Free
// wait for it (waitDirect). A failed asynchronous write fails the Sync and
// WaitWritten of its pointer (its range is remembered: backing.dmu.failed)
// but not the file, which a failed fdatasync would (that one may have
// dropped dirty pages of other puts; a failed direct write wrote nothing
// else); a refused one is redone buffered at the same offset.
//
// With LocalOptions.Unstaged, data that is already 4 KiB-aligned in
// memory and a multiple of 4 KiB long (isAligned) is not staged: it is written straight from the
// caller's buffer, synchronously like the probe (the caller may reuse the
// buffer once Put returns), with its CRC computed in a separate pass. A
// failed write then fails the Put itself; a refused one falls back to a
// buffered put as at the probe.
//
// pl.known says pl.crc is the data's CRC32C already (PutPayload): it is
// returned as it is, and the data is not hashed (staged puts are a plain
// copy). With a loan (WithLoan) aligned data is not staged either, but
// written in the background from the caller's buffer like staged data:
// the put holds the loan until its write is done (the caller keeps the
// buffer unchanged until then). Such data is hashed, if its CRC is not
// known, only once its write has started: the hashing overlaps the
// device write instead of delaying its start (both only read the
// buffer).
func (l *Local) appendDirect(b *backing, pl Payload, unstaged bool, loan *Loan) (off uint64, crc uint32, refused bool, err error) {
	data, crc := pl.data, pl.crc
	var ab *[]byte // the staging buffer; nil: writing from data itself
	var buf []byte
	lent := false // writing from data in the background, holding loan
	hash := false // data's CRC is still to be computed
	n := alignUp(uint64(len(data)))
	switch {
	case isAligned(data) && (unstaged || loan != nil):
		buf = data
		hash = !pl.known
		if loan != nil {
			lent = true
			loan.hold()
			l.stats.lentPuts.Add(1)
		}
	case pl.known:
		ab = l.getStaging()
		buf = (*ab)[:n]
		copy(buf, data)
		clear(buf[len(data):])
	default:
		ab = l.getStaging()
		buf = (*ab)[:n]
		crc = copyChecksum(buf, data)
		clear(buf[len(data):])
	}
	b.mu.Lock()
	off, reused := l.takeReuse(b, n)
	if !reused {
		off = alignUp(b.size.Load())
	}
	w := &directWrite{off: off, end: off + n, done: make(chan struct{}), reuse: reused}
	b.dmu.Lock()
	b.dmu.writes = append(b.dmu.writes, w)
	b.dmu.Unlock()
	var dw *dirtyWrite
	if reused {
		// Below the size: Sync must see it (kick). Covered only below
		// the synced watermark, in allocated ranges: there the file's
		// size and allocation are durable (a pooled range may come from
		// a put that was never synced, from before a restart, or be a
		// hole DrainPool punched).
		dw = &dirtyWrite{off: off, end: off + n, done: w.done}
		b.smu.Lock()
		dw.covered = l.covered && off+n <= b.smu.synced &&
			byterange.Of(off, off+n).Subtract(b.smu.allocated).Total() == 0
		b.smu.dirty = append(b.smu.dirty, dw)
		b.smu.Unlock()
	} else {
		b.size.Store(off + n) // after listing w: see written
	}
	b.mu.Unlock()
	finish := func() {
		b.dmu.Lock()
		b.dmu.writes = slices.DeleteFunc(b.dmu.writes, func(x *directWrite) bool { return x == w })
		b.dmu.Unlock()
		close(w.done)
		if ab != nil {
			l.directBufs <- ab
		}
		if lent {
			loan.Release()
		}
	}
	if (ab == nil && !lent) || !b.directOK.Load() {
		defer finish()
		if hash {
			crc = Checksum(data)
		}
		err := b.writeDirect(buf, off)
		if err != nil && dw != nil {
			dw.uncover(b)
		}
		if err == nil {
			b.directOK.Store(true)
			if ab == nil && !lent {
				l.stats.unstagedPuts.Add(1)
			}
		}
		return off, crc, err != nil && directRefused(err), err
	}
	l.directWG.Add(1)
	go func() {
		defer l.directWG.Done()
		defer finish()
		err := b.writeDirect(buf, off)
		if err != nil && dw != nil {
			// Redone buffered, or failed: not a completed direct write.
			dw.uncover(b)
		}
		if err != nil && directRefused(err) {
			if !b.directOff.Swap(true) {
				l.log.Warn("O_DIRECT write refused; this backing file falls back to buffered writes", "backing", b.id, "err", err)
			}
			var k int
			k, err = b.f.WriteAt(buf[:len(data)], int64(off))
			if err == nil && k != len(data) {
				err = io.ErrShortWrite
			}
		}
		if err != nil {
			// Recorded before finish takes the write off the in-flight
			// list, so whoever waited for it sees the failure.
			err = fmt.Errorf("slice: direct write of [%d, %d) to %s failed: %w", off, off+n, b.name, err)
			if dw != nil {
				dw.failed(b, err)
			}
			b.dmu.Lock()
			remembered := len(b.dmu.failed) < maxFailedWrites
			if remembered {
				b.dmu.failed = append(b.dmu.failed, failedWrite{off: off, end: off + n, err: err})
			}
			b.dmu.Unlock()
			if !remembered {
				b.smu.Lock()
				if b.smu.failed == nil {
					b.smu.failed = fmt.Errorf("%w; too many failed writes: its bytes past %d are not durable and never will be reported so", err, b.smu.synced)
				}
				b.smu.Unlock()
			}
			l.log.Error("direct write failed; the commit of its put fails", "backing", b.id, "off", off, "err", err)
		}
	}()
	if lent && loan.eager {
		runtime.Gosched() // see NewEagerLoan
	}
	if hash {
		crc = Checksum(data) // while the write runs
	}
	return off, crc, false, nil
}

// getStaging returns a 4 KiB-aligned staging buffer of alignUp(MaxSize)
// bytes, waiting while maxDirectInflight are in use. The buffers are kept
// for the store's life (not in a sync.Pool, which drops them at every GC):
// a fresh 1 MiB buffer costs page faults on every use on this project's VM
// (see "Direct writes" in the package doc).
func (l *Local) getStaging() *[]byte {
	select {
	case b := <-l.directBufs:
		return b
	default:
	}
	if l.directMade.Add(1) <= maxDirectInflight {
		return newAligned()
	}
	l.directMade.Add(-1)
	return <-l.directBufs
}

// vfsDirectFD stands for the descriptor of direct writes through the vfs
// (LocalOptions.DirectVFS).
const vfsDirectFD = 1 << 30

// writeDirect writes all of buf at off through b's O_DIRECT descriptor
// (or, with LocalOptions.DirectVFS, through b.f).
func (b *backing) writeDirect(buf []byte, off uint64) error {
	for done := 0; done < len(buf); {
		var k int
		var err error
		if b.dvfs {
			k, err = b.f.WriteAt(buf[done:], int64(off)+int64(done))
		} else {
			k, err = pwriteDirect(b.dfd, buf[done:], int64(off)+int64(done))
		}
		if err != nil {
			if done > 0 && directRefused(err) {
				err = fmt.Errorf("after %d bytes: %w", done, io.ErrShortWrite)
			}
			return err
		}
		if k <= 0 {
			return io.ErrShortWrite
		}
		done += k
	}
	return nil
}

// directWrite is an O_DIRECT write in flight to [off, end).
type directWrite struct {
	off, end uint64
	done     chan struct{} // closed when the write returned
	reuse    bool          // into reused space below size (see dirtyWrite)
}

// waitDirect waits until no direct write overlapping [off, end) is in
// flight.
func (b *backing) waitDirect(off, end uint64) {
	for {
		var done chan struct{}
		b.dmu.Lock()
		for _, w := range b.dmu.writes {
			if w.off < end && off < w.end {
				done = w.done
				break
			}
		}
		b.dmu.Unlock()
		if done == nil {
			return
		}
		<-done
	}
}

// written returns how far b is written: its size, or the offset of the
// lowest direct write still in flight (with that write's done channel) if
// that is lower. Every byte below it has been written (or its write
// failed), so an fdatasync started now covers them. Writes into reused
// space are not counted here: they are tracked as dirty (see kick). A direct write is
// listed before size covers it, so loading size first and then scanning
// the list never misses one.
func (b *backing) written() (uint64, chan struct{}) {
	v := b.size.Load()
	var done chan struct{}
	b.dmu.Lock()
	defer b.dmu.Unlock()
	for _, w := range b.dmu.writes {
		if !w.reuse && w.off < v {
			v, done = w.off, w.done
		}
	}
	return v, done
}

// alignUp rounds n up to a multiple of directAlign.
func alignUp(n uint64) uint64 { return (n + directAlign - 1) &^ (directAlign - 1) }

func (b *backing) syncFailed() error {
	b.smu.Lock()
	defer b.smu.Unlock()
	return b.smu.failed
}

// Sync implements Store. Pointers are grouped by backing file; each file
// with something to make durable gets (or joins) one SyncData, and the
// files are synced in parallel. A SyncData in flight covers every byte
// written before it started; callers needing later bytes wait for the next
// one, which then covers all of them. After a SyncData fails the file's
// un-synced bytes are never reported durable (see the package doc).
func (l *Local) Sync(ctx context.Context, ptrs []Pointer) error {
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.exit()
	l.stats.syncs.Add(1)
	var targets []syncTarget
	for _, p := range ptrs {
		b, err := l.check(p, 0, 0)
		if err != nil {
			return err
		}
		if end := p.End(); end > b.size.Load() {
			return fmt.Errorf("%w: %v: beyond the %d bytes written", ErrBadPointer, p, b.size.Load())
		}
		i := slices.IndexFunc(targets, func(t syncTarget) bool { return t.b == b })
		if i < 0 {
			targets = append(targets, syncTarget{b: b})
			i = len(targets) - 1
		}
		targets[i].upto = max(targets[i].upto, p.End())
		targets[i].ranges = append(targets[i].ranges, Range{Start: p.Offset, End: p.End()})
	}
	if err := l.syncTargets(ctx, targets, nil); err != nil {
		return err
	}
	// The fdatasync covered their ranges; a direct write that failed put
	// nothing there (recorded before it left the in-flight list, which
	// the sync waited for).
	return l.checkWritten(ptrs)
}

// checkWritten returns the error of a failed direct write of one of ptrs.
func (l *Local) checkWritten(ptrs []Pointer) error {
	for _, p := range ptrs {
		if err := l.byID[p.Backing].failedIn(p.Offset, p.End()); err != nil {
			return err
		}
	}
	return nil
}

// WaitWritten waits until the slices named by ptrs are written (their
// direct writes, which Put may leave running, have landed; nothing is
// flushed) and returns an error if a write failed. A commit whose slices
// the store will make durable later (datadir's ordered log: SyncAll before
// the log write) calls it so that it never names a failed write.
func (l *Local) WaitWritten(ctx context.Context, ptrs []Pointer) error {
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.exit()
	for _, p := range ptrs {
		b, err := l.check(p, 0, 0)
		if err != nil {
			return err
		}
		b.waitDirect(p.Offset, p.End())
	}
	return l.checkWritten(ptrs)
}

// Pledge lets a commit name slices whose direct writes are still running,
// for a caller whose log write is ordered after the slice data (datadir:
// SyncAll, or SyncAllDeferred and a device flush after its wait, before
// any log byte is acknowledged durable). It returns the pointers among
// ptrs it could not pledge, for the caller to wait for (WaitWritten) or
// sync as before: those whose write has returned, and every put that is
// not a covered put into reused space (LocalOptions.Covered). A pledged
// put's write is not waited for: readers wait for it (ReadAt), and every
// later SyncAll does. If it then fails, its file's syncs fail for good
// (as after a failed fdatasync), so the commit that names it never becomes
// durable; a store whose writes are pledged trades that for the commit's
// work overlapping the device write (docs/nfs-server.md "Session 12").
func (l *Local) Pledge(ctx context.Context, ptrs []Pointer) ([]Pointer, error) {
	if err := l.enter(ctx); err != nil {
		return nil, err
	}
	defer l.exit()
	var rest []Pointer
	for _, p := range ptrs {
		b, err := l.check(p, 0, 0)
		if err != nil {
			return nil, err
		}
		pledged := false
		b.smu.Lock()
		for _, d := range b.smu.dirty {
			if d.off <= p.Offset && p.End() <= d.end && d.covered && !d.written() {
				d.pledged, pledged = true, true
				break
			}
		}
		b.smu.Unlock()
		if !pledged {
			rest = append(rest, p)
		}
	}
	return rest, nil
}

// SyncAllDeferred is SyncAll except that it does not wait for the covered
// puts (LocalOptions.Covered) whose direct writes are still running: the
// caller may hand its log bytes to the OS meanwhile, and waits for the
// returned Deferred, if not nil, before the device flush that
// acknowledges them. The Deferred holds the pledged ones (Pledge); a
// covered put not pledged is named by no commit yet (its commit waits for
// the write before it commits), so neither the log bytes written now nor
// their flush need it (SyncAll waits for those too). A log record that
// reaches the disk before a pledged write completes belongs to a commit
// not yet acknowledged, which recovery cuts if the write's bytes are
// missing (docs/engine.md "Covered puts").
func (l *Local) SyncAllDeferred(ctx context.Context) (*Deferred, error) {
	if err := l.enter(ctx); err != nil {
		return nil, err
	}
	defer l.exit()
	var running []deferredWrite
	if err := l.syncTargets(ctx, l.allTargets(true), &running); err != nil {
		return nil, err
	}
	if len(running) == 0 {
		return nil, nil
	}
	return &Deferred{l: l, running: running}, nil
}

// Deferred are the running covered writes a SyncAllDeferred left to its
// caller's device flush.
type Deferred struct {
	l       *Local
	running []deferredWrite
}

// deferredWrite is a running covered put SyncAllDeferred left to its
// caller's flush.
type deferredWrite struct {
	b *backing
	d *dirtyWrite
}

// Done reports whether every write has returned (Wait would not block on
// them).
func (w *Deferred) Done() bool {
	for _, r := range w.running {
		if !r.d.written() {
			return false
		}
	}
	return true
}

// Wait returns once every write returned, after syncing, as SyncAll
// would, any that did not complete as a covered write (redone buffered,
// or failed: the failure of a pledged one is then the error, see Pledge).
// A device flush started after it returns makes them durable.
func (w *Deferred) Wait(ctx context.Context) error {
	uncovered := false
	for _, r := range w.running {
		select {
		case <-r.d.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.b.smu.Lock()
		uncovered = uncovered || !r.d.covered
		r.b.smu.Unlock()
	}
	if uncovered {
		return w.l.SyncAll(ctx)
	}
	return nil
}

// SyncAll makes every slice whose Put returned before the call durable:
// each backing file is synced up to its size at the call (group-committed
// with concurrent Syncs like Sync). A store that orders its log writes
// after the slice data (see datadir) calls it before any log byte reaches
// the OS.
func (l *Local) SyncAll(ctx context.Context) error {
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.exit()
	return l.syncTargets(ctx, l.allTargets(false), nil)
}

// allTargets are SyncAll's and SyncAllDeferred's targets: every backing
// file with bytes, whole.
func (l *Local) allTargets(deferCovered bool) []syncTarget {
	var targets []syncTarget
	for _, b := range l.all {
		if size := b.size.Load(); size > 0 {
			targets = append(targets, syncTarget{b: b, upto: size, all: true, deferCovered: deferCovered})
		}
	}
	return targets
}

type syncTarget struct {
	b      *backing
	upto   uint64
	ranges []Range // the pointers' ranges (a dirty one needs a SyncData)
	all    bool    // every dirty range needs one (SyncAll)
	// deferCovered: covered puts still being written are not waited for
	// but listed (SyncAllDeferred).
	deferCovered bool
}

// syncTargets makes the first upto bytes of each target's backing durable.
// running collects the covered puts still being written of targets with
// deferCovered (nil without).
func (l *Local) syncTargets(ctx context.Context, targets []syncTarget, running *[]deferredWrite) error {
	for len(targets) > 0 {
		var calls []*syncCall
		var lead []int // indexes into calls of the SyncData this caller runs
		next := targets[:0]
		var kickErr error
		for _, t := range targets {
			c, leader, err := l.kick(t, running)
			if err != nil {
				kickErr = err
				break
			}
			if c != nil {
				if leader {
					lead = append(lead, len(calls))
				}
				calls = append(calls, c)
				next = append(next, t)
			}
		}
		// The caller that starts a SyncData runs it itself (the last one
		// inline, any others in parallel): no goroutine hand-off on the
		// common single-file path. It cannot abandon it, even if ctx ends.
		// A started SyncData must run even if this caller fails: others
		// may be waiting for it.
		for i, ci := range lead {
			b := next[ci].b
			if i < len(lead)-1 || kickErr != nil {
				go l.runSync(b, calls[ci])
			} else {
				l.runSync(b, calls[ci])
			}
		}
		if kickErr != nil {
			return kickErr
		}
		for _, c := range calls {
			select {
			case <-c.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		targets = next
	}
	return nil
}

// kick returns nil if t's bytes are durable (b's first upto bytes, and no
// put into reused space overlapping t.ranges, or any with t.all, is
// dirty), the sticky error if b's sync failed, or else the SyncData call to
// wait for; leader is true if the call is new and the caller must run it
// (runSync). The caller re-checks after the call finishes.
func (l *Local) kick(t syncTarget, running *[]deferredWrite) (c *syncCall, leader bool, err error) {
	b, upto := t.b, t.upto
	b.smu.Lock()
	defer b.smu.Unlock()
	dirty := false
	var unwritten chan struct{}
	// Completed covered puts need no SyncData: the caller's device flush
	// makes them durable (LocalOptions.Covered). They stay listed (so
	// Covered reports them) until a SyncData covers them; past
	// maxCovered listed, one does.
	skipCovered := len(b.smu.dirty) <= maxCovered
	for _, d := range b.smu.dirty {
		if t.all || slices.ContainsFunc(t.ranges, func(r Range) bool { return r.Start < d.end && d.off < r.End }) {
			written := d.written()
			if written && d.covered && skipCovered {
				continue
			}
			if !written && d.covered && t.deferCovered {
				// Only a pledged put's commit may be in the log
				// already; the commit of any other waits for its
				// write itself (Pledge), so this sync needs neither.
				if d.pledged && !slices.ContainsFunc(*running, func(w deferredWrite) bool { return w.d == d }) {
					*running = append(*running, deferredWrite{b: b, d: d})
				}
				continue
			}
			dirty = true
			if !written {
				unwritten = d.done
			}
		}
	}
	if b.smu.synced >= upto && !dirty {
		return nil, false, nil
	}
	if b.smu.failed != nil {
		return nil, false, b.smu.failed
	}
	if c := b.smu.inflight; c != nil {
		return c, false, nil
	}
	written, done := b.written()
	if written < upto && done != nil {
		// A direct write below upto is still running: wait for it
		// rather than fsync before it lands.
		return &syncCall{done: done}, false, nil
	}
	if unwritten != nil {
		// Likewise for a direct write into reused space.
		return &syncCall{done: unwritten}, false, nil
	}
	c = &syncCall{upto: written, done: make(chan struct{})}
	for _, d := range b.smu.dirty {
		if d.written() {
			c.covers = append(c.covers, d)
		}
	}
	b.smu.inflight = c
	return c, true, nil
}

// maxCovered bounds the dirty writes a file lists: past it, Sync and
// SyncAll fdatasync the file even for covered puts alone, which empties
// the list (one extra flush per maxCovered covered puts to a file that
// takes no other).
const maxCovered = 256

// Covered returns the pointers among ptrs that may be covered puts
// (LocalOptions.Covered): direct puts into reused space that no completed
// SyncData covers yet, which Sync and SyncAll do not fdatasync for. A
// pointer not returned is durable once Sync or SyncAll returns. The
// caller records the returned ones with its commit (recovery checks them,
// see docs/engine.md "Covered puts"); a pointer returned that turns out
// synced after all costs only that record.
func (l *Local) Covered(ptrs []Pointer) []Pointer {
	if !l.covered {
		return nil
	}
	var out []Pointer
	for _, p := range ptrs {
		b := l.byID[p.Backing]
		if b == nil {
			continue
		}
		b.smu.Lock()
		if slices.ContainsFunc(b.smu.dirty, func(d *dirtyWrite) bool { return d.covered && d.off < p.End() && p.Offset < d.end }) {
			out = append(out, p)
		}
		b.smu.Unlock()
	}
	return out
}

// runSync performs one SyncData. Close waits for it (via smu.inflight).
func (l *Local) runSync(b *backing, c *syncCall) {
	l.stats.fsyncs.Add(1)
	err := b.f.SyncData()
	b.smu.Lock()
	if err != nil {
		b.smu.failed = fmt.Errorf("slice: sync %s failed; its bytes past %d are not durable and never will be reported so: %w",
			b.name, b.smu.synced, err)
		l.log.Error("fsync failed; backing file no longer accepts puts", "backing", b.id, "synced", b.smu.synced, "err", err)
	} else {
		b.smu.allocated = b.smu.allocated.Union(l.allocatedBy(b, c)) // before synced moves
		if c.upto > b.smu.synced {
			b.smu.synced = c.upto
		}
		if len(c.covers) > 0 {
			b.smu.dirty = slices.DeleteFunc(b.smu.dirty, func(d *dirtyWrite) bool { return slices.Contains(c.covers, d) })
		}
	}
	b.smu.inflight = nil
	b.smu.Unlock()
	close(c.done)
}

// allocatedBy returns the ranges of b whose allocation the successful
// SyncData c made durable (see backing.smu.allocated): the appends of this
// run between the synced watermark and c.upto (once: a range punched
// since it was first synced must not come back) and the reused-space
// puts it covers, less the puts into
// reused space that were not written when it started and the direct
// writes that failed; at the first, the data ranges at open (preOpen);
// less the ranges punched while it ran. b.smu is held.
func (l *Local) allocatedBy(b *backing, c *syncCall) byterange.Set {
	var add, not byterange.Set
	if lo := max(b.smu.base, b.smu.synced); c.upto > lo {
		add = byterange.Of(lo, c.upto)
	}
	for _, d := range c.covers {
		add = append(add, Range{Start: d.off, End: d.end})
	}
	for _, d := range b.smu.dirty {
		if !slices.Contains(c.covers, d) {
			not = append(not, Range{Start: d.off, End: d.end})
		}
	}
	b.dmu.Lock()
	for _, f := range b.dmu.failed {
		not = append(not, Range{Start: f.off, End: f.end})
	}
	b.dmu.Unlock()
	add = add.Normalize().Subtract(not.Normalize())
	// The data at open stays allocated whatever was written over it
	// since; punch took out what it punched.
	add = add.Union(b.smu.preOpen)
	b.smu.preOpen = nil
	return add.Subtract(c.punched)
}

// check validates p and the sub-range [off, off+n) and returns p's backing.
// Every malformed pointer is ErrBadPointer, whatever its fields hold.
func (l *Local) check(p Pointer, off uint32, n int) (*backing, error) {
	if err := checkRange(p, off, n); err != nil {
		return nil, err
	}
	b := l.byID[p.Backing]
	if b == nil {
		return nil, fmt.Errorf("%w: %v: no backing file %d", ErrBadPointer, p, p.Backing)
	}
	return b, nil
}

// checkRange validates p's shape and the sub-range [off, off+n) without
// looking at any store.
func checkRange(p Pointer, off uint32, n int) error {
	if p.Length == 0 || p.Length > MaxSize {
		return fmt.Errorf("%w: %v: length %d", ErrBadPointer, p, p.Length)
	}
	if p.Offset > math.MaxInt64-uint64(p.Length) {
		return fmt.Errorf("%w: %v: offset out of range", ErrBadPointer, p)
	}
	if n < 0 || uint64(off)+uint64(n) > uint64(p.Length) {
		return fmt.Errorf("%w: %v: range [%d, %d+%d) outside the slice", ErrBadPointer, p, off, off, n)
	}
	return nil
}

// ReadAt implements Store. It reads the whole slice, verifies its length and
// CRC32C, then copies the requested range; with off == 0 and
// len(buf) == p.Length it reads straight into buf. An empty buf still
// verifies the slice (fsck). On error buf's contents are unspecified.
func (l *Local) ReadAt(ctx context.Context, p Pointer, off uint32, buf []byte) error {
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.exit()
	b, err := l.check(p, off, len(buf))
	if err != nil {
		return err
	}
	if off == 0 && len(buf) == int(p.Length) {
		if err := l.readVerified(b, p, buf); err != nil {
			clear(buf)
			return err
		}
		return nil
	}
	sb := scratch.Get(int(p.Length))
	defer scratch.Put(sb)
	if err := l.readVerified(b, p, *sb); err != nil {
		return err
	}
	copy(buf, (*sb)[off:])
	return nil
}

// readVerified fills dst (len p.Length) with the slice and verifies it.
func (l *Local) readVerified(b *backing, p Pointer, dst []byte) error {
	if size := b.size.Load(); p.End() > size {
		return l.corrupt(p, fmt.Sprintf("ends past the end of %s (%d bytes)", b.name, size))
	}
	b.waitDirect(p.Offset, p.End())
	n, err := b.f.ReadAt(dst, int64(p.Offset))
	l.stats.reads.Add(1)
	l.stats.readBytes.Add(uint64(n))
	if n < len(dst) {
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("slice: read %v from %s: %w", p, b.name, err)
		}
		return l.corrupt(p, fmt.Sprintf("short read: %d of %d bytes (truncated %s?)", n, len(dst), b.name))
	}
	if got := Checksum(dst); got != p.CRC {
		return l.corrupt(p, fmt.Sprintf("checksum %08x", got))
	}
	return nil
}

func (l *Local) corrupt(p Pointer, why string) error {
	l.stats.corrupt.Add(1)
	l.log.Warn("corrupt slice", "ptr", p.String(), "why", why)
	return fmt.Errorf("%w: %v: %s", ErrCorrupt, p, why)
}

// Backings implements Store.
func (l *Local) Backings(ctx context.Context) ([]Backing, error) {
	if err := l.enter(ctx); err != nil {
		return nil, err
	}
	defer l.exit()
	out := make([]Backing, 0, len(l.all))
	for _, b := range l.all {
		size := b.size.Load()
		alloc, ok, err := allocated(b.fd)
		if err != nil {
			return nil, fmt.Errorf("slice: stat %s: %w", b.name, err)
		}
		if !ok {
			alloc = size
		}
		out = append(out, Backing{ID: b.id, Size: size, Allocated: alloc})
	}
	return out, nil
}

// Free implements Store. On an OS file it punches a hole
// (FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE); otherwise, or if the file
// system cannot punch, it writes zeros. Partial blocks at either end of the
// range are zeroed but stay allocated. The range must lie within the bytes
// appended so far, else ErrBadPointer. Free is not synced: after a crash
// the freed bytes may reappear (they are still unreferenced garbage).
// Local keeps no cache; a Cache in front of it drops its copies itself.
func (l *Local) Free(ctx context.Context, id uint32, off, length uint64) error {
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.exit()
	if length == 0 {
		return nil
	}
	b, err := l.freeCheck(id, off, length)
	if err != nil {
		return err
	}
	b.waitDirect(off, off+length) // else a write landing later would undo the free
	b.mu.Lock()
	defer b.mu.Unlock()
	return l.release(b, off, length)
}

// release punches (or zero-fills) [off, off+length) of b and takes it out
// of the reuse pool. b.mu is held.
func (l *Local) release(b *backing, off, length uint64) error {
	l.dropPool(b, off, off+length)
	return l.punch(b, off, length)
}

// punch punches (or zero-fills) [off, off+length) of b. b.mu is held.
func (l *Local) punch(b *backing, off, length uint64) error {
	// No longer allocated (backing.smu.allocated), even if the punch
	// fails halfway.
	b.smu.Lock()
	r := byterange.Of(off, off+length)
	b.smu.allocated = b.smu.allocated.Subtract(r)
	b.smu.preOpen = b.smu.preOpen.Subtract(r)
	if c := b.smu.inflight; c != nil {
		c.punched = c.punched.Union(r)
	}
	b.smu.Unlock()
	punched, err := punchHole(b.fd, off, length)
	if err != nil {
		return fmt.Errorf("slice: free [%d, %d+%d) in %s: %w", off, off, length, b.name, err)
	}
	if !punched {
		for done := uint64(0); done < length; {
			n := min(length-done, uint64(len(zeros)))
			if _, err := b.f.WriteAt(zeros[:n], int64(off+done)); err != nil {
				return fmt.Errorf("slice: free [%d, %d+%d) in %s: zero fill: %w", off, off, length, b.name, err)
			}
			done += n
		}
	}
	l.stats.frees.Add(1)
	l.stats.freeBytes.Add(length)
	return nil
}

// zeros is the source of zero-fills; never written.
var zeros [64 << 10]byte

// Close implements Store. It waits for running operations and in-flight
// fsyncs, then closes the backing files. Un-synced data may be lost.
func (l *Local) Close() error {
	l.life.Lock()
	defer l.life.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.closed = true
	l.directWG.Wait()
	for _, b := range l.all {
		b.smu.Lock()
		c := b.smu.inflight
		b.smu.Unlock()
		if c != nil {
			<-c.done
		}
	}
	return l.closeFiles()
}

func (l *Local) closeFiles() error {
	var errs []error
	for _, b := range l.all {
		if b.f != nil {
			errs = append(errs, b.f.Close())
			b.f = nil
		}
		if b.dfd >= 0 && !b.dvfs {
			errs = append(errs, closeDirect(b.dfd))
		}
		b.dfd = -1
	}
	if l.lock != nil {
		errs = append(errs, l.lock.Close())
		l.lock = nil
	}
	return errors.Join(errs...)
}
