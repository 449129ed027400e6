#!/usr/bin/env bash
# Per-call latency of 1 MiB (BS) write(2) (+ fsync(2)) on a local directory and
# on local txnfs FUSE mounts, in short interleaved bursts: each burst does
# PER calls on every target in turn (rotated order), BURSTS times, and the
# medians and quartiles per target are printed. Medians of many short
# bursts resolve differences of a few percent on a shared machine where
# whole fio runs (scripts/bench-fuse-write.sh) move by 2x with the other
# jobs' disk and CPU load.
#
#   scripts/bench-fuse-lat.sh [WORKDIR]     (needs root, python3)
#
# Environment: BINS (space-separated txnfs binaries, one mount each, a
# binary may be named twice; default: one built from this tree),
# MOUNTFLAGS (extra `txnfs mount` flags of every mount), MOUNTFLAGS0,
# MOUNTFLAGS1, ... (of the N-th mount), PROFILE=1 (--cpuprofile of each mount), BURSTS (default 60), PER (calls per burst, default 16), BS
# (bytes per write, default 1048576; MiB/s is computed from it),
# NOFSYNC=1 (write(2) only). Data directories are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /var/tmp/txnfs-latbench.XXXXXX)}
mkdir -p "$work/local"
if [[ -z "${BINS:-}" ]]; then
	go build -o "$work/txnfs" ./cmd/txnfs
	BINS="$work/txnfs"
fi
. scripts/bench-fuse-lib.sh
mount_bins
dirs=("$work/local" "${mnts[@]}")

echo "uptime before: $(uptime)"
python3 - "${dirs[@]}" <<'PY'
import os, statistics, sys, time
dirs = sys.argv[1:]
bursts, per = int(os.environ.get("BURSTS", "60")), int(os.environ.get("PER", "16"))
fsync = not os.environ.get("NOFSYNC")
bs = int(os.environ.get("BS", str(1 << 20)))
buf = os.urandom(bs)
fds = {d: os.open(os.path.join(d, "lat"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) for d in dirs}
res = {d: ([], [], []) for d in dirs}
for b in range(bursts):
    k = b % len(dirs)
    for d in dirs[k:] + dirs[:k]:
        fd = fds[d]
        for _ in range(per):
            t0 = time.perf_counter()
            os.write(fd, buf)
            t1 = time.perf_counter()
            if fsync:
                os.fsync(fd)
            t2 = time.perf_counter()
            res[d][0].append(t1 - t0)
            res[d][1].append(t2 - t1)
            res[d][2].append(t2 - t0)
q = lambda v: "%.0f / %.0f / %.0f" % tuple(x * 1e6 for x in statistics.quantiles(v, n=4))
print("| target | write µs (p25 / p50 / p75) | fsync µs | write+fsync µs | MiB/s at the median | ratio to local |")
print("|---|---|---|---|---|---|")
base = statistics.median(res[dirs[0]][2])
for d in dirs:
    os.close(fds[d])
    os.unlink(os.path.join(d, "lat"))
    w, s, t = res[d]
    m = statistics.median(t)
    print("| %s | %s | %s | %s | %.1f | %.2f |" % (os.path.basename(d), q(w), q(s), q(t), bs / 2**20 / m, base / m))
PY
echo "uptime after: $(uptime)"
