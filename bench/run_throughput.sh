#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "RPC read throughput": 4 KiB READs with 1..64 in flight on
# one connection, odafsd (--threads 2) and the client as separate processes, unpinned.
# Writes docs/results/throughput-4k.json and .svg (or to $OUT).
#   bash bench/run_throughput.sh [SECONDS_PER_POINT]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3}
out=${OUT:-docs/results}
mkdir -p "$out"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build odafsd odafs-throughput >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-bench-XXXXXX")
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT
mkdir "$work/export"
ODAFS_LOG=warn build/odafsd --export "$work/export" --listen 127.0.0.1:0 --threads 2 \
  >"$work/ready" &
pid=$!
for _ in $(seq 100); do grep -q ready "$work/ready" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready")
build/odafs-throughput --url "odafs://$addr/" --seconds "$secs" --block 4096 \
  --json "$out/throughput-4k.json"
python3 bench/plot.py "$out/throughput-4k.json" "$out/throughput-4k.svg" --x inflight \
  --y ops_per_s --series mechanism --logx --title "4 KiB RPC reads, one connection"
echo "plot: $out/throughput-4k.svg"
