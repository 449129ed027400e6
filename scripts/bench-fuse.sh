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
. scripts/bench-fuse-lib.sh
work=${1:-$(mktemp -d /var/tmp/txnfs-bench.XXXXXX)}
SIZE=${SIZE:-256m}
RUNTIME=${RUNTIME:-10}
NFILES=${NFILES:-10000}
mkdir -p "$work/local" "$work/mnt"
go build -o "$work/txnfs" ./cmd/txnfs
"$work/txnfs" mount --background --log "$work/mount.log" --data "$work/data" "$work/mnt"
# At exit the data directory and the local files go (gigabytes; KEEP_DATA=1 keeps them).
trap '"$work/txnfs" umount --force "$work/mnt" 2>/dev/null || true; [[ -n "${KEEP_DATA:-}" ]] || rm -rf "$work/data" "$work/local"' EXIT

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
fio_jobs row

echo
echo "| metadata ($NFILES files) | local dir ops/s | txnfs FUSE ops/s | txnfs / local |"
echo "|---|---|---|---|"
metabench "$work/local/meta" "$NFILES" >"$work/meta.local"
metabench "$work/mnt/meta" "$NFILES" >"$work/meta.mnt"
paste "$work/meta.local" "$work/meta.mnt" | awk '{ printf "| %s | %.0f | %.0f | %.2f |\n", $1, $2, $4, $4 / $2 }'
