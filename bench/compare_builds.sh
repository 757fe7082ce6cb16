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

# The base revision, built once in a worktree beside the checkout and reused.
base_dir=${BASE_DIR:-/tmp/odafs-base-$(git rev-parse --short "$base")}
if [ ! -x "$base_dir/build/odafs-micro" ]; then
  rm -rf "$base_dir"
  git worktree add --detach -f "$base_dir" "$base" >/dev/null
  cmake -S "$base_dir" -B "$base_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DODAFS_BUILD_TESTS=OFF >/dev/null
  ninja -C "$base_dir/build" odafsd odafs-micro >/dev/null
fi

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

for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    run_one base "$base_dir/build" "$r"; run_one new build "$r"
  else
    run_one new build "$r"; run_one base "$base_dir/build" "$r"
  fi
done

python3 - "$work" "$rounds" "$out/micro-compare.json" "$base" <<'PY'
import json, statistics, sys
work, rounds, out, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for label in ("base", "new"):
    for r in range(1, rounds + 1):
        d = json.load(open(f"{work}/{label}-{r}.json"))
        for l in d["latency"]:
            rows.setdefault(("latency", l["mechanism"], label), []).append(l["mean_us"])
            rows.setdefault(("cpu", l["mechanism"], label), []).append(l["server_cpu_us_per_op"])
        for t in d["throughput"]:
            key = ("ops_per_s@%d" % t["inflight"], t["mechanism"], label)
            rows.setdefault(key, []).append(t["ops_per_s"])
result = []
print(f"{'metric':<16} {'mechanism':<14} {'base median':>12} {'base spread':>22} "
      f"{'new median':>12} {'new spread':>22} {'new/base':>9}")
for (metric, mech, label) in sorted(k for k in rows if k[2] == "base"):
    b, n = rows[(metric, mech, "base")], rows.get((metric, mech, "new"), [])
    if not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    result.append({"metric": metric, "mechanism": mech, "base_median": mb, "base_min": min(b),
                   "base_max": max(b), "new_median": mn, "new_min": min(n), "new_max": max(n)})
    print(f"{metric:<16} {mech:<14} {mb:12.2f} {min(b):10.2f}..{max(b):<10.2f} "
          f"{mn:12.2f} {min(n):10.2f}..{max(n):<10.2f} {mn / mb if mb else 0:9.2f}")
json.dump({"base": base, "rounds": rounds, "rows": result}, open(out, "w"), indent=2)
PY
