#!/usr/bin/env bash
# Benchmarks a local txnfs FUSE mount against a local directory on the same
# disk, in the same run: fio sequential/random 4 KiB and 1 MiB reads and
# writes, then metadata ops/s (create, stat, unlink of N files).
#
#   scripts/bench-fuse.sh [WORKDIR]      (needs root, fio, python3)
#
# Environment: SIZE (fio file size, default 256m), RUNTIME (seconds per
# random job, default 10), NFILES (metadata files, default 10000).
# Prints a markdown table (docs/fuse.md records one run).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /var/tmp/txnfs-bench.XXXXXX)}
SIZE=${SIZE:-256m}
RUNTIME=${RUNTIME:-10}
NFILES=${NFILES:-10000}
mkdir -p "$work/local" "$work/mnt"
go build -o "$work/txnfs" ./cmd/txnfs
"$work/txnfs" mount --background --log "$work/mount.log" --data "$work/data" "$work/mnt"
trap '"$work/txnfs" umount --force "$work/mnt" 2>/dev/null || true' EXIT

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

printf '| workload | local dir | local dir, fsync each write | txnfs FUSE | txnfs / local |\n|---|---|---|---|---|\n'
row() { # name, fio args (a write job also runs with --fsync=1 on the local directory)
	local name=$1; shift
	local l s m
	l=$(runfio "$name" "$work/local" "$@")
	if [[ " $* " == *" --rw=write "* || " $* " == *" --rw=randwrite "* ]]; then
		s=$(runfio "$name-sync" "$work/local" "$@" --fsync=1)
	else
		s="-"
	fi
	m=$(runfio "$name" "$work/mnt" "$@")
	python3 - "$name" "$l" "$s" "$m" <<'PY'
import sys
name, l, s, m = sys.argv[1:]
fmt = lambda v: "-" if v == "-" else "%s MiB/s (%s IOPS)" % tuple(v.split())
ratio = float(m.split()[0]) / max(float(l.split()[0]), 1e-9)
print("| %s | %s | %s | %s | %.2f |" % (name, fmt(l), fmt(s), fmt(m), ratio))
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
echo "| metadata ($NFILES files) | local dir ops/s | txnfs FUSE ops/s | txnfs / local |"
echo "|---|---|---|---|"
python3 - "$work/local/meta" "$work/mnt/meta" "$NFILES" <<'PY'
import os, sys, time
local, mnt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
    print("| %s | %.0f | %.0f | %.2f |" % (op, l[op], m[op], m[op] / l[op]))
PY
