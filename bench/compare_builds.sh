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
run_one() {  # label build_dir round
  local label=$1 dir=$2 round=$3
  ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$round" -- --threads 2 --block-size 4096
  "$dir/odafs-micro" --url "odafs://$addr/" --file-mb "$mb" \
    --json "$work/$label-$round.json" ${MICRO_ARGS:-} >/dev/null
  stop_odafsd
  echo "  $label round $round done" >&2
}

compare_builds micro micro-compare.json odafsd odafs-micro
