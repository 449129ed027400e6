#!/usr/bin/env bash
# Installs what the vNFS client tests need on a fresh Debian machine:
# NFS-Ganesha with FSAL_VFS (the peer server: ../shared/peers/ganesha.sh),
# and bsdtar (tar interoperability tests; GNU tar is in the base system).
# Idempotent and quiet when everything is already there. Tests that need a
# missing tool skip with a message.
set -euo pipefail

need=()
for pkg_cmd in "nfs-ganesha:ganesha.nfsd" "libarchive-tools:bsdtar"; do
	pkg=${pkg_cmd%%:*} cmd=${pkg_cmd##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
if ! dpkg -s nfs-ganesha-vfs >/dev/null 2>&1; then
	need+=(nfs-ganesha-vfs)
fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		echo "installing: ${need[*]}"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "warning: not root; vNFS tests that need ${need[*]} will be skipped" >&2
	fi
fi
