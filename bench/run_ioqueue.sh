#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "Asynchronous reads through IoQueue": 4 KiB reads with
# N in flight from one thread, ORDMA (local ring) against pre-posted RPC, interleaved over
# ROUNDS rounds, odafsd (--threads 2, one engine thread) and the client unpinned.
# Writes docs/results/ioqueue-4k.json (or to $OUT).
#   bash bench/run_ioqueue.sh [SECONDS_PER_POINT] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
secs=${1:-1}
rounds=${2:-5}
build_targets odafsd odafs-ioqueue
start_odafsd ioqueue -- --threads 2 --block-size 4096
build/odafs-ioqueue --url "odafs://$addr/" --seconds "$secs" --rounds "$rounds" --block 4096 \
  --inflight 1,4,16,64 --mechanisms rpc,ordma,ordma_tcp --json "$out/ioqueue-4k.json"
stop_odafsd
