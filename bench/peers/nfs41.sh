#!/usr/bin/env bash
# Why bench/peers measures no NFSv4.1: the machine's libnfs speaks NFSv4.0 only. Prints the
# evidence from its headers (libnfs-dev), then mounts through it (odafs-peers, version=4)
# from an nfs-ganesha that offers NFSv4 minor version 1 only, and from one that offers 0
# and 1: the first fails (NFS4ERR_MINOR_VERS_MISMATCH at SETCLIENTID), the second works.
#   bash bench/peers/nfs41.sh      # root; run bench/peers/run.sh once first (packages, build)
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "nfs41.sh: $*" >&2; exit 1; }
source bench/peers/common.sh
[ -x build/odafs-peers ] || die "build/odafs-peers missing: run bench/peers/run.sh first"
inc=/usr/include/nfsc
echo "== libnfs-dev $(dpkg-query -W -f='${Version}' libnfs-dev)"
echo "-- libnfs.h: the URL's version argument"
grep -n -A1 'version=<3|4>' "$inc/libnfs.h"
echo "-- libnfs-raw-nfs4.h: the last NFSv4 operations it can encode (NFSv4.0 ends at 39)"
sed -n '/^enum nfs_opnum4 {/,/^};/p' "$inc/libnfs-raw-nfs4.h" | tail -4
echo "-- NFSv4.1 operations in its headers and library (EXCHANGE_ID, CREATE_SESSION, SEQUENCE):"
n=$(cat "$inc"/*.h | grep -c -E 'EXCHANGE_ID|CREATE_SESSION|OP_SEQUENCE' || true)
m=$(nm -D "$(readlink -f /usr/lib/x86_64-linux-gnu/libnfs.so)" |
  grep -c -i -E 'exchange_id|create_session|sequence4' || true)
echo "   $n in the headers, $m in the library's symbols"

source bench/peers/ganesha.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-nfs41-XXXXXX")
ganesha_pid="" rpcbind_pid=""
trap 'for p in $ganesha_pid $rpcbind_pid; do kill $p 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"' EXIT
make_peer_files build/odafs-peers "$work/export" 64
start_rpcbind
for minors in "1" "0, 1"; do
  state=$work/ganesha-${minors//[ ,]/}
  mkdir -p "$state"
  start_ganesha "$work/export" "$state" "$minors"
  echo "== ganesha offering NFSv4 minor versions: $minors"
  if build/odafs-peers --target "nfs://127.0.0.1/export?version=4&nfsport=$nfs_port" \
    --name "v4-minor-$minors" --server-pid "$ganesha_pid" --run lat --ops 1000; then
    echo "   libnfs version=4: reads work"
  else
    echo "   libnfs version=4: cannot mount"
  fi
  kill "$ganesha_pid"
  wait "$ganesha_pid" 2>/dev/null || true
  ganesha_pid=""
done
