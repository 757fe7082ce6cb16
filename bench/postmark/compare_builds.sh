#!/usr/bin/env bash
# Standard PostMark on the library for two builds in one run: the checkout's odafsd and
# odafs-postmark against BASE's (any git revision, built once in a worktree beside the
# checkout, as bench/compare_builds.sh does), interleaved (A B, then B A, ...), odafsd on
# core 0 with --threads 2 --block-size 4096 --cache-mb 256, the client on core 1, both read
# modes (ordma, rpc_preposted). Prints medians and spreads (min..max) of transactions/s and
# server CPU per transaction, and writes $OUT/postmark-compare.json.
#   bash bench/postmark/compare_builds.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
base=${1:?usage: bench/postmark/compare_builds.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]}
rounds=${2:-3}
files=${3:-1000}
txns=${4:-2500}
build_targets odafsd odafs-postmark

build_base "$base" odafsd odafs-postmark

run_one() {  # label build_dir round
  local label=$1 dir=$2 round=$3
  ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$round" taskset -c 0 -- --threads 2 \
    --block-size 4096 --cache-mb 256
  taskset -c 1 "$dir/odafs-postmark" --url "odafs://$addr/" --files "$files" \
    --transactions "$txns" --read-modes ordma,rpc_preposted --repeat 1 \
    --json "$work/$label-$round.json" >/dev/null
  stop_odafsd
  echo "  $label round $round done" >&2
}

interleave "$rounds"

python3 - "$work" "$rounds" "$out/postmark-compare.json" "$base" <<'PY'
import sys
sys.path.insert(0, "bench")
from compare_report import report, runs
work, rounds, out, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for label, d in runs(work, rounds):
    for res in d["results"]:
        mode = res["read_mode"]
        rows.setdefault(("txn_per_s", mode, label), []).append(res["tps"])
        if "server_cpu_us_per_txn" in res:
            rows.setdefault(("server_us_per_txn", mode, label), []).append(
                res["server_cpu_us_per_txn"])
report(rows, out, base, rounds, "read_mode")
PY
