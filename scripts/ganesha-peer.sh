#!/usr/bin/env bash
# A copy of the workplace's ../shared/peers/ganesha.sh (the peer server of issues 3 and 4), used by
# internal/nfspeers when the checkout has no ../shared beside it (e.g. a CI clone elsewhere), so
# the tests against NFS-Ganesha run instead of skipping. Keep it in step with the original.
# Start NFS-Ganesha 4.3 (Debian) as a peer NFSv4.0/4.1/4.2 server on loopback, in the foreground
# or background, exporting a local directory through FSAL_VFS (needs root) at pseudo path /export.
#
#   ganesha.sh start EXPORT_DIR PORT WORKDIR   -> prints the PID; logs in WORKDIR/ganesha.log
#   ganesha.sh stop WORKDIR                    -> stops the server started with that WORKDIR
#
# Clients reach it at 127.0.0.1:PORT, path /export (e.g. libnfs:
# nfs-ls 'nfs://127.0.0.1/export?version=4&nfsport=PORT'). Verified with Ganesha 4.3 on this
# machine kind; it does not implement NFSv4.2 COPY or CLONE. Files changed in EXPORT_DIR behind
# Ganesha's back may be served from its stale cache: write through NFS only.
set -euo pipefail
cmd=${1:-}; shift || true
case "$cmd" in
start)
  dir=$1 port=$2 work=$3
  if ! command -v ganesha.nfsd >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nfs-ganesha nfs-ganesha-vfs >/dev/null
  fi
  mkdir -p "$dir" "$work/recovery"
  cat >"$work/ganesha.conf" <<CONF
NFS_CORE_PARAM { NFS_Port = $port; Bind_Addr = 127.0.0.1; Protocols = 4; Enable_NLM = false;
  Enable_RQUOTA = false; Enable_UDP = false; Plugins_Dir = "/usr/lib/x86_64-linux-gnu/ganesha"; }
NFSV4 { Graceless = true; Minor_Versions = 0, 1, 2; RecoveryBackend = fs; RecoveryRoot = "$work/recovery";
  Lease_Lifetime = 10; Allow_Numeric_Owners = true; Only_Numeric_Owners = true; }
EXPORT { Export_Id = 1; Path = $dir; Pseudo = /export; Access_Type = RW; Squash = No_Root_Squash;
  Protocols = 4; Transports = TCP; SecType = sys; FSAL { Name = VFS; } }
LOG { Default_Log_Level = EVENT; }
CONF
  ganesha.nfsd -F -f "$work/ganesha.conf" -L "$work/ganesha.log" -p "$work/ganesha.pid" -N NIV_EVENT >"$work/ganesha.out" 2>&1 </dev/null &
  pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && { echo $pid; exit 0; }; sleep 0.1; done
  echo "ganesha did not start; see $work/ganesha.log" >&2; kill $pid 2>/dev/null; exit 1 ;;
stop)
  work=$1; [ -f "$work/ganesha.pid" ] && kill "$(cat "$work/ganesha.pid")" 2>/dev/null || true ;;
*) echo "usage: ganesha.sh start EXPORT_DIR PORT WORKDIR | stop WORKDIR" >&2; exit 2 ;;
esac
