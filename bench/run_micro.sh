#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "Table 3": odafsd (--threads 2, one engine thread,
# 4 KiB cache blocks as in the paper) and odafs-micro reading 4 KiB blocks, first with
# server and client sharing core 1, then unpinned.
# Writes docs/results/micro-same-core.json and micro-unpinned.json with SVG plots (or to
# $OUT).
#   bash bench/run_micro.sh [FILE_MB]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
mb=${1:-16}
build_targets odafsd odafs-micro

run() {  # name [launcher...]
  local name=$1
  shift
  start_odafsd "$name" "$@" -- --threads 2 --block-size 4096
  echo "== $name"
  "$@" build/odafs-micro --url "odafs://$addr/" --file-mb "$mb" --json "$out/micro-$name.json"
  stop_odafsd
  python3 bench/plot.py "$out/micro-$name.json" "$out/micro-$name.svg" --key throughput \
    --x inflight --y ops_per_s --series mechanism --logx \
    --title "4 KiB reads, N client threads, one mount ($name)"
}

run same-core taskset -c 1
run unpinned env
