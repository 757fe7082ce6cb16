#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "PostMark": odafsd on core 0 (--threads 2, 4 KiB cache
# blocks as in the paper, a server cache that holds the whole pool), odafs-postmark on
# core 1.
#  1. The paper's Fig. 6: read-only transactions, each read wrapped in open and close,
#     4 KiB average files, a pool larger than the client cache, which holds 25, 50 and 75 %
#     of it; ODAFS (one-sided reads) against DAFS (the same client by RPC: pre-posted,
#     inline, direct), interleaved and repeated.
#  2. Standard PostMark (creates, deletes, appends, reads), ORDMA on and off.
# Writes docs/results/postmark-fig6.{json,svg} and postmark-standard-*.json (or to $OUT).
#   bash bench/postmark/run_postmark.sh [REPEAT] [TRANSACTIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
repeat=${1:-3}
txns=${2:-10000}
build_targets odafsd odafs-postmark

start_odafsd postmark taskset -c 0 -- --threads 2 --block-size 4096 --cache-mb 256
echo "== Fig. 6: read-only PostMark, client cache at 25/50/75 % of the pool"
taskset -c 1 build/odafs-postmark --url "odafs://$addr/" --files 4000 \
  --transactions "$txns" --warmup "$txns" --size-low 1024 --size-high 7168 \
  --read-block 4096 --write-block 4096 --bias-read 10 --bias-create -1 \
  --read-modes ordma,rpc_preposted,rpc_inline,direct --cache-fractions 0.25,0.5,0.75 \
  --repeat "$repeat" --json "$out/postmark-fig6.json"
python3 bench/plot.py "$out/postmark-fig6.json" "$out/postmark-fig6.svg" --key results \
  --png "$out/postmark-fig6.png" \
  --x cache_fraction --y tps --series read_mode \
  --title "Read-only PostMark (4 KiB files): transactions/s against client cache share"

echo "== standard PostMark, ORDMA on and off"
taskset -c 1 build/odafs-postmark --url "odafs://$addr/" --files 1000 \
  --transactions "$((txns / 4))" --read-modes ordma,rpc_preposted --repeat "$repeat" \
  --json "$out/postmark-standard.json"
stop_odafsd
