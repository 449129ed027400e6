#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine. Idempotent and
# quiet when everything is already there.
set -euo pipefail

need=()
for pkg_cmd in "fio:fio" "libnfs-utils:nfs-ls"; do
	pkg=${pkg_cmd%%:*} cmd=${pkg_cmd##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		echo "installing: ${need[*]}"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "warning: not root; tests that need ${need[*]} will be skipped" >&2
	fi
fi
go mod download

# Front ends' test dependencies (FUSE: fuse3, pjdfstest, fsx; NFS client:
# NFS-Ganesha as the peer server).
"$(dirname "$0")/install-fuse-deps.sh"
"$(dirname "$0")/install-client-deps.sh"
