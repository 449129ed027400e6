// Package fuse serves a txnfs engine (package fs) through the Linux FUSE
// kernel interface, using go-fuse's raw protocol layer
// (github.com/hanwen/go-fuse/v2/fuse, imported here as raw).
//
// It is a thin adapter: each FUSE request becomes one engine transaction
// run as the caller, and engine errors become errnos in one switch
// (errno.go). docs/fuse.md is the user manual; this comment is the
// implementer's.
//
// The mount is built for and tested on Linux. The package also compiles
// for macOS and FreeBSD (os_other.go, umount_other.go: go-fuse serves
// those too), so that the rest of txnfs does; mounts there are untested,
// and its tests are Linux-only.
//
// # Identity and permissions
//
// FUSE node ids are engine inode numbers (never reused; the root is 1 in
// both). The kernel checks permissions itself (default_permissions: it
// would otherwise walk cached paths without search checks), and the
// engine checks them again from mode bits for the caller's fsuid, fsgid
// and supplementary groups (read from /proc/TID/status, since FUSE does
// not send them), as it does for NFS clients.
// Open checks read/write/execute access and applies O_TRUNC in the same
// transaction; reads and writes through a handle are not checked again,
// as POSIX requires.
//
// # Durability and caching
//
// Every modifying request commits without waiting for durability
// (fs.TxnOptions.NoSync); fsync, fdatasync, O_SYNC/O_DSYNC writes and the
// close of a written descriptor call FS.Sync. WRITE requests are answered
// once their bytes are queued (write-behind, Config.WriteBehindBytes):
// every other engine access of the mount (and of its Group) waits for the
// writes answered before it, and a write that fails later is reported at
// the handle's next write, fsync or close. The kernel caches entries,
// attributes and negative lookups for Config's timeouts (30 s by default)
// and keeps a file's pages across opens only if the file's change counter
// did not move since the previous open through this mount (close-to-open).
// The kernel writeback cache is off unless Config.Writeback: with it the
// kernel owns file sizes and O_APPEND offsets, which would break atomic
// appends across mounts and the sandbox's abort. Mounts of one FS in one
// process may be joined in a Group, which invalidates the others' caches
// after every change (asynchronously: see Group); an open through a name
// whose file was removed by another mount gets ESTALE and a fresh lookup.
//
// # Locks
//
// flock and POSIX record locks are left to the kernel, which implements
// them locally when the file system does not: they work between the
// processes using one mount, not across mounts.
//
// # Sandbox
//
// Begin, Commit and Abort (or the control ioctl, see Control) turn the
// mount into a sandbox, WTF's Fig. 8: all requests then run in one engine
// transaction, invisible to other mounts until Commit, discarded by Abort.
// Requests are serialized while a sandbox is active.
//
// # Concurrency
//
// A Mount serves requests concurrently. Kernel cache invalidations are
// sent from a goroutine of their own (notifier), never from a request
// handler, because the kernel may hold an inode lock for a request in
// progress.
//
// # Remote mounts
//
// MountRemote serves a remote NFSv4.1 server through nfs4/client instead
// of an engine (RemoteServer, remote*.go): one COMPOUND per request, sent
// with the caller's AUTH_SYS identity; node ids keyed by fileid; an NFS
// open state per FUSE open; UNSTABLE writes COMMITted at close and fsync;
// close-to-open by the change attribute; NFS byte-range locks; the
// sandbox as a server-side multi-compound transaction. docs/fuse.md
// explains the choices.
package fuse
