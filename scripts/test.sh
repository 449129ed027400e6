#!/usr/bin/env bash
# Runs every test and prints a summary. Exit status is non-zero if any
# test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT

status=0
echo "== go test ./..."
go test ${TESTFLAGS:--count=1 -timeout 30m} -v ./... 2>&1 | tee "$log" | grep -E '^(---|===|ok|FAIL|panic|\s+--- FAIL)' | grep -v '^=== ' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
grep -q '^FAIL' "$log" && status=1

echo "== go test ./third_party/go-xdr/pkg/runtime (our patch of go-xdr's runtime: its own module)"
(cd third_party/go-xdr && go test ${TESTFLAGS:--count=1 -timeout 30m} -v ./pkg/runtime/...) 2>&1 | tee -a "$log" | grep -E '^(ok|FAIL|panic|\s+--- FAIL)' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== go test -race (engine packages; -short for the data directory and the NFS packages)"
go test -race -count=1 -timeout 20m ./kv/... ./slice/... ./meta/... ./fs/... >>"$log" 2>&1 || status=1
go test -race -short -count=1 -timeout 20m ./datadir/... ./nfs4/... >>"$log" 2>&1 || status=1
tail -n 20 "$log" | grep -E '^(ok|FAIL|---)' || true

echo "== go vet for darwin and freebsd (the client, tools and server stay portable)"
for goos in darwin freebsd; do
	if ! out=$(GOOS=$goos go vet ./... 2>&1); then
		echo "$out" | tail -n 20
		echo "FAIL go vet GOOS=$goos" | tee -a "$log"
		status=1
	fi
done

passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
if [ "$failed" -gt 0 ]; then
	echo
	echo "== failures (with the failing tests' output)"
	# go test -v streams a test's log lines before its "--- FAIL" line
	# (between "=== RUN" and it); without -v they follow it. Print both.
	awk '
		/^=== RUN / { cur = $3; buf[cur] = ""; after = 0; next }
		/^=== (PAUSE|CONT|NAME) / { cur = $3; after = 0; next }
		/^[ \t]*--- FAIL: / { print; printf "%s", buf[$3]; after = 25; next }
		/^[ \t]*--- (PASS|SKIP): / { after = 0; next }
		after > 0 { print; after--; next }
		cur != "" { buf[cur] = buf[cur] $0 "\n" }
	' "$log" | head -n 300
fi
echo
echo "== summary"
grep -E '^(ok|FAIL)\s' "$log" | sort | uniq
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
