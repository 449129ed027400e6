# Common parts of scripts/bench-fuse.sh, bench-fuse-remote.sh,
# bench-fuse-write.sh and bench-fuse-lat.sh; sourced. Needs $work (scratch directory) and
# $SIZE (fio file size); fio_jobs also $RUNTIME.

# runfio JOB-NAME DIR fio-args... -> prints "MiB/s IOPS" of the job (its
# reads if it read, else its writes); fio's JSON is left in $work/fio.json
# and the file DIR/bench.JOB-NAME stays.
runfio() {
	local name=$1 dir=$2
	shift 2
	fio --name="$name" --directory="$dir" --filename="bench.$name" --ioengine=psync --size="$SIZE" \
		--output-format=json "$@" >"$work/fio.json"
	python3 - "$work/fio.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
r, w = j["read"], j["write"]
d = r if r["io_bytes"] > 0 else w
print("%.1f %.0f" % (d["bw_bytes"] / 2**20, d["iops"]))
PY
}

# cached FILE -> how many pages of FILE are in the page cache ("?" if
# fincore cannot tell).
cached() { fincore -n -o PAGES "$1" 2>/dev/null | tr -d ' ' || echo "?"; }

# fio_jobs FN: calls FN NAME fio-args... for each workload of the
# comparison tables (reads use the file the write before them laid out).
fio_jobs() {
	"$1" seq-write-1M --rw=write --bs=1M --end_fsync=1
	"$1" seq-read-1M --rw=read --bs=1M --invalidate=0
	"$1" seq-read-1M-again --rw=read --bs=1M --invalidate=0
	"$1" seq-write-4K --rw=write --bs=4k --end_fsync=1 --runtime="$RUNTIME" --time_based=0
	"$1" rand-read-4K --rw=randread --bs=4k --invalidate=0 --runtime="$RUNTIME" --time_based
	"$1" rand-write-4K --rw=randwrite --bs=4k --runtime="$RUNTIME" --time_based --end_fsync=1
	"$1" rand-read-1M --rw=randread --bs=1M --invalidate=0 --runtime="$RUNTIME" --time_based
	"$1" rand-write-1M --rw=randwrite --bs=1M --runtime="$RUNTIME" --time_based --end_fsync=1
}

# metabench DIR N -> lines "create OPS/s", "stat OPS/s", "unlink OPS/s":
# N empty files created, then stat'ed, then unlinked in DIR, one call each.
metabench() {
	python3 - "$1" "$2" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
names = [os.path.join(d, "f%06d" % i) for i in range(n)]
for op, fn in (("create", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))),
               ("stat", os.stat), ("unlink", os.unlink)):
    t = time.perf_counter()
    for p in names:
        fn(p)
    print("%s %.0f" % (op, n / (time.perf_counter() - t)))
PY
}

# mount_bins: mounts every binary of $BINS (space-separated; one may be
# named twice) on a fresh data directory $work/dataN at $work/mntN, with
# $MOUNTFLAGS and the N-th mount's $MOUNTFLAGSN, and with PROFILE=1 a CPU
# profile into $work/cpu.N.pprof (written at unmount); the mountpoints go
# to the array mnts. An EXIT trap unmounts them and removes the data
# directories and $work/local, unless KEEP_DATA is set (a run once filled
# / with 48 GB).
mount_bins() {
	mnts=()
	local i=0 b extra prof
	for b in $BINS; do
		mkdir -p "$work/mnt$i"
		prof=()
		[[ -n "${PROFILE:-}" ]] && prof=(--cpuprofile "$work/cpu.$i.pprof")
		eval "extra=\${MOUNTFLAGS$i:-}"
		# shellcheck disable=SC2086
		"$b" mount --background --log "$work/mount$i.log" "${prof[@]}" ${MOUNTFLAGS:-} $extra --data "$work/data$i" "$work/mnt$i"
		mnts+=("$work/mnt$i")
		i=$((i + 1))
	done
	trap unmount_bins EXIT
}

unmount_bins() {
	local m
	for m in "${mnts[@]}"; do
		"${BINS%% *}" umount "$m" 2>/dev/null || "${BINS%% *}" umount --force "$m" 2>/dev/null || true
	done
	[[ -n "${KEEP_DATA:-}" ]] || rm -rf "$work"/data[0-9]* "$work/local"
}
