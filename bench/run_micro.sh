#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "Table 3": odafsd (--threads 2, one engine thread,
# 4 KiB cache blocks as in the paper) and odafs-micro reading 4 KiB blocks, first with
# server and client sharing core 1, then unpinned.
# Writes docs/results/micro-same-core.json and micro-unpinned.json (or to $OUT).
#   bash bench/run_micro.sh [FILE_MB]
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-16}
out=${OUT:-docs/results}
mkdir -p "$out"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build odafsd odafs-micro >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-bench-XXXXXX")
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT

run() {  # name taskset-prefix...
  local name=$1
  shift
  mkdir -p "$work/export-$name"
  ODAFS_LOG=warn "$@" build/odafsd --export "$work/export-$name" --listen 127.0.0.1:0 \
    --threads 2 --block-size 4096 >"$work/ready-$name" &
  pid=$!
  for _ in $(seq 100); do grep -q ready "$work/ready-$name" 2>/dev/null && break; sleep 0.1; done
  local addr
  addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready-$name")
  echo "== $name"
  "$@" build/odafs-micro --url "odafs://$addr/" --file-mb "$mb" --json "$out/micro-$name.json"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}

run same-core taskset -c 1
run unpinned env
for name in same-core unpinned; do
  python3 bench/plot.py "$out/micro-$name.json" "$out/micro-$name.svg" --key throughput \
    --x inflight --y ops_per_s --series mechanism --logx \
    --title "4 KiB reads, N client threads, one mount ($name)"
done
