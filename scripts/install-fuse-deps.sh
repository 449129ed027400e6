#!/usr/bin/env bash
# Installs what the FUSE tests (fuse/) need on a fresh Debian machine:
# fusermount3, pjdfstest and fsx (crates.io), and pjdfstest's dummy users.
# Idempotent; safe to run on every CI run. Called by scripts/install-deps.sh.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=()
have fusermount3 || pkgs+=(fuse3)
dpkg -s libacl1-dev >/dev/null 2>&1 || pkgs+=(libacl1-dev)
have fio || pkgs+=(fio)
have sqlite3 || pkgs+=(sqlite3)
if [ ${#pkgs[@]} -gt 0 ]; then
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}"
fi

export PATH="$HOME/.cargo/bin:$PATH"
if have cargo; then
	have pjdfstest || cargo install --quiet --locked pjdfstest || cargo install --quiet pjdfstest
	have fsx || cargo install --quiet --locked fsx || cargo install --quiet fsx
else
	echo "install-fuse-deps: cargo not found; pjdfstest and fsx tests will be skipped" >&2
fi

# pjdfstest switches to these users (each with a group of the same name).
for u in tests pjdfstest; do
	if ! getent passwd "$u" >/dev/null; then
		$SUDO useradd --system --user-group --no-create-home --home-dir / --shell /usr/sbin/nologin "$u"
	fi
done
