package datadir

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
	"github.com/txnfs/txnfs/slice"
)

// Recovery of covered puts (docs/engine.md "Covered puts"). With
// Options.Covered a durable commit whose slices went with O_DIRECT into
// reused space gets one device flush, the metadata log's: its slice
// bytes and its log record become durable under the same flush. A device
// that destages its volatile cache in any order can, on a power cut
// during that flush, keep the record and lose the bytes. Such a commit
// was never acknowledged (its flush did not complete), and neither was
// any commit after it in the log: an acknowledged later commit's flush
// started after that record was written, which was after its slice
// writes completed, so it would have made them durable. Each such commit
// wrote, in its own batch, a descriptor of its covered slices
// (meta.CoveredKey); recoverCovered checks every descriptor left and, if
// one names bytes that are not there, cuts the log before the earliest
// such commit's record.

// maxCuts bounds the check-and-cut rounds of recoverCovered: a cut
// removes every failing descriptor that is in the log; one that is not
// (it reached an sstable, whose sync flushed its commit's slices too) is
// damage: logged, not cut, and the store opens.
const maxCuts = 3

// recoverCovered checks the covered-put descriptors of the data directory
// dir and cuts the metadata log as described above. It runs before the
// metadata store is opened for writing: pebble opened read-only replays
// the log into memory and writes nothing, and the cut is made with
// pebble's own log reader (package wal) on the log files it reads.
func recoverCovered(disk vfs.FS, dir string, log *slog.Logger) error {
	metaDir := filepath.Join(dir, "meta")
	names, err := disk.List(metaDir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", metaDir, err)
	}
	if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "MANIFEST-") }) {
		return nil // a new store
	}
	// A cut that crashed before its rename left its copy behind; the log
	// it was copied from is intact (the rename is the cut).
	for _, n := range names {
		if strings.HasSuffix(n, cutSuffix) {
			if err := disk.Remove(filepath.Join(metaDir, n)); err != nil {
				return fmt.Errorf("covered puts: removing %s left by a crashed cut: %w", n, err)
			}
			log.Info("covered puts: removed the copy of a cut that did not finish", "file", n)
		}
	}
	for round := 0; ; round++ {
		bad, total, flushed, acked, err := checkCovered(disk, dir)
		if err != nil {
			return err
		}
		if len(bad) == 0 {
			if round > 0 || total > 0 {
				log.Info("covered puts checked", "descriptors", total, "cuts", round)
			}
			return nil
		}
		if round == maxCuts {
			// Unreachable unless cutLog misjudged a record: open anyway.
			log.Error("covered puts: descriptors still name missing slice bytes after log cuts; opening with them (reads of those slices fail, fsck reports them)",
				"cuts", round, "bad", describeBad(bad))
			return nil
		}
		cut, err := cutLog(disk, metaDir, bad, flushed, acked, log)
		if err != nil {
			return err
		}
		if !cut {
			// The records are not in the log the store replays: their
			// commits were flushed (an sstable's sync flushed their
			// slices too), so the bytes were lost or changed since —
			// damage, which cutting would not undo.
			log.Error("covered puts: descriptors name slice bytes that are not on disk, but their commits are not in the metadata log's unflushed tail: damage, not an unfinished commit; opening (reads of those slices fail, fsck reports them)",
				"bad", describeBad(bad))
			return nil
		}
	}
}

// badDescriptor is a descriptor whose slices are not all on disk.
type badDescriptor struct {
	value []byte
	why   string
}

func describeBad(bad map[string]badDescriptor) string {
	var s []string
	for k, b := range bad {
		s = append(s, fmt.Sprintf("%x: %s", k, b.why))
	}
	slices.Sort(s)
	return strings.Join(s, "; ")
}

// pebbleQuiet adapts pebble's logger to slog at debug level.
type pebbleQuiet struct{}

