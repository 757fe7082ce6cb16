#!/usr/bin/env bash
# odafs over CephFS beside nfs-ganesha over the same CephFS, in one run on one throw-away
# cluster (scripts/ceph-cluster.sh), with odafs over a local export as the ceiling
# (docs/PERFORMANCE.md, "Over CephFS"):
#   ganesha-ceph      nfs-ganesha FSAL_CEPH, read through libnfs (NFSv3)
#   odafs-ceph-rpc    odafsd --export ceph:/ --no-ordma, pre-posted RPC reads
#   odafs-ceph-tcp    odafsd --export ceph:/, one-sided reads over the engine's TCP
#   odafs-ceph-ring   the same gateway, one-sided reads over the local ring
#   odafs-local-ring  odafsd over a local directory, one-sided over the ring (the ceiling)
# Workloads (bench/peers/peers.cc): 4 KiB random reads one at a time (lat) and 16 in
# flight (q16), PostMark read-only (Fig. 6) and standard. Then gateways: two client groups
# (2 processes, 8 reads in flight each) on one gateway, and one group on each of two
# gateways of the same CephFS ("scale" rows). Contenders interleaved (order rotating), the
# set repeated ROUNDS times; bench/ceph/report.py prints medians, spread and ratios to
# ganesha-ceph and writes docs/results/ceph.json (or $OUT/ceph.json).
#   bash bench/ceph/run.sh            # ROUNDS=3 SECONDS_PER_POINT=2 by default
# BASE_ODAFSD=PATH adds two contenders served by another odafsd binary (a build of another
# revision), base-ceph-rpc and base-ceph-tcp, interleaved with the rest: a change's cost
# over CephFS in the same run.
# Installs what it needs with apt (root). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
secs=${SECONDS_PER_POINT:-2}
pm_files=${PM_FILES:-1000}
pm_txns=${PM_TXNS:-3000}
out=${OUT:-docs/results}

bash scripts/deps.sh ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common libcephfs-dev \
  nfs-ganesha nfs-ganesha-ceph libnfs-dev rpcbind python3
[ "$(id -u)" -eq 0 ] || { echo "run.sh: needs root (apt, ganesha)" >&2; exit 1; }

