#!/usr/bin/env bash
# Table 3 for two builds in one run: the checkout's build against BASE (any git revision),
# interleaved (A B, then B A, ...) so drift between minutes hits both alike; each contender
# runs ROUNDS times, server and client unpinned. Prints a table of medians and spreads
# (min..max) and writes $OUT/micro-compare.json.
#   [MICRO_ARGS="--inflight 1"] bash bench/compare_builds.sh BASE [ROUNDS] [FILE_MB]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
base=${1:?usage: bench/compare_builds.sh BASE [ROUNDS] [FILE_MB]}
rounds=${2:-5}
mb=${3:-16}
build_targets odafsd odafs-micro

build_base "$base" odafsd odafs-micro

run_one() {  # label build_dir round
  local label=$1 dir=$2 round=$3
  mkdir -p "$work/export-$label-$round"
  ODAFS_LOG=warn "$dir/odafsd" --export "$work/export-$label-$round" --listen 127.0.0.1:0 \
    --threads 2 --block-size 4096 >"$work/ready-$label-$round" &
  pid=$!
  for _ in $(seq 100); do grep -q ready "$work/ready-$label-$round" 2>/dev/null && break; sleep 0.1; done
  addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready-$label-$round")
  "$dir/odafs-micro" --url "odafs://$addr/" --file-mb "$mb" \
    --json "$work/$label-$round.json" ${MICRO_ARGS:-} >/dev/null
  stop_odafsd
  echo "  $label round $round done" >&2
}

interleave "$rounds"

python3 - "$work" "$rounds" "$out/micro-compare.json" "$base" <<'PY'
import sys
sys.path.insert(0, "bench")
from compare_report import report, runs
work, rounds, out, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for label, d in runs(work, rounds):
    for l in d["latency"]:
        rows.setdefault(("latency", l["mechanism"], label), []).append(l["mean_us"])
        rows.setdefault(("cpu", l["mechanism"], label), []).append(l["server_cpu_us_per_op"])
    for t in d["throughput"]:
        key = ("ops_per_s@%d" % t["inflight"], t["mechanism"], label)
        rows.setdefault(key, []).append(t["ops_per_s"])
report(rows, out, base, rounds, "mechanism")
PY
