#!/usr/bin/env bash
# odafs side by side with what a user would pick instead, and with the machine's limits,
# all on 127.0.0.1 in one run (docs/PERFORMANCE.md):
#   ganesha-v3, ganesha-v4   nfs-ganesha (FSAL_VFS) read through libnfs, NFSv3 and NFSv4
#   odafs-rpc                odafsd --no-ordma, libodafs pre-posted RPC reads
#   odafs-ordma-tcp          odafsd, one-sided reads over the engine's TCP (a remote client)
#   odafs-ordma-ring         odafsd, one-sided reads over the local shared-memory ring
#   limits                   TCP ping-pong (blocking, client polling, busy-polling),
#                            shared-memory ping-pong (spinning, and with a doorbell that
#                            wakes a sleeping echo), memcpy; iperf3 on loopback
# Workloads (bench/peers/peers.cc): 4 KiB random reads one at a time and 8/16/64 in
# flight, sequential 1 MiB reads, PostMark (read-only Fig. 6 and standard), four client
# processes with 8 in flight each. Contenders interleaved (order rotating), the whole set
# repeated ROUNDS times; bench/peers/report.py prints the table (medians, spread, ratios)
# and writes docs/results/peers.json and PNG plots (or to $OUT).
#   bash bench/peers/run.sh            # ROUNDS=3 SECONDS_PER_POINT=1 by default
# A part of the set, for a focused comparison: WORKLOADS=lat,seq (a subset of
# lat,q8,q16,q64,seq,pm_ro,pm_std), MULTI=0 (no four-process point), LIMITS=0 (no floors).
# Installs what it needs with apt (root or sudo). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
secs=${SECONDS_PER_POINT:-1}
pm_files=${PM_FILES:-1000}
pm_txns=${PM_TXNS:-3000}
only=${WORKLOADS:-}
multi=${MULTI:-1}
with_limits=${LIMITS:-1}

# What the benchmark needs beyond the build's packages (kept out of CI's: it runs no ganesha).
bash scripts/deps.sh nfs-ganesha nfs-ganesha-vfs libnfs-dev rpcbind iperf3 gnuplot-nox python3
[ "$(id -u)" -eq 0 ] || { echo "run.sh: ganesha.nfsd needs root here (FSAL_VFS opens by handle)" >&2; exit 1; }

source bench/lib.sh
source bench/peers/common.sh
source bench/peers/ganesha.sh
ganesha_pid="" rpcbind_pid="" iperf_pid="" rpc_pid="" ordma_pid=""
cleanup() {
  local p
  for p in $ganesha_pid $rpc_pid $ordma_pid $iperf_pid $rpcbind_pid; do
    kill "$p" 2>/dev/null || true
  done
  for p in $ganesha_pid $rpc_pid $ordma_pid $iperf_pid $rpcbind_pid; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "run.sh: $*" >&2; exit 1; }

echo "== building"
build_targets odafsd odafs-peers odafs-tcp-pingpong
[ -x build/odafs-peers ] || die "odafs-peers was not built (is libnfs-dev installed?)"

# A TCP port nobody listens on now (the kernel's pick, released for the server to take).
# --- the data: one 64 MiB and one 256 MiB file, hard-linked into every export
make_peer_files build/odafs-peers "$work/data"
for e in ganesha odafs-rpc odafs-ordma; do
  mkdir -p "$work/export-$e"
  ln "$work/data/"*.dat "$work/export-$e/"
done

# --- rpcbind and nfs-ganesha (bench/peers/ganesha.sh)
start_rpcbind
start_ganesha "$work/export-ganesha" "$work/ganesha"

# --- odafsd twice: RPC only (the DAFS baseline), and with its one-sided engine. Caches
# large enough to hold both data files and the PostMark pools.
start_odafsd odafs-rpc -- --cache-mb 512 --no-ordma || die "odafsd --no-ordma did not start"
rpc_pid=$pid rpc_addr=$addr
start_odafsd odafs-ordma -- --cache-mb 512 || die "odafsd did not start"
ordma_pid=$pid ordma_addr=$addr
pid=""