source bench/lib.sh
source bench/peers/common.sh
source bench/peers/ganesha.sh
work=$(mktemp -d /tmp/odafs-ceph-bench.XXXXXX)
ganesha_pid="" rpcbind_pid="" pids=()
cleanup() {
  local p
  for p in $ganesha_pid "${pids[@]}" $rpcbind_pid; do kill "$p" 2>/dev/null || true; done
  for p in $ganesha_pid "${pids[@]}" $rpcbind_pid; do wait "$p" 2>/dev/null || true; done
  bash scripts/ceph-cluster.sh stop "$work/cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "run.sh: $*" >&2; exit 1; }

echo "== building"
build_targets odafsd odafs-peers odafs_cli
[ -x build/odafs-peers ] || die "odafs-peers was not built (is libnfs-dev installed?)"
grep -q ODAFS_HAVE_CEPHFS=1 build/build.ninja || die "odafsd was built without libcephfs"

echo "== a one-node Ceph cluster"
conf=$(bash scripts/ceph-cluster.sh start "$work/cluster" 2>"$work/cluster.log" | tail -1) ||
  die "the cluster did not start: $(tail -3 "$work/cluster.log")"

# gateway NAME [FLAGS...]: odafsd ($ODAFSD_BIN, else build/odafsd) over the cluster's root;
# sets $pid, $addr.
gateway() {
  local name=$1
  shift
  ODAFS_LOG=warn "${ODAFSD_BIN:-build/odafsd}" --export ceph:/ --ceph-conf "$conf" --listen 127.0.0.1:0 \
    --state-dir "$work/state-$name" --cache-mb 512 "$@" >"$work/ready-$name" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do grep -q ready "$work/ready-$name" 2>/dev/null && break; sleep 0.1; done
  addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready-$name")
  [ -n "$addr" ] || die "gateway $name did not start"
}

echo "== the data: made here, copied into CephFS through a gateway of its own"
make_peer_files build/odafs-peers "$work/data" 64
# Stopped before anything is measured: while one CephFS client has a file open for writing
# the MDS lets no other client cache it, and a gateway keeps what it wrote open read-write
# (docs/ceph.md, "Facts measured").
gateway gw-copy
build/odafs put "$work/data/peers-64m.dat" "odafs://$addr/peers-64m.dat"
kill "$pid" && wait "$pid" 2>/dev/null || true
gateway gw-rpc --no-ordma
rpc_pid=$pid rpc_addr=$addr
gateway gw-ordma
ordma_pid=$pid ordma_addr=$addr
gateway gw-second
second_pid=$pid second_addr=$addr
if [ -n "${BASE_ODAFSD:-}" ]; then
  ODAFSD_BIN=$BASE_ODAFSD gateway gw-base-rpc --no-ordma
  base_rpc_pid=$pid base_rpc_addr=$addr
  ODAFSD_BIN=$BASE_ODAFSD gateway gw-base-ordma
  base_ordma_pid=$pid base_ordma_addr=$addr
fi
mkdir -p "$work/export-local"
ln "$work/data/peers-64m.dat" "$work/export-local/"
start_odafsd local -- --cache-mb 512 || die "the local odafsd did not start"
local_pid=$pid local_addr=$addr
pids+=("$local_pid")

start_rpcbind
start_ganesha / "$work/ganesha" "0, 1" "$conf"
nfs3="nfs://127.0.0.1/export?nfsport=$nfs_port&mountport=$mnt_port"

std="lat,q16,pm_ro,pm_std"
contenders=(
  "ganesha-ceph|$nfs3|-|$ganesha_pid"
  "odafs-ceph-rpc|odafs://$rpc_addr/|rpc|$rpc_pid"
  "odafs-ceph-tcp|odafs://$ordma_addr/|ordma_tcp|$ordma_pid"
  "odafs-ceph-ring|odafs://$ordma_addr/|ordma|$ordma_pid"
  "odafs-local-ring|odafs://$local_addr/|ordma|$local_pid"
)
if [ -n "${BASE_ODAFSD:-}" ]; then
  contenders+=("base-ceph-rpc|odafs://$base_rpc_addr/|rpc|$base_rpc_pid"
    "base-ceph-tcp|odafs://$base_ordma_addr/|ordma_tcp|$base_ordma_pid")
fi
rows=$work/rows.jsonl
: >"$rows"
# group NAME TARGET PID ROUND START_AT: two processes, 8 reads in flight each.
group() {
  local c
  for c in 1 2; do
    peers "$1" "$2" ordma "$3" q8 "$4" --label "$5" --start-at "$6" >>"$rows" &
    procs+=($!)
  done
}

t_start=$(date +%s)
for round in $(seq "$rounds"); do
  n=${#contenders[@]}
  for k in $(seq 0 $((n - 1))); do
    IFS='|' read -r name target mode spid <<<"${contenders[$(((k + round) % n))]}"
    echo "== round $round/$rounds: $name"
    peers "$name" "$target" "$mode" "$spid" "$std" "$round" >>"$rows" || die "$name failed"
  done
  # Two client groups on one gateway, then one on each of two gateways of the same CephFS.
  for layout in one two; do
    echo "== round $round/$rounds: gateways, $layout"
    procs=()
    start_at=$(($(date +%s%3N) + 2500))
    group "scale-$layout" "odafs://$ordma_addr/" "$ordma_pid" "$round" "$layout-a" "$start_at"
    if [ "$layout" = one ]; then
      group "scale-$layout" "odafs://$ordma_addr/" "$ordma_pid" "$round" "$layout-b" "$start_at"
    else
      group "scale-$layout" "odafs://$second_addr/" "$second_pid" "$round" "$layout-b" "$start_at"
    fi
    for p in "${procs[@]}"; do wait "$p" || die "a gateway client failed"; done
  done
done
echo "== measured in $(($(date +%s) - t_start)) s"
mkdir -p "$out"
cp "$rows" "$out/ceph-rows.jsonl"
python3 bench/ceph/report.py "$rows" --out "$out" \
  --machine "$(nproc) cpus, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