func (pebbleQuiet) Infof(string, ...any)              {}
func (pebbleQuiet) Errorf(string, ...any)             {}
func (pebbleQuiet) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// checkCovered opens the metadata store read-only and checks every
// descriptor's slices against the backing files; it returns the failing
// descriptors by key, the number checked, the largest sequence number in
// the store's sstables (every log record up to it was flushed: not in the
// log that the store replays, and not to be cut) and the store's
// acknowledgement watermark (meta.CoveredAckedKey; 0 if none).
func checkCovered(disk vfs.FS, dir string) (bad map[string]badDescriptor, total int, flushed, acked uint64, err error) {
	db, err := pebble.Open(filepath.Join(dir, "meta"), &pebble.Options{FS: disk, ReadOnly: true, Logger: pebbleQuiet{}})
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("opening the metadata read-only to check covered puts: %w", err)
	}
	defer db.Close()
	if v, closer, err := db.Get(meta.MiscKey(meta.CoveredAckedKey)); err == nil {
		if len(v) == 8 {
			acked = binary.BigEndian.Uint64(v)
		}
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return nil, 0, 0, 0, err
	}
	levels, err := db.SSTables()
	if err != nil {
		return nil, 0, 0, 0, err
	}
	for _, l := range levels {
		for _, t := range l {
			flushed = max(flushed, uint64(t.LargestSeqNum))
		}
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: meta.CoveredPrefix(), UpperBound: kv.PrefixEnd(meta.CoveredPrefix())})
	if err != nil {
		return nil, 0, 0, 0, err
	}
	defer it.Close()
	files := map[uint32]vfs.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	bad = map[string]badDescriptor{}
	var buf []byte
	for it.First(); it.Valid(); it.Next() {
		total++
		v := it.Value()
		why, err := verifyDescriptor(disk, dir, files, v, &buf)
		if err != nil {
			return nil, 0, 0, 0, err
		}
		if why != "" {
			bad[string(it.Key())] = badDescriptor{value: bytes.Clone(v), why: why}
		}
	}
	return bad, total, flushed, acked, it.Error()
}

// verifyDescriptor checks the slices of one descriptor value; it returns
// why one is not on disk ("" if all are), or an I/O error.
func verifyDescriptor(disk vfs.FS, dir string, files map[uint32]vfs.File, v []byte, buf *[]byte) (string, error) {
	if len(v) == 0 || len(v)%slice.PointerSize != 0 {
		return fmt.Sprintf("malformed descriptor (%d bytes)", len(v)), nil
	}
	for ; len(v) > 0; v = v[slice.PointerSize:] {
		p, err := slice.DecodePointer(v[:slice.PointerSize])
		if err != nil {
			return err.Error(), nil
		}
		f := files[p.Backing]
		if f == nil {
			name := filepath.Join(dir, "slices", slice.BackingName(p.Backing))
			f, err = disk.Open(name)
			if oserror.IsNotExist(err) {
				return fmt.Sprintf("%v: no backing file", p), nil
			}
			if err != nil {
				return "", fmt.Errorf("covered puts: %w", err)
			}
			files[p.Backing] = f
		}
		if cap(*buf) < int(p.Length) {
			*buf = make([]byte, p.Length)
		}
		b := (*buf)[:p.Length]
		n, err := f.ReadAt(b, int64(p.Offset))
		if n < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				return fmt.Sprintf("%v: past the end of the backing file", p), nil
			}
			return "", fmt.Errorf("covered puts: reading %v: %w", p, err)
		}
		if c := slice.Checksum(b); c != p.CRC {
			return fmt.Sprintf("%v: checksum %08x", p, c), nil
		}
	}
	return "", nil
}