nfs3="nfs://127.0.0.1/export?nfsport=$nfs_port&mountport=$mnt_port"
nfs4="nfs://127.0.0.1/export?version=4&nfsport=$nfs_port"
# name|target|mode|server pid|workloads
std="lat,q8,q16,q64,seq,pm_ro,pm_std"
contenders=(
  "ganesha-v3|$nfs3|-|$ganesha_pid|$std"
  # libnfs 4.0's NFSv4 client fails PostMark's creates (NFS4ERR_BAD_SEQID at CLOSE): reads only
  "ganesha-v4|$nfs4|-|$ganesha_pid|lat,q8,q16,q64,seq"
  "odafs-rpc|odafs://$rpc_addr/|rpc|$rpc_pid|$std"
  "odafs-ordma-tcp|odafs://$ordma_addr/|ordma_tcp|$ordma_pid|$std"
  "odafs-ordma-ring|odafs://$ordma_addr/|ordma|$ordma_pid|$std"
)
rows=$work/rows.jsonl
: >"$rows"


limits() {  # round
  local m b
  for m in blocking client_poll busy shm shm_doorbell memcpy; do
    for b in 64 4096 1048576; do
      [ "$b" = 1048576 ] && [ "$m" != memcpy ] && continue
      local iters=20000
      [ "$b" = 1048576 ] && iters=2000
      printf '{"contender": "limit", "round": %s, "workload": "limit", "limit": %s}\n' "$1" \
        "$(build/odafs-tcp-pingpong --mode $m --bytes $b --iters $iters | tail -1)" >>"$rows"
    done
  done
  local port
  port=$(free_port)
  iperf3 -s -B 127.0.0.1 -p "$port" -1 >/dev/null 2>&1 &
  iperf_pid=$!
  sleep 0.3
  local bps
  bps=$(iperf3 -c 127.0.0.1 -p "$port" -t 2 -J | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])')
  wait "$iperf_pid" 2>/dev/null || true
  iperf_pid=""
  printf '{"contender": "iperf3", "round": %s, "workload": "seq", "mb_per_s": %.1f}\n' "$1" \
    "$(python3 -c "print($bps / 8e6)")" >>"$rows"
}

t_start=$(date +%s)
for round in $(seq "$rounds"); do
  n=${#contenders[@]}
  for k in $(seq 0 $((n - 1))); do
    IFS='|' read -r name target mode spid run <<<"${contenders[$(((k + round) % n))]}"
    if [ -n "$only" ]; then  # this contender's workloads that WORKLOADS names
      run=$(tr , '\n' <<<"$run" | grep -Fxf <(tr , '\n' <<<"$only") | paste -sd, || true)
      [ -n "$run" ] || continue
    fi
    echo "== round $round/$rounds: $name"
    peers "$name" "$target" "$mode" "$spid" "$run" "$round" >>"$rows" ||
      die "$name failed in round $round"
    [ "$multi" = 1 ] || continue
    # Four client processes at once, 8 reads in flight each, starting together.
    start_at=$(($(date +%s%3N) + 2500))
    procs=()
    for c in 1 2 3 4; do
      peers "$name" "$target" "$mode" "$spid" q8 "$round" --label multi4 \
        --start-at "$start_at" >>"$rows" &
      procs+=($!)
    done
    for p in "${procs[@]}"; do wait "$p" || die "$name: a multi-client process failed"; done
  done
  [ "$with_limits" = 1 ] || continue
  echo "== round $round/$rounds: limits"
  limits "$round"
done
echo "== measured in $(($(date +%s) - t_start)) s"

cp "$rows" "$out/peers-rows.jsonl"  # report.py can be rerun on it
python3 bench/peers/report.py "$rows" --out "$out" \
  --machine "$(nproc) cpus, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
