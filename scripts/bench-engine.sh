#!/usr/bin/env bash
# Runs the storage-engine benchmarks and, in the same run and directory,
# the fio jobs that are their physical limit. Results: docs/benchmarks.md.
#   scripts/bench-engine.sh [DIR]     (DIR: scratch directory, default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
command -v fio >/dev/null || { echo "fio missing: apt-get install -y fio" >&2; exit 1; }
echo "== engine benchmarks (go test -bench), TMPDIR=$dir"
bench() { TMPDIR=$dir go test -run '^$' -bench "$1" -benchtime "$2" ./fs/ | grep -E '^Benchmark'; }
bench '^(BenchmarkWrite|BenchmarkWriteNoSync|BenchmarkWriteParallel|BenchmarkRead|BenchmarkMetadata|BenchmarkSmallWrite)$' 200x
bench 'BenchmarkStreamWrite' 2x
bench 'BenchmarkTxn' 512x
bench 'BenchmarkSlicing' 20x
bench 'BenchmarkAppend' 20000x
echo "== fio, same directory"
fio_job() {
	local name=$1; shift
	fio --name="$name" --directory="$dir" --ioengine=psync --output-format=terse "$@" 2>/dev/null |
		awk -F';' -v n="$name" '{printf "%-28s read %8.1f MiB/s  write %8.1f MiB/s  write IOPS %7d\n", n, $7/1024, $48/1024, $49}'
	rm -f "$dir/$name".*
}
fio_job seqwrite-1M-fsync-each --rw=write --bs=1M --size=256M --fsync=1
fio_job seqwrite-1M-fdatasync-each --rw=write --bs=1M --size=256M --fdatasync=1
fio_job seqwrite-1M-end-fsync --rw=write --bs=1M --size=256M --end_fsync=1
fio_job seqwrite-1M-fsync-each-4jobs --rw=write --bs=1M --size=64M --numjobs=4 --group_reporting --fsync=1
fio_job write-4K-fsync-each --rw=write --bs=4k --size=16M --fsync=1 --runtime=10 --time_based
fio --name=prep --filename="$dir/readfile" --rw=write --bs=1M --size=256M --end_fsync=1 --output-format=terse >/dev/null 2>&1
fio --name=seqread-1M-cached --filename="$dir/readfile" --rw=read --bs=1M --size=256M --ioengine=psync --output-format=terse 2>/dev/null |
	awk -F';' '{printf "%-28s read %8.1f MiB/s\n", "seqread-1M-cached", $7/1024}'
rm -f "$dir/readfile"
