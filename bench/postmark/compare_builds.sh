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

base_dir=${BASE_DIR:-/tmp/odafs-base-$(git rev-parse --short "$base")}
if [ ! -x "$base_dir/build/odafs-postmark" ]; then
  [ -d "$base_dir" ] || git worktree add --detach -f "$base_dir" "$base" >/dev/null
  cmake -S "$base_dir" -B "$base_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DODAFS_BUILD_TESTS=OFF >/dev/null
  ninja -C "$base_dir/build" odafsd odafs-postmark >/dev/null
fi

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

for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    run_one base "$base_dir/build" "$r"; run_one new build "$r"
  else
    run_one new build "$r"; run_one base "$base_dir/build" "$r"
  fi
done

python3 - "$work" "$rounds" "$out/postmark-compare.json" "$base" <<'PY'
import json, statistics, sys
work, rounds, out, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for label in ("base", "new"):
    for r in range(1, rounds + 1):
        d = json.load(open(f"{work}/{label}-{r}.json"))
        for res in d["results"]:
            mode = res["read_mode"]
            rows.setdefault(("txn_per_s", mode, label), []).append(res["tps"])
            if "server_cpu_us_per_txn" in res:
                rows.setdefault(("server_us_per_txn", mode, label), []).append(
                    res["server_cpu_us_per_txn"])
result = []
print(f"{'metric':<18} {'read mode':<14} {'base median':>12} {'base spread':>22} "
      f"{'new median':>12} {'new spread':>22} {'new/base':>9}")
for (metric, mode, label) in sorted(k for k in rows if k[2] == "base"):
    b, n = rows[(metric, mode, "base")], rows.get((metric, mode, "new"), [])
    if not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    result.append({"metric": metric, "read_mode": mode, "base_median": mb, "base_min": min(b),
                   "base_max": max(b), "new_median": mn, "new_min": min(n), "new_max": max(n)})
    print(f"{metric:<18} {mode:<14} {mb:12.1f} {min(b):10.1f}..{max(b):<10.1f} "
          f"{mn:12.1f} {min(n):10.1f}..{max(n):<10.1f} {mn / mb if mb else 0:9.2f}")
json.dump({"base": base, "rounds": rounds,
           "rows": result}, open(out, "w"), indent=2)
PY
