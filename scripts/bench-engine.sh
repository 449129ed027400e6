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
bench 'BenchmarkRandomWrite/nosync=true' 20000x
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
fio_job randwrite-4K-128M-end-fsync --rw=randwrite --bs=4k --size=128M --end_fsync=1
fio --name=prep --filename="$dir/readfile" --rw=write --bs=1M --size=256M --end_fsync=1 --output-format=terse >/dev/null 2>&1
fio --name=seqread-1M-cached --filename="$dir/readfile" --rw=read --bs=1M --size=256M --ioengine=psync --output-format=terse 2>/dev/null |
	awk -F';' '{printf "%-28s read %8.1f MiB/s\n", "seqread-1M-cached", $7/1024}'
rm -f "$dir/readfile"
# Interleaved rounds: the machine is shared, so each engine figure is paired
# with its fio peer run right before it, and the ratio of each pair is
# printed (take the median over rounds). ROUNDS=0 skips this part.
echo "== interleaved engine/fio ratios (ROUNDS=${ROUNDS:=5})"
go test -c -o "$dir/fs.test" ./fs/ >/dev/null
fio_mbps() { # MB/s (10^6) of one fio job
	fio --name=peer --directory="$dir" --ioengine=psync --output-format=terse "$@" 2>/dev/null |
		awk -F';' '{printf "%.1f", $48*1.024/1000}'
	rm -f "$dir"/peer.*
}
eng_mbps() { # MB/s of one engine benchmark
	(cd fs && TMPDIR=$dir "$dir/fs.test" -test.run '^$' -test.bench "$1" -test.benchtime "$2" | awk '/^Benchmark/ {print $(NF-1)}')
}
for ((r = 1; r <= ROUNDS; r++)); do
	f1=$(fio_mbps --rw=write --bs=1M --size=128M --fsync=1)
	e1=$(eng_mbps '^BenchmarkWrite$/^size=1MiB$' 128x)
	f2=$(fio_mbps --rw=write --bs=1M --size=256M --end_fsync=1)
	e2=$(eng_mbps '^BenchmarkStreamWrite$/^nosync=false$' 1x)
	e3=$(eng_mbps '^BenchmarkStreamWrite$/^nosync=true$' 1x)
	f4=$(fio_mbps --rw=write --bs=1M --size=64M --numjobs=4 --group_reporting --fsync=1)
	e4=$(eng_mbps '^BenchmarkWriteParallel$' 256x)
	f5=$(fio_mbps --rw=write --bs=4k --size=64M --end_fsync=1)
	e5=$(eng_mbps '^BenchmarkWriteNoSync$/^size=4KiB$/^sync-every=end$' 16384x)
	f6=$(fio_mbps --rw=write --bs=1M --size=64M --numjobs=4 --group_reporting --end_fsync=1)
	e6=$(eng_mbps '^BenchmarkWriteParallelNoSync$/^size=1024KiB$' 512x)
	f7=$(fio --name=peer --directory="$dir" --ioengine=psync --output-format=terse --rw=randwrite --bs=4k --size=128M --end_fsync=1 2>/dev/null |
		awk -F';' '{print $49}')
	rm -f "$dir"/peer.*
	e7=$( (cd fs && TMPDIR=$dir "$dir/fs.test" -test.run '^$' -test.bench '^BenchmarkRandomWrite$/^nosync=true$' -test.benchtime 20000x) |
		awk '/^Benchmark/ {print $(NF-1)}')
	awk -v r="$r" -v f1="$f1" -v e1="$e1" -v f2="$f2" -v e2="$e2" -v e3="$e3" -v f4="$f4" -v e4="$e4" \
		-v f5="$f5" -v e5="$e5" -v f6="$f6" -v e6="$e6" -v f7="$f7" -v e7="$e7" 'BEGIN {
		printf "round %d: durable 1MiB %.0f/%.0f=%.2f  stream(64/txn) %.0f/%.0f=%.2f  stream(NoSync+Sync) %.0f/%.0f=%.2f  4 writers %.0f/%.0f=%.2f  4KiB NoSync+Sync %.0f/%.0f=%.2f  4 writers NoSync+Sync %.0f/%.0f=%.2f  random 4KiB writes/s (128 MiB file) %.0f/%.0f=%.3f\n",
			r, e1, f1, e1/f1, e2, f2, e2/f2, e3, f2, e3/f2, e4, f4, e4/f4, e5, f5, e5/f5, e6, f6, e6/f6, e7, f7, e7/f7 }'
done
rm -f "$dir/fs.test"
