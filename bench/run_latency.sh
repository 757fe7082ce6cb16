#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "RPC read latency": odafsd and the client as separate
# processes on 127.0.0.1, first sharing one core, then pinned apart; plus the bare TCP
# ping-pong floor. Writes JSON to docs/results/ (or $OUT).
#   bash bench/run_latency.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20000}
out=${OUT:-docs/results}
mkdir -p "$out"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build odafsd odafs-latency odafs-tcp-pingpong >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-bench-XXXXXX")
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT

run() {  # name server_cpu client_cpu
  local name=$1 scpu=$2 ccpu=$3
  mkdir -p "$work/export-$name"
  ODAFS_LOG=warn taskset -c "$scpu" build/odafsd --export "$work/export-$name" \
    --listen 127.0.0.1:0 --threads 2 >"$work/ready-$name" &
  pid=$!
  for _ in $(seq 100); do grep -q ready "$work/ready-$name" 2>/dev/null && break; sleep 0.1; done
  local addr
  addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready-$name")
  echo "== $name: odafsd on cpu $scpu, client on cpu $ccpu"
  taskset -c "$ccpu" build/odafs-latency --url "odafs://$addr/" --iters "$iters" --file-mb 16 \
    --blocks 4096,16384,65536,262144,1048576 --json "$out/latency-$name.json"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}

run same-core 1 1
run two-cores 0 1
echo "== bare TCP ping-pong, 64 bytes, both processes on cpu 1"
taskset -c 1 build/odafs-tcp-pingpong --iters "$iters" | tee "$work/pp-same" | head -2
tail -1 "$work/pp-same" >"$out/tcp-pingpong-same-core.json"
echo "== bare TCP ping-pong, 64 bytes, processes free to run on either cpu"
build/odafs-tcp-pingpong --iters "$iters" | tee "$work/pp-free" | head -2
tail -1 "$work/pp-free" >"$out/tcp-pingpong-two-cores.json"
