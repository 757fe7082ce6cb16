#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "The paper's Fig. 7": server throughput against block
# size. For each block size, odafsd on core 0 (--threads 2, a cache holding the file) and
# two client processes on core 1 each read a 64 MiB file twice in 256 KiB requests whose
# blocks are all in flight at once; the second pass is measured. DAFS (a pre-posted READ
# per block) against ODAFS over the local ring and over the engine's TCP transport,
# interleaved over ROUNDS rounds. Writes docs/results/fig7.{json,svg,png} (or to $OUT).
#   bash bench/run_fig7.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
rounds=${1:-3}
build_targets odafsd odafs-server-throughput
parts=()
for block in 4096 8192 16384 32768 65536; do
  start_odafsd "fig7-$block" taskset -c 0 -- --threads 2 --block-size "$block" --cache-mb 256
  taskset -c 1 build/odafs-server-throughput --url "odafs://$addr/" --clients 2 --file-mb 64 \
    --request-kb 256 --rounds "$rounds" --mechanisms rpc,ordma,ordma_tcp \
    --json "$work/fig7-$block.json"
  stop_odafsd
  parts+=("$work/fig7-$block.json")
done
python3 - "$out/fig7.json" "${parts[@]}" <<'PY'
import json, sys
rows = [r for part in sys.argv[2:] for r in json.load(open(part))]
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("JSON written to", sys.argv[1])
PY
python3 bench/plot.py "$out/fig7.json" "$out/fig7.svg" --png "$out/fig7.png" \
  --x block_bytes --y mib_per_s_median --series mechanism --logx --title "Server throughput (MiB/s) against block size, 2 clients"
echo "plot: $out/fig7.svg"
