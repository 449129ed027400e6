#!/bin/sh
# Measures the slice store and, in the same run, the raw disk with fio.
# Usage: slice/bench.sh [dir]   (dir defaults to a new temporary directory;
# it must be on the disk to measure). Needs fio (apt-get install -y fio).
# Output: Go benchmark lines, then one line per fio job:
#   job, write IOPS, write MiB/s, mean sync latency (us), p99 sync latency (us)
set -eu
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
echo "# $(date -u +%FT%TZ) $(uname -r) nproc=$(nproc) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# dir=$dir on $(df -T "$dir" | awk 'NR==2 {print $1, $2}')"
TXNFS_BENCH_DIR=$dir go test -run '^$' -bench 'BenchmarkPutSync|BenchmarkPut$|BenchmarkReadAt' \
	-benchtime "${BENCHTIME:-2s}" ./slice/

fiojob() {
	name=$1
	shift
	rm -rf "$dir/fio" && mkdir -p "$dir/fio"
	# terse v3: field 49 write IOPS, 48 write KiB/s; sync latency is not in
	# terse output, so parse the JSON instead.
	fio --name="$name" --directory="$dir/fio" --ioengine=psync --output-format=json "$@" |
		python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
w, s = j["write"], j.get("sync", {})
lat = s.get("lat_ns", {})
p99 = lat.get("percentile", {}).get("99.000000", 0)
print("fio %-26s %9.0f IOPS %8.1f MiB/s  sync mean %7.0f us  p99 %7.0f us" % (
    sys.argv[1], w["iops"], w["bw"] / 1024, lat.get("mean", 0) / 1000, p99 / 1000))
' "$name"
}
fiojob seq-1M-fdatasync-at-end --rw=write --bs=1M --size=1G --end_fsync=1
fiojob seq-1M-fsync-each --rw=write --bs=1M --size=256M --fsync=1
fiojob seq-1M-fdatasync-each --rw=write --bs=1M --size=256M --fdatasync=1
fiojob append-1M-fdatasync-each --rw=write --bs=1M --size=256M --fdatasync=1 --file_append=1
fiojob append-64K-fdatasync-each --rw=write --bs=64k --size=128M --fdatasync=1 --file_append=1 --runtime=10 --time_based
fiojob 4K-fsync-each --rw=write --bs=4k --size=64M --fsync=1 --runtime=10 --time_based
fiojob append-4K-fdatasync-each --rw=write --bs=4k --size=64M --fdatasync=1 --file_append=1 --runtime=10 --time_based
fiojob append-4K-fdatasync-8jobs --rw=write --bs=4k --size=16M --fdatasync=1 --file_append=1 --numjobs=8 --group_reporting --runtime=10 --time_based
rm -rf "$dir/fio"
