#!/usr/bin/env bash
# CPU cost of writes through a local txnfs FUSE mount: for each mount
# configuration, in interleaved rounds, one fio sequential write job
# (--end_fsync=1) on a fresh mount, reporting throughput, the mount
# process's CPU time (user+system, from /proc) per write request and its
# context switches (all threads) per write. A mount that is CPU-bound on a
# shared machine gains throughput only by spending less CPU per write.
#
#   scripts/bench-fuse-cpu.sh [WORKDIR]     (needs root, fio, python3)
#
# Environment: BIN (txnfs binary; default: built from this tree), CONFIGS
# (;-separated "NAME FLAGS..." mount configurations; default
# "off --write-behind=0;on"), BINS (space-separated binaries: then every
# configuration runs with each of them in turn, named NAME@BINARY), BS
# (default 1m), SIZE (default 1g), ROUNDS (default 3), FIOFLAGS (extra fio
# flags, e.g. --fsync=1). Each run's data directory is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /var/tmp/txnfs-cpubench.XXXXXX)}
mkdir -p "$work"
BS=${BS:-1m}
SIZE=${SIZE:-1g}
ROUNDS=${ROUNDS:-3}
CONFIGS=${CONFIGS:-"off --write-behind=0;on"}
if [[ -z "${BIN:-}" && -z "${BINS:-}" ]]; then
	go build -o "$work/txnfs" ./cmd/txnfs
	BIN="$work/txnfs"
fi
hz=$(getconf CLK_TCK)

# one NAME FLAGS...: mount, write, report, unmount, clean up.
one() {
	local name=$1 d="$work/run"
	shift
	rm -rf "$d"
	mkdir -p "$d/mnt"
	"$BIN" mount --background --log "$d/log" "$@" --data "$d/data" "$d/mnt"
	local pid
	pid=$(pgrep -f -- "--data $d/data" | head -1)
	local cs0 t0 cs1 t1
	cs0=$(cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}')
	t0=$(awk '{print $14 + $15}' /proc/"$pid"/stat)
	# shellcheck disable=SC2086
	fio --name=w --directory="$d/mnt" --filename=f --ioengine=psync --size="$SIZE" --rw=write --bs="$BS" \
		--end_fsync=1 ${FIOFLAGS:-} --output-format=json >"$d/fio.json"
	t1=$(awk '{print $14 + $15}' /proc/"$pid"/stat)
	cs1=$(cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}')
	python3 - "$d/fio.json" "$name" "$BS" "$t0" "$t1" "$cs0" "$cs1" "$hz" <<'PY'
import json, sys
f, name, bs, t0, t1, cs0, cs1, hz = sys.argv[1:]
w = json.load(open(f))["jobs"][0]["write"]
n = w["total_ios"]
print("| %s | %s | %.0f | %.0f | %.1f |" % (name, bs, w["bw_bytes"] / 2**20,
      (float(t1) - float(t0)) / float(hz) * 1e6 / n, (int(cs1) - int(cs0)) / n))
PY
	rm -f "$d/mnt/f"
	"$BIN" umount "$d/mnt"
	rm -rf "$d"
}

echo "uptime before: $(uptime)"
echo "| config | bs | MiB/s | mount CPU µs/write | mount context switches/write |"
echo "|---|---|---|---|---|"
IFS=';' read -r -a cfgs <<<"$CONFIGS"
for _ in $(seq "$ROUNDS"); do
	for c in "${cfgs[@]}"; do
		if [[ -z "${BINS:-}" ]]; then
			# shellcheck disable=SC2086
			one $c
			continue
		fi
		for b in $BINS; do
			read -r name flags <<<"$c"
			# shellcheck disable=SC2086
			BIN=$b one "$name@$(basename "$b")" $flags
		done
	done
done
echo "uptime after: $(uptime)"