// cutLog reports whether it cut the log: it finds, with pebble's log
// reader, the record of each bad
// descriptor (the one that set its key to its value; keys are not
// reused), truncates the log holding the earliest of them just before it
// and deletes the later logs. A record whose batch sequence number is at
// most flushed is in an sstable too (its commit's data was flushed then):
// never cut; nor is one of a descriptor whose sequence is at most the
// acknowledgement watermark (acked, or a larger one a log record holds):
// its commit was acknowledged before that record was built, so its
// slices were durable and the failure is damage.
func cutLog(disk vfs.FS, metaDir string, bad map[string]badDescriptor, flushed, acked uint64, log *slog.Logger) (bool, error) {
	logs, err := wal.Scan(wal.Dir{FS: disk, Dirname: metaDir})
	if err != nil {
		return false, fmt.Errorf("covered puts: listing the metadata logs: %w", err)
	}
	type pos struct {
		log  int // index in logs
		off  wal.Offset
		recs int // records from the start of the log (for the report)
	}
	found := map[string]pos{}
	ackedKey := string(meta.MiscKey(meta.CoveredAckedKey))
	for i, ll := range logs {
		r := ll.OpenForRead()
		for recs := 0; ; recs++ {
			rec, off, err := r.NextRecord()
			if err != nil {
				// io.EOF, or the torn tail pebble's replay stops at too.
				break
			}
			data, err := io.ReadAll(rec)
			if err != nil {
				break
			}
			if h, ok := batchrepr.ReadHeader(data); !ok || uint64(h.SeqNum) <= flushed {
				continue
			}
			br := batchrepr.Read(data)
			for {
				kind, k, v, ok, err := br.Next()
				if err != nil || !ok {
					break
				}
				if kind != pebble.InternalKeyKindSet {
					continue
				}
				if string(k) == ackedKey && len(v) == 8 {
					acked = max(acked, binary.BigEndian.Uint64(v))
				}
				if d, isBad := bad[string(k)]; isBad && bytes.Equal(v, d.value) {
					found[string(k)] = pos{log: i, off: off, recs: recs}
				}
			}
		}
		r.Close()
	}
	for k := range found {
		if len(k) >= 9 && binary.BigEndian.Uint64([]byte(k[1:9])) <= acked {
			delete(found, k) // acknowledged: damage
		}
	}
	var first *pos
	var firstKey string
	for k, p := range found {
		if first == nil || p.log < first.log || p.log == first.log && p.off.Physical < first.off.Physical {
			p := p
			first, firstKey = &p, k
		}
	}
	if first == nil {
		return false, nil
	}
	if first.off.PreviousFilesBytes != 0 || logs[first.log].NumSegments() != 1 {
		return false, fmt.Errorf("covered puts: the record to cut is in a log of %d segments (WAL failover): not supported", logs[first.log].NumSegments())
	}
	var removed []string
	for _, ll := range logs[first.log+1:] {
		for s := 0; s < ll.NumSegments(); s++ {
			fs, name := ll.SegmentLocation(s)
			if err := fs.Remove(name); err != nil {
				return false, fmt.Errorf("covered puts: removing %s: %w", name, err)
			}
			removed = append(removed, name)
		}
	}
	if err := truncateFile(disk, first.off.PhysicalFile, first.off.Physical); err != nil {
		return false, fmt.Errorf("covered puts: cutting %s at %d: %w", first.off.PhysicalFile, first.off.Physical, err)
	}
	if err := syncDir(disk, metaDir); err != nil {
		return false, err
	}
	log.Warn("covered puts: a commit's log record reached the disk without its slice data (power cut during its flush); it and every later commit were never acknowledged: cut from the metadata log",
		"descriptor", fmt.Sprintf("%x", firstKey), "why", bad[firstKey].why, "log", first.off.PhysicalFile,
		"offset", first.off.Physical, "record", first.recs, "later_logs_removed", removed, "bad_descriptors", len(bad))
	return true, nil
}

// cutSuffix names truncateFile's copy of a log prefix until it is renamed
// over the log.
const cutSuffix = ".cut"

// truncateFile cuts name to size bytes (copying the prefix into a new file
// renamed over it: vfs has no truncate) and syncs it.
func truncateFile(disk vfs.FS, name string, size int64) error {
	src, err := disk.Open(name)
	if err != nil {
		return err
	}
	tmp := name + cutSuffix
	dst, err := disk.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		src.Close()
		return err
	}
	_, err = io.Copy(dst, io.NewSectionReader(src, 0, size))
	src.Close()
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = disk.Rename(tmp, name)
	}
	if err != nil {
		disk.Remove(tmp)
	}
	return err
}

// syncDir syncs directory dir.
func syncDir(disk vfs.FS, dir string) error {
	d, err := disk.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
