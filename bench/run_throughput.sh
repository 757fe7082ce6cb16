#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "RPC read throughput": 4 KiB READs with 1..64 in flight on
# one connection, odafsd (--threads 2) and the client as separate processes, unpinned.
# Writes docs/results/throughput-4k.json and .svg (or to $OUT).
#   bash bench/run_throughput.sh [SECONDS_PER_POINT]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
secs=${1:-3}
build_targets odafsd odafs-throughput
start_odafsd throughput -- --threads 2
build/odafs-throughput --url "odafs://$addr/" --seconds "$secs" --block 4096 \
  --json "$out/throughput-4k.json"
stop_odafsd
python3 bench/plot.py "$out/throughput-4k.json" "$out/throughput-4k.svg" --x inflight \
  --y ops_per_s --series mechanism --logx --title "4 KiB RPC reads, one connection"
echo "plot: $out/throughput-4k.svg"
