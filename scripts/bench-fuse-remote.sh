#!/usr/bin/env bash
# Benchmarks a remote txnfs FUSE mount (txnfs mount --server) against the
# same workloads through the vnfs client library directly
# (fuse/internal/benchvnfs) and on a local directory, in the same run:
# fio sequential/random 4 KiB and 1 MiB reads and writes, then metadata
# ops/s (create, stat, unlink of N files). The server is "txnfs serve" on
# 127.0.0.1 over a fresh data directory.
#
#   scripts/bench-fuse-remote.sh [WORKDIR]      (needs root, fio, python3)
#
# Environment: SIZE (fio file size, default 256m), RUNTIME (seconds per
# random job, default 10), NFILES (metadata files, default 10000).
# Prints markdown tables (docs/fuse.md records one run).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-fuse-lib.sh
work=${1:-$(mktemp -d /var/tmp/txnfs-rbench.XXXXXX)}
SIZE=${SIZE:-256m}
RUNTIME=${RUNTIME:-10}
NFILES=${NFILES:-10000}
mkdir -p "$work/local" "$work/mnt"
go build -o "$work/txnfs" ./cmd/txnfs
go build -o "$work/benchvnfs" ./fuse/internal/benchvnfs
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$work/txnfs" serve --data "$work/data" --listen "127.0.0.1:$port" --log-level warn >"$work/serve.log" 2>&1 &
srv=$!
# At exit the data directory and the local files go (gigabytes; KEEP_DATA=1 keeps them).
trap '"$work/txnfs" umount --force "$work/mnt" 2>/dev/null || true; kill $srv 2>/dev/null || true; wait $srv 2>/dev/null; [[ -n "${KEEP_DATA:-}" ]] || rm -rf "$work/data" "$work/local"' EXIT
for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
"$work/txnfs" mount --background --log "$work/mount.log" --server "127.0.0.1:$port" "$work/mnt"
echo "uptime before: $(uptime)"

# vnfs first (it works in /benchvnfs on the server; the mount in /fio).
bytes=$(python3 -c "import sys; s='$SIZE'.lower(); m={'k':1<<10,'m':1<<20,'g':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
"$work/benchvnfs" -addr "127.0.0.1:$port" -size "$bytes" -runtime "${RUNTIME}s" -files "$NFILES" >"$work/vnfs.txt"
mkdir -p "$work/mnt/fio"

printf '| workload | local dir | vnfs library | txnfs remote FUSE | FUSE / vnfs | FUSE / local |\n|---|---|---|---|---|---|\n'
row() {
	local name=$1; shift
	local l m v
	l=$(runfio "$name" "$work/local" "$@")
	m=$(runfio "$name" "$work/mnt/fio" "$@")
	v=$(awk -v n="$name" '$1 == n { print $2, $3 }' "$work/vnfs.txt")
	python3 - "$name" "$l" "$v" "$m" <<'PY'
import sys
name, l, v, m = sys.argv[1:]
fmt = lambda v: "%s MiB/s (%s IOPS)" % tuple(v.split())
bw = lambda v: max(float(v.split()[0]), 1e-9)
print("| %s | %s | %s | %s | %.2f | %.2f |" % (name, fmt(l), fmt(v), fmt(m), bw(m) / bw(v), bw(m) / bw(l)))
PY
}
fio_jobs row

echo
echo "| metadata ($NFILES files) | local dir ops/s | vnfs, 1 per call | vnfs, 256 per call | txnfs remote FUSE ops/s | FUSE / vnfs(1) | FUSE / local |"
echo "|---|---|---|---|---|---|---|"
metabench "$work/local/meta" "$NFILES" >"$work/meta.local"
metabench "$work/mnt/meta" "$NFILES" >"$work/meta.mnt"
paste "$work/meta.local" "$work/meta.mnt" | while read -r op l _ m; do
	v1=$(awk -v k="$op-x1" '$1 == k { print $2 }' "$work/vnfs.txt")
	v256=$(awk -v k="$op-x256" '$1 == k { print $2 }' "$work/vnfs.txt")
	awk -v op="$op" -v l="$l" -v v1="$v1" -v v256="$v256" -v m="$m" \
		'BEGIN { printf "| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |\n", op, l, v1, v256, m, m / v1, m / l }'
done
echo "uptime after: $(uptime)"
