// Package slice stores immutable slices of file data and hands out
// self-contained Pointers to them (WTF §2.1–2.2).
//
// Slices are appended to several backing files; a Pointer names the backing
// file, offset, length and CRC32C, and every read verifies the checksum.
// Slices are never modified; unreferenced ones are found by the metadata
// scan in package fs and released with Free.
//
// # Stores
//
// Store is the interface; Local keeps slices in a directory of any vfs.FS
// (the project's one disk seam, shared with the pebble kv backend), and
// Cache is the memory tier placed in front of any Store:
//
//	l, err := slice.OpenLocal(ctx, slice.LocalOptions{Dir: dir})
//	store := slice.NewCache(l, 1<<30) // 1 GiB of verified slices in RAM
//	p, err := store.Put(ctx, regionID, data) // hint: same region, same file
//	err = store.Sync(ctx, []slice.Pointer{p}) // before committing metadata
//	err = store.ReadAt(ctx, p, off, buf)
//
// Package slicetest is the conformance suite every Store passes.
//
// # On-disk layout
//
// Dir holds backing files slices-000001.dat … slices-NNNNNN.dat and a lock
// file, slices.lock. A backing file is nothing but slice bytes appended
// back to back, with no headers, padding or index:
//
//	slices-000001.dat
//	+-----------+---------+------------+-----------+----------------+
//	| slice A   | slice B | (garbage)  | slice C   | un-synced tail |
//	+-----------+---------+------------+-----------+----------------+
//	0           A.End()   B.End()      C.Offset    Size
//
// Slices written with O_DIRECT (see Direct writes) start at a 4 KiB-aligned
// offset and are followed by zeros up to the next 4 KiB boundary; the gap
// before such a slice and its padding are garbage like any other.
//
// Everything needed to find and verify a slice is in its Pointer, whose
// 20-byte encoding (Pointer.AppendBinary) is
//
//	0        4                12       16       20
//	+--------+----------------+--------+--------+
//	|backing |     offset     | length |  crc   |   big endian
//	+--------+----------------+--------+--------+
//
// where crc is the CRC32C (Castagnoli, Checksum) of the slice's bytes and
// backing is the number in the file name (ids start at 1, so the zero
// Pointer is never valid). Garbage ranges (failed writes, freed slices, a
// crash's torn tail) need no bookkeeping: no durable pointer names them.
//
// # Put and locality
//
// Put appends to backing file hint%Files under that file's mutex and
// returns the Pointer; puts with one hint are adjacent on disk (WTF §2.7).
// A write that fails consumes its range, which is never handed out.
//
// # Direct writes
//
// On the OS file system (FS vfs.Default) puts of at least
// LocalOptions.DirectMin bytes (default 256 KiB) are written through a
// second, O_DIRECT descriptor of the backing file: Put copies the data
// into a 4 KiB-aligned staging buffer (zero-padded to 4 KiB; a store keeps
// at most 16 such 1 MiB buffers for its life), reserves the range under
// the file's mutex and starts the write; it returns without waiting, except
// for the first direct write to each file, which runs before Put returns
// as a probe. A write in flight is waited for by a Sync that needs bytes at
// or above it (an fdatasync covers only up to the lowest write in flight),
// by a ReadAt or Free of a range it overlaps, and by Close. A failed
// asynchronous direct write (ENOSPC, EIO) fails the Sync and WaitWritten of
// its own pointer, and only those: the file's range is remembered as
// failed (up to maxFailedWrites per file; past that the file's sync fails
// for good, as after a failed fdatasync, which may have dropped other
// puts' dirty pages), and the file keeps taking puts and syncing, as with
// buffered puts whose ENOSPC fails only that Put. A commit that does not
// sync its slices itself (NoSync over datadir's ordered log) waits for
// their writes with WaitWritten, so no commit names a failed range; until
// session 5 the failure was sticky, and datadir's SyncAll before every
// log write then stopped the whole store. One
// refused with EINVAL at the probe falls back to a buffered put, and later
// is redone buffered at the same offset; either way the file takes
// buffered writes from then on.
//
// With LocalOptions.Unstaged (txnfs serve), data already 4 KiB-aligned in
// memory and a multiple of 4 KiB long (an NFS WRITE's payload, which the
// server places so in its request record) is not staged: Put writes it with O_DIRECT straight from the caller's
// buffer, synchronously (the caller may reuse the buffer once Put
// returns), with the CRC32C computed in a separate pass
// (LocalStats.UnstagedPuts). Such a write is placed and tracked like a
// staged one (reuse pool, dirty ranges, in-flight list for concurrent
// Syncs); a failure fails the Put itself, as at the probe, and EINVAL
// falls back to a buffered put. A file system that refuses O_DIRECT at
// open gets buffered writes; other FSes (MemFS, errorfs wrappers, whose Fd
// passes through) never go direct.
//
// Why: measured on this project's VM (ext4 on virtio, docs/nfs-server.md
// "Benchmarks", nfs4 ENGINE-REQUESTS 8), a buffered 1 MiB append followed
// by fdatasync costs 7–14 ms per MiB, most of it in the kernel's copy into
// freshly allocated page-cache pages (the VM's free page reporting makes
// every first touch of such a page a host fault), against 1.5–2.4 ms per
// MiB with O_DIRECT, which needs no page-cache pages and leaves no dirty
// pages for fdatasync to write. The price: a stream of puts with one Sync
// at the end runs at the device's speed, not the page cache's (engine
// stream rows 0.35–1.0x of buffered in the same runs, docs/benchmarks.md).
// Reads still go through the page cache (the kernel keeps it coherent
// with direct writes), and recently written data stays in the memory tier
// (Cache). Sync still runs fdatasync (block allocation, file size, device
// cache flush); its group commit covers direct and buffered puts alike.
//
// # Sync: group commit
//
// Each backing file records how much has been written and how much is
// known durable. Sync finds, for every file its pointers touch, the end of
// the last one; if that is not yet durable it joins the fdatasync in flight
// on that file or, if none is, starts one covering everything written so
// far (the caller that starts an fdatasync runs it itself). A caller whose
// bytes were written after the in-flight fdatasync started waits for it and
// then for the next one, which covers every such caller at once: N
// concurrent Syncs on one file cost two fdatasyncs, not N. Files are synced
// in parallel. No mutex is held across fdatasync, so Puts proceed while it
// runs. A direct put reserves its range under the file's mutex and writes
// it outside (so direct puts to one file overlap); an fdatasync covers
// only up to the lowest direct write still in flight, and a Sync needing
// bytes above one waits for that write first.
//
// # Failure semantics
//
//   - Every read verifies length and CRC32C before returning a byte. A
//     mismatch, a short read, a truncated file or a freed (zeroed) range is
//     ErrCorrupt; the error names the pointer. Corrupt data is never
//     returned.
//   - Malformed pointers (zero or oversized length, offset beyond 2^63,
//     unknown backing id, sub-range outside the slice) are ErrBadPointer,
//     whatever the fields hold; nothing panics.
//   - I/O errors from the FS (EIO, ENOSPC, injected faults) are returned
//     wrapped, distinct from ErrCorrupt.
//   - If an fdatasync fails, the kernel may already have dropped the dirty
//     pages, so a later fdatasync could "succeed" without them. Therefore a
//     failure is sticky: Sync of any byte in that file beyond what was
//     durable before the failure returns the error forever (until the store
//     is reopened, when such slices are garbage), bytes synced earlier stay
//     durable, and Put skips the file (moving to the next healthy one).
//   - After a crash every slice whose Sync returned nil is intact; others
//     read correctly or as ErrCorrupt. Reopening appends after the files'
//     current size, whatever garbage their un-synced tail holds. New backing
//     files and directories are made durable by syncing their parents.
//
// # Memory tier
//
// Cache (BFS's memory data tier) is an LRU of verified slice contents
// bounded by bytes (plus a small per-entry overhead). It is write-through:
// Put stores through the next Store and keeps a copy, so recent data
// reads at memory speed. Hits are served without touching the next Store;
// concurrent misses of one slice share one load (of the whole slice, which
// the next Store verifies). Slices are immutable, so cached copies need no
// coherence protocol; only Free invalidates, dropping every cached slice
// overlapping the freed range. OpenLocal does not add a cache: compose
// NewCache(local, n) and Free through the Cache.
//
// # Free
//
// Free(id, off, length) punches a hole (fallocate PUNCH_HOLE|KEEP_SIZE) when
// the file is an OS file, else writes zeros. Size is unchanged; Allocated
// (st_blocks*512) drops by the whole blocks inside the range. Freed slices
// read as ErrCorrupt — except a slice whose bytes were all zero, whose
// checksum still matches the zeros it now reads (the bytes are correct,
// but the slice is no longer really stored). Free is not synced: after a
// crash the space may be allocated again, and the next collection frees it.
// A range Free releases leaves the reuse pool: no put is placed there again.
//
// # Reuse pool
//
// Recycle (the Recycler interface, used by the garbage collector through
// the package functions Recycle and WatchReuse) releases a range like Free
// but keeps its whole 4 KiB blocks, still allocated and holding their old
// bytes, in a pool per backing file, as long as the store's pool stays
// within LocalOptions.ReuseMax (DefaultReuseMax, 1 GiB; beyond it, it
// punches like Free and reports those ranges; the partial blocks at the
// ends of a pooled range are left as they are, garbage until the rest of
// their block is). Puts of at least LocalOptions.ReuseMin bytes
// (DefaultReuseMin, 64 KiB) take the smallest fitting pool range of their
// backing file before appending: a direct put overwrites written, allocated
// blocks, which costs the file system no allocation (the point: a durable
// 1 MiB put into reused space is as cheap as Ganesha's buffered overwrite,
// see docs/engine.md). The pool is not persistent: after a restart it is
// empty and the collector finds the unreferenced ranges again; recycling a
// range already in the pool is harmless.
//
// A put into reused space lies below its file's synced watermark, so it is
// tracked as dirty (backing.smu.dirty) until a SyncData that started after
// its write completed returns: Sync of its pointer, and SyncAll, fdatasync
// for it. A dead pointer into a reused range fails verification (its CRC
// no longer matches), and Cache.Put drops cached copies overlapping the new
// slice. A ReuseWatch records the ranges handed out while it is open;
// Recycle with a watch leaves those alone (the collector's guard against
// freeing the slices of a transaction that began after its scan).
//
// With LocalOptions.Covered (datadir Options.Covered) a direct put into
// reused space below the synced watermark is a covered put: once its
// write completed, Sync and SyncAll do not fdatasync for it — the caller
// issues a device flush (the metadata log's) before relying on it, and
// records the pointers Covered reports with its commit so that recovery
// can check them (docs/engine.md "Covered puts"). Covered puts stay listed
// as dirty until some SyncData covers them; past maxCovered listed, one
// does.
//
// # Concurrency
//
// All methods of Local and Cache may be called concurrently. Close waits
// for running calls, in-flight fsyncs and direct writes. Buffers passed to
// Put and ReadAt are owned by the caller: Put neither modifies nor retains
// data (direct puts copy it first); ReadAt writes only into buf (and on
// error buf's contents are unspecified). The vfs.FS given to OpenLocal
// must allow WriteAt, ReadAt and SyncData on one file to overlap, as
// vfs.Default, vfs.MemFS and errorfs do.
package slice
