#!/usr/bin/env bash
# Standard PostMark on the library for two builds in one run: the checkout's odafsd and
# odafs-postmark against BASE's (any git revision, built once in a worktree beside the
# checkout, as bench/compare_builds.sh does), interleaved (A B, then B A, ...), odafsd on
# core 0 with --threads 2 --block-size 4096 --cache-mb 256, the client on core 1, both read
# modes (ordma, rpc_preposted). Prints medians and spreads (min..max) of transactions/s and
# server CPU per transaction, and writes $OUT/postmark-compare.json.
#   bash bench/postmark/compare_builds.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]
# FIG6=1 runs the paper's Fig. 6 configuration instead (read-only transactions on 4,000
# files of 1-7 KiB, as bench/postmark/run_postmark.sh; FILES and TRANSACTIONS still apply)
# at client cache shares of 25 and 75 %, and writes $OUT/postmark-fig6-compare.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
base=${1:?usage: bench/postmark/compare_builds.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]}
rounds=${2:-3}
fig6=${FIG6:-0}
files=${3:-$([ "$fig6" = 1 ] && echo 4000 || echo 1000)}
txns=${4:-$([ "$fig6" = 1 ] && echo 5000 || echo 2500)}
workload=()
result=postmark-compare.json
if [ "$fig6" = 1 ]; then
  workload=(--warmup "$txns" --size-low 1024 --size-high 7168 --read-block 4096
    --write-block 4096 --bias-read 10 --bias-create -1 --cache-fractions 0.25,0.75)
  result=postmark-fig6-compare.json
fi
build_targets odafsd odafs-postmark

build_base "$base" odafsd odafs-postmark

run_one() {  # label build_dir round
  local label=$1 dir=$2 round=$3
  ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$round" taskset -c 0 -- --threads 2 \
    --block-size 4096 --cache-mb 256
  taskset -c 1 "$dir/odafs-postmark" --url "odafs://$addr/" --files "$files" \
    --transactions "$txns" --read-modes ordma,rpc_preposted --repeat 1 "${workload[@]}" \
    --json "$work/$label-$round.json" >/dev/null
  stop_odafsd
  echo "  $label round $round done" >&2
}

interleave "$rounds"

python3 - "$work" "$rounds" "$out/$result" "$base" <<'PY'
import sys
sys.path.insert(0, "bench")
from compare_report import report, runs
work, rounds, out, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for label, d in runs(work, rounds):
    for res in d["results"]:
        mode = res["read_mode"]
        if "cache_fraction" in res and len({r.get("cache_fraction") for r in d["results"]}) > 1:
            mode += "@cache%g" % res["cache_fraction"]
        rows.setdefault(("txn_per_s", mode, label), []).append(res["tps"])
        if "server_cpu_us_per_txn" in res:
            rows.setdefault(("server_us_per_txn", mode, label), []).append(
                res["server_cpu_us_per_txn"])
report(rows, out, base, rounds, "read_mode")
PY
