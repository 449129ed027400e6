#!/usr/bin/env bash
# Write throughput of a local txnfs FUSE mount against a local directory of
# the same disk, with the same durability on both sides, in interleaved
# rounds (local, mount, local, mount, ...): fio sequential and random
# writes of 4 KiB and 1 MiB, each once with --end_fsync=1 (durable at the
# end) and once with --fsync=1 (fsync after every write). Prints one row
# per round with the mount/local ratio, then the median ratio per job.
#
#   scripts/bench-fuse-write.sh [WORKDIR]     (needs root, fio, python3)
#
# Environment: ROUNDS (default 3), SIZE (fio file size, default 128m),
# RUNTIME (seconds per 4 KiB job, default 5), JOBS (space-separated subset
# of the job names below; read-after-JOB measures a sequential 1 MiB read
# of the file JOB wrote, the issue 5 read target), BINS (space-separated txnfs binaries to mount,
# each on its own fresh data directory and interleaved in every round, for
# an A/B of two builds; default: one built from this tree; a binary may be
# named twice; the mounts run in a rotated order each round), MOUNTFLAGS (extra `txnfs mount` flags for every mount),
# MOUNTFLAGS0, MOUNTFLAGS1, ... (for the N-th mount only), PROFILE=1 (--cpuprofile of each mount into
# WORKDIR/cpu.N.pprof, written at unmount), KEEP_DATA=1 (keep the mounts' data
# directories, removed at exit by default).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-fuse-lib.sh
work=${1:-$(mktemp -d /var/tmp/txnfs-wbench.XXXXXX)}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-128m}
RUNTIME=${RUNTIME:-5}
JOBS=${JOBS:-"seq-4K seq-1M rand-4K rand-1M seq-4K-fsync seq-1M-fsync rand-4K-fsync rand-1M-fsync read-after-seq-1M"}
mkdir -p "$work/local"
if [[ -z "${BINS:-}" ]]; then
	go build -o "$work/txnfs" ./cmd/txnfs
	BINS="$work/txnfs"
fi
mount_bins

args() { # job name -> fio arguments
	local bs rw sync
	case $1 in
	seq-*) rw=write ;;
	rand-*) rw=randwrite ;;
	esac
	case $1 in
	*-4K*) bs=4k; echo -n "--runtime=$RUNTIME --time_based " ;;
	*-1M*) bs=1m ;;
	esac
	case $1 in
	*-fsync) sync="--fsync=1 --end_fsync=1" ;;
	*) sync="--end_fsync=1" ;;
	esac
	echo "--rw=$rw --bs=$bs $sync"
}

# wfio JOB DIR -> MiB/s (the file is removed afterwards: every run lays
# out a new file). A job named read-after-JOB writes as JOB, then reads
# the file it wrote sequentially in 1 MiB requests (--invalidate=0: from
# the page cache where there is one) and reports the read.
wfio() {
	local v w=${1#read-after-}
	# shellcheck disable=SC2046
	v=$(runfio "$w" "$2" $(args "$w"))
	if [[ $1 == read-after-* ]]; then
		v=$(runfio "$w" "$2" --rw=read --bs=1m --invalidate=0)
	fi
	rm -f "$2/bench.$w"
	echo "${v%% *}"
}

echo "uptime before: $(uptime)"
hdr="| job | round | local MiB/s |"
sep="|---|---|---|"
for m in "${mnts[@]}"; do hdr+=" $(basename "$m") MiB/s | ratio |"; sep+="---|---|"; done
echo "$hdr"
echo "$sep"
: >"$work/ratios"
for job in $JOBS; do
	for r in $(seq "$ROUNDS"); do
		l=$(wfio "$job" "$work/local")
		line="| $job | $r | $l |"
		# The mounts run in rotated order (round r starts with mount
		# r-1), so that none always runs right after the local
		# directory's writeback; the columns stay in mount order.
		n=${#mnts[@]}
		vals=()
		for k in $(seq 0 $((n - 1))); do
			i=$(((k + r - 1) % n))
			vals[i]=$(wfio "$job" "${mnts[i]}")
		done
		for i in $(seq 0 $((n - 1))); do
			v=${vals[i]}
			ratio=$(python3 -c "print('%.2f' % ($v / max($l, 1e-9)))")
			line+=" $v | $ratio |"
			echo "$job $i $ratio" >>"$work/ratios"
		done
		echo "$line"
	done
done
echo
echo "| job | median ratio per mount (mount / local) |"
echo "|---|---|"
python3 - "$work/ratios" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for l in open(sys.argv[1]):
    job, i, r = l.split()
    if job not in order:
        order.append(job)
    d[job][int(i)].append(float(r))
for job in order:
    print("| %s | %s |" % (job, " ".join("mnt%d: %.2f" % (i, statistics.median(v)) for i, v in sorted(d[job].items()))))
PY
echo "uptime after: $(uptime)"
