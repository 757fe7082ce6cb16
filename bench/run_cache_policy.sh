#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "Client cache replacement": LRU against Multi-Queue.
#  1. odafs-cache-policy: hit ratios on synthetic traces, no server.
#  2. PostMark through odafsd (core 0) and odafs-postmark (core 1), each policy chosen with
#     ?cache_policy= in the mount URL, rounds alternating which policy goes first:
#     read-only PostMark as in the paper's Fig. 6 (client data cache at 25/50/75 % of the
#     pool), and standard PostMark (creates, deletes, appends, reads) at 25 %.
# Writes docs/results/cache-policy.json and cache-policy-postmark.json (or to $OUT).
#   bash bench/run_cache_policy.sh [ROUNDS] [TRANSACTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
rounds=${1:-3}
txns=${2:-10000}
build_targets odafsd odafs-postmark odafs-cache-policy

echo "== synthetic traces"
build/odafs-cache-policy --repeats 7 --contenders lru,mq,mq-life4 --json "$out/cache-policy.json"

start_odafsd policy taskset -c 0 -- --threads 2 --block-size 4096 --cache-mb 256
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="lru mq"; else order="mq lru"; fi
  for p in $order; do
    echo "== round $r: read-only PostMark, $p"
    taskset -c 1 build/odafs-postmark --url "odafs://$addr/?cache_policy=$p" --files 4000 \
      --transactions "$txns" --warmup "$txns" --size-low 1024 --size-high 7168 \
      --read-block 4096 --write-block 4096 --bias-read 10 --bias-create -1 \
      --read-modes ordma --cache-fractions 0.25,0.5,0.75 \
      --json "$work/postmark-fig6-$p-$r.json"
    echo "== round $r: standard PostMark, $p"
    taskset -c 1 build/odafs-postmark --url "odafs://$addr/?cache_policy=$p" --files 1000 \
      --transactions "$((txns / 4))" --read-modes ordma --cache-fractions 0.25 \
      --json "$work/postmark-standard-$p-$r.json"
  done
done
stop_odafsd
python3 bench/cache_policy_postmark.py "$work" "$rounds" "$out/cache-policy-postmark.json"
