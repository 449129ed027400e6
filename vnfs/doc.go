// Package vnfs is the vectorized file-system API of vNFS (Chen et al.,
// FAST'17) for NFSv4.1/4.2 servers, with a POSIX fallback for local paths.
//
// One call operates on a vector of files: VRead reads many files (or many
// ranges of files) with automatic OPEN and CLOSE, VWrite creates, writes,
// appends and syncs many files, VGetAttrs/VSetAttrs get and set several
// attributes of many objects, VMkdir/VSymlink/VHardlink/VRemove/VRename
// change the namespace in bulk, VListDir lists directory trees with
// attributes, VCopy/VSCopy copy (client-side or with NFSv4.2 server-side
// COPY) and VClone shares data (NFSv4.2 CLONE). Utilities build on these:
// EnsureDirectory (mkdir -p), RemoveRecursive (rm -r), and POSIX-like scalar
// helpers (ReadFile, WriteFile, Stat, ...) for incremental adoption.
//
// # How a vector becomes COMPOUNDs
//
// Items are packed, in order, into as few COMPOUNDs as the session allows:
// at most 256 operations (vNFS's cap, lowered to what the server accepts)
// and the negotiated request and reply sizes. OPEN, READ/WRITE and CLOSE of
// one file share a COMPOUND through the current stateid. Data larger than
// one RPC is split into several READs or WRITEs, and across COMPOUNDs when
// needed; the caller sees one call. Paths are compressed: a directory is
// reached from the previous one with LOOKUPP/LOOKUP, or from a directory
// kept with SAVEFH/RESTOREFH, when that takes fewer operations than walking
// from the root.
//
// # Failure semantics
//
// A vector call returns (n, err): items 0..n-1 succeeded, item n failed
// with err (an *Error naming the operation, the item's index and path, and
// wrapping a syscall.Errno), and items after n were not executed. Outputs
// of items after n are zero.
//
// Txn returns a view whose calls are atomic on servers with the txnfs
// transactional extensions (docs/protocol.md): either every item takes
// effect or none does. A vector that fits one COMPOUND is sent as one
// transactional COMPOUND; a larger one runs as a multi-compound
// transaction (TXN_BEGIN, COMPOUNDs joining it, TXN_END). Begin opens a
// transaction spanning several calls (a *Tx, whose Commit applies all of
// them at once or none). Servers without the extensions, and the local
// file system, refuse with ErrTxnUnsupported before doing anything.
//
// # Data cache
//
// With Config.Cache, VRead keeps file data (LRU within a byte budget,
// keyed by file handle) with the change, size and fileid it was read
// under, and revalidates it in the COMPOUND that would have read it:
// LOOKUP; VERIFY(change, size, fileid). An unchanged file is served from
// memory with no OPEN, READ or CLOSE; a changed one stops the COMPOUND
// (a miss, not a failure) and is read again, together with the rest of
// the vector. Every read revalidates; transactional views bypass the
// cache. CacheStatsOf reports its counters.
//
// # Appends
//
// An IO at AppendOffset appends: with the append extension (WRITE at
// offset 2^64-1, detected from the server's implementation name or by
// probing, which a standard server rejects without effect) atomically;
// otherwise the sizes are read first and the data written there, which is
// not atomic with respect to other clients.
//
// # Baseline
//
// Config.Scalar gives a client that sends one POSIX call's worth of RPCs
// at a time, as the Linux kernel client does; it exists only as the
// comparison baseline of the benchmarks (docs/vnfs.md).
package vnfs
