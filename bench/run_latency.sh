#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "RPC read latency": odafsd and the client as separate
# processes on 127.0.0.1, first sharing one core, then pinned apart; plus the bare TCP
# ping-pong floor. Writes JSON to docs/results/ (or $OUT).
#   bash bench/run_latency.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
iters=${1:-20000}
build_targets odafsd odafs-latency odafs-tcp-pingpong

run() {  # name server_cpu client_cpu
  local name=$1 scpu=$2 ccpu=$3
  start_odafsd "$name" taskset -c "$scpu" -- --threads 2
  echo "== $name: odafsd on cpu $scpu, client on cpu $ccpu"
  taskset -c "$ccpu" build/odafs-latency --url "odafs://$addr/" --iters "$iters" --file-mb 16 \
    --blocks 4096,16384,65536,262144,1048576 --json "$out/latency-$name.json"
  stop_odafsd
}

run same-core 1 1
run two-cores 0 1
echo "== bare TCP ping-pong, 64 bytes, both processes on cpu 1"
taskset -c 1 build/odafs-tcp-pingpong --iters "$iters" | tee "$work/pp-same" | head -2
tail -1 "$work/pp-same" >"$out/tcp-pingpong-same-core.json"
echo "== bare TCP ping-pong, 64 bytes, processes free to run on either cpu"
build/odafs-tcp-pingpong --iters "$iters" | tee "$work/pp-free" | head -2
tail -1 "$work/pp-free" >"$out/tcp-pingpong-two-cores.json"
