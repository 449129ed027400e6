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
#
# read-after rounds get a second table (with perf able to count kernel
# tracepoints, as root): per round and side, the pages of the file cached
# when the read began (fincore), the reader's CPU share and MiB per CPU
# second (what the read costs, whatever else ran meanwhile), the pages the
# kernel dropped from the file during the read, and the FUSE READ and
# other requests that reached the mount during it; then the median mount /
# local ratio of MiB per reader CPU-second.
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

# Every read-after round is checked (with perf, if it can count kernel
# tracepoints): how many pages of the file were in the page cache when
# the read began, how many the kernel dropped while it ran (e.g. the
# system's proactive reclaim), and which FUSE requests reached the mount
# meanwhile (READ: data not found in the page cache). perfcheck says
# whether perf can.
perfcheck=
if command -v perf >/dev/null && perf stat -a -e fuse:fuse_request_send -e filemap:mm_filemap_delete_from_page_cache -o /dev/null true 2>/dev/null; then
	perfcheck=1
fi
: >"$work/readcheck"

# kdev FILE -> the kernel's dev_t of FILE's file system (as tracepoints
# print it; for a FUSE mount, its connection number).
kdev() {
	local d
	d=$(stat -c %Hd:%Ld "$1")
	echo $(((${d%%:*} << 20) | ${d##*:}))
}

# readercpu -> the CPU share (user + system, %) fio's last job had while
# it ran: a reader served from the page cache is on the CPU all the time
# unless it waits (READ requests) or other processes take its CPU.
readercpu() {
	python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))["jobs"][0]; print("%.1f" % (j["usr_cpu"] + j["sys_cpu"]))' "$work/fio.json"
}

# The read of read-after jobs: sequential, 1 MiB requests, from the page
# cache where there is one.
readargs=(--rw=read --bs=1m --invalidate=0)

# wfio JOB DIR [LABEL] -> MiB/s (the file is removed afterwards: every run
# lays out a new file). A job named read-after-JOB writes as JOB, then
# reads the file it wrote (readargs) and reports the read; the read's check
# goes to $work/readcheck as "LABEL MiB/s cached-pages/pages reader-CPU-%
# dropped-pages READs other-requests" ("-" where not counted).
wfio() {
	local v w=${1#read-after-} f pages ncached dev ino counts
	# shellcheck disable=SC2046
	v=$(runfio "$w" "$2" $(args "$w"))
	if [[ $1 == read-after-* ]]; then
		f="$2/bench.$w"
		pages=$((($(stat -c %s "$f") + 4095) / 4096))
		if [[ -n $perfcheck ]]; then
			dev=$(kdev "$f")
			ino=$(stat -c %i "$f")
			v=$(perf stat -a -x, -o "$work/perfstat" \
				-e filemap:mm_filemap_delete_from_page_cache --filter "s_dev == $dev && i_ino == $ino" \
				-e fuse:fuse_request_send --filter "connection == $dev && opcode == 15" \
				-e fuse:fuse_request_send --filter "connection == $dev && opcode != 15" \
				-- env work="$work" SIZE="$SIZE" bash -c '. scripts/bench-fuse-lib.sh; cached "$2/bench.$1" >"$work/cached"; runfio "$@"' runfio "$w" "$2" "${readargs[@]}")
			ncached=$(<"$work/cached")
			counts=$(grep -E 'mm_filemap|fuse_request' "$work/perfstat" | cut -d, -f1 | paste -sd' ')
			[[ $2 == "$work/local" ]] && counts="${counts%% *} - -"
		else
			ncached=$(cached "$f")
			v=$(runfio "$w" "$2" "${readargs[@]}")
			counts="- - -"
		fi
		echo "${3:-} ${v%% *} $ncached/$pages $(readercpu) $counts" >>"$work/readcheck"
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
		l=$(wfio "$job" "$work/local" "$job $r local")
		line="| $job | $r | $l |"
		# The mounts run in rotated order (round r starts with mount
		# r-1), so that none always runs right after the local
		# directory's writeback; the columns stay in mount order.
		n=${#mnts[@]}
		vals=()
		for k in $(seq 0 $((n - 1))); do
			i=$(((k + r - 1) % n))
			vals[i]=$(wfio "$job" "${mnts[i]}" "$job $r mnt$i")
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
if [[ -s $work/readcheck ]]; then
	# MiB per reader CPU-second (MiB/s / CPU share) is what the read
	# costs, whatever else ran on the machine: its mount/local ratio
	# moves far less between rounds than the MiB/s ratio.
	echo
	echo "| job | round | where | MiB/s | pages cached when the read began | reader's CPU % | MiB per reader CPU-s | pages dropped during the read | READ requests | other requests |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	python3 - "$work/readcheck" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
local = {}
ratios = collections.defaultdict(list)
for job, r, where, bw, cached, cpu, dropped, reads, other in rows:
    per_cpu = float(bw) * 100 / max(float(cpu), 0.1)
    print("| %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s |" % (job, r, where, bw, cached, cpu, per_cpu, dropped, reads, other))
    if where == "local":
        local[job, r] = per_cpu
    elif (job, r) in local:
        ratios[job, where].append(per_cpu / local[job, r])
print()
print("| job | median ratio of MiB per reader CPU-s (mount / local) |")
print("|---|---|")
for job in dict.fromkeys(j for j, _ in ratios):
    print("| %s | %s |" % (job, " ".join("%s: %.2f" % (w, statistics.median(v)) for (j, w), v in sorted(ratios.items()) if j == job)))
PY
fi
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
