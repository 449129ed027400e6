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
// reply), Ganesha through ../shared/peers/ganesha.sh (or scripts/ganesha-peer.sh). The client is
// nfs4/internal/testclient, one TCP connection and one NFSv4.1 session per
// simulated client, one COMPOUND in flight per client.
//
// The benchmarks skip when Ganesha is not installed, when not running as
// root (FSAL_VFS needs it) or when the peer script is missing; set
// TXNFS_GANESHA_SCRIPT to point at the script. The package has no tests,
// only benchmarks:
//
//	go test ./nfs4/internal/nfsbench -run XXX -bench . -benchtime 2s
//
// docs/nfs-server.md ("Benchmarks") records the results.
package nfsbench
