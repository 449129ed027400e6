// Package nfsbench holds the NFS server benchmarks that compare txnfs with
// a peer server, NFS-Ganesha 4.3 (Debian, FSAL_VFS), over loopback with
// the same client and the same COMPOUNDs, the TC-NFS write matrix
// (transactional against plain compounds), and BenchmarkFlushPatterns,
// the device cost of a durable 1 MiB write with each server's flush
// pattern (no server involved). BenchmarkVsGanesha reports each server
// process's CPU time per COMPOUND besides throughput.
//
// Both servers run as separate processes: txnfs as `txnfs serve` built
// from this module (real durability: every commit is fsynced before the
// reply), Ganesha through internal/nfspeers (../shared/peers/ganesha.sh,
// or the module's scripts/ganesha-peer.sh). The client is
// nfs4/internal/testclient, one TCP connection and one NFSv4.1 session per
// simulated client, one COMPOUND in flight per client.
//
// The benchmarks skip when Ganesha cannot start, e.g. when not running as
// root (FSAL_VFS needs it); TXNFS_GANESHA_SH points at another script. The package's tests only
// check the benchmarks' own arithmetic (TxnMatrix's workload and
// statistics); run the benchmarks with:
//
//	go test ./nfs4/internal/nfsbench -run XXX -bench . -benchtime 2s
//
// docs/nfs-server.md ("Benchmarks") records the results.
package nfsbench
