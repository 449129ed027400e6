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
trap '"$work/txnfs" umount --force "$work/mnt" 2>/dev/null || true; kill $srv 2>/dev/null || true' EXIT
for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
"$work/txnfs" mount --background --log "$work/mount.log" --server "127.0.0.1:$port" "$work/mnt"
echo "uptime before: $(uptime)"

# vnfs first (it works in /benchvnfs on the server; the mount in /fio).
bytes=$(python3 -c "import sys; s='$SIZE'.lower(); m={'k':1<<10,'m':1<<20,'g':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
"$work/benchvnfs" -addr "127.0.0.1:$port" -size "$bytes" -runtime "${RUNTIME}s" -files "$NFILES" >"$work/vnfs.txt"
mkdir -p "$work/mnt/fio"

# fio JOB-NAME DIR fio-args... -> prints "MiB/s IOPS"
runfio() {
	local name=$1 dir=$2; shift 2
	fio --name="$name" --directory="$dir" --filename="bench.$name" --ioengine=psync --size="$SIZE" \
		--output-format=json "$@" >"$work/fio.json"
	python3 - "$work/fio.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
r, w = j["read"], j["write"]
d = r if r["io_bytes"] > 0 else w
print("%.0f %.0f" % (d["bw_bytes"] / 2**20, d["iops"]))
PY
}

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
row seq-write-1M --rw=write --bs=1M --end_fsync=1
row seq-read-1M --rw=read --bs=1M --invalidate=0
row seq-read-1M-again --rw=read --bs=1M --invalidate=0
row seq-write-4K --rw=write --bs=4k --end_fsync=1 --runtime="$RUNTIME" --time_based=0
row rand-read-4K --rw=randread --bs=4k --invalidate=0 --runtime="$RUNTIME" --time_based
row rand-write-4K --rw=randwrite --bs=4k --runtime="$RUNTIME" --time_based --end_fsync=1
row rand-read-1M --rw=randread --bs=1M --invalidate=0 --runtime="$RUNTIME" --time_based
row rand-write-1M --rw=randwrite --bs=1M --runtime="$RUNTIME" --time_based --end_fsync=1

echo
echo "| metadata ($NFILES files) | local dir ops/s | vnfs, 1 per call | vnfs, 256 per call | txnfs remote FUSE ops/s | FUSE / vnfs(1) | FUSE / local |"
echo "|---|---|---|---|---|---|---|"
python3 - "$work/local/meta" "$work/mnt/meta" "$NFILES" "$work/vnfs.txt" <<'PY'
import os, sys, time
local, mnt, n, vf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
v = {l.split()[0]: float(l.split()[1]) for l in open(vf) if len(l.split()) == 2}
def bench(d):
    os.makedirs(d, exist_ok=True)
    res = {}
    t = time.perf_counter()
    for i in range(n):
        os.close(os.open(os.path.join(d, "f%06d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    res["create"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        os.stat(os.path.join(d, "f%06d" % i))
    res["stat"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        os.unlink(os.path.join(d, "f%06d" % i))
    res["unlink"] = n / (time.perf_counter() - t)
    return res
l, m = bench(local), bench(mnt)
for op in ("create", "stat", "unlink"):
    v1, v256 = v[op + "-x1"], v[op + "-x256"]
    print("| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |" % (op, l[op], v1, v256, m[op], m[op] / v1, m[op] / l[op]))
PY
echo "uptime after: $(uptime)"
