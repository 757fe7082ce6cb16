#!/usr/bin/env bash
# Standard PostMark on the library from 1 and from 2 (or PROCS="1 2 4") processes at once,
# each in its own directory of one export, for this checkout's odafsd and, with BASE,
# another revision's, interleaved and repeated. The server's CPU (all its threads, from
# /proc/PID/stat) over the whole runs (pools created, transactions, pools deleted) divided
# by the transactions is its CPU per transaction: it should stay flat as processes are added. odafsd runs with its defaults (loops from the cores)
# and --block-size 4096 --cache-mb 256; read mode ordma.
#   [BASE=REV] [PROCS="1 2"] bash bench/postmark/processes.sh [ROUNDS] [FILES] [TRANSACTIONS]
# Prints a table of medians and spreads and writes $OUT/postmark-processes.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-3}
files=${2:-1000}
txns=${3:-2500}
procs=${PROCS:-"1 2"}
build_targets odafsd odafs-postmark
contenders=("new:build")
if [ -n "${BASE:-}" ]; then
  build_base "$BASE" odafsd
  contenders+=("base:$base_dir/build")
fi
rows=$work/rows.jsonl
: >"$rows"
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < ${#contenders[@]}; i++)); do
    c=${contenders[$(((i + r) % ${#contenders[@]}))]}
    label=${c%%:*}
    dir=${c#*:}
    for p in $procs; do
      ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$p-$r" -- --block-size 4096 --cache-mb 256
      for ((k = 1; k <= p; k++)); do mkdir -p "$work/export-$label-$p-$r/p$k"; done
      cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
      t0=$(date +%s.%N)
      for ((k = 1; k <= p; k++)); do
        build/odafs-postmark --url "odafs://$addr/p$k" --files "$files" --transactions "$txns" \
          --read-modes ordma --repeat 1 --seed "$k" --json "$work/pm-$k.json" >/dev/null &
      done
      wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
      t1=$(date +%s.%N)
      cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
      stop_odafsd
      python3 - "$work" "$p" "$label" "$r" "$cpu0" "$cpu1" "$t0" "$t1" "$txns" >>"$rows" <<'PY'
import json, os, sys
work, p, label, r = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
cpu0, cpu1, t0, t1, txns = (float(x) for x in sys.argv[5:10])
ticks = os.sysconf("SC_CLK_TCK")
done = 0
for k in range(1, p + 1):
    d = json.load(open(f"{work}/pm-{k}.json"))
    done += d["transactions"]
print(json.dumps({"contender": label, "processes": p, "round": r,
                  "txn_per_s": done / (t1 - t0),
                  "server_cpu_us_per_txn": (cpu1 - cpu0) * 1e6 / ticks / done}))
PY
      echo "  round $r: $label, $p process(es) done" >&2
    done
  done
done
python3 - "$rows" "$out/postmark-processes.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
points = {}
for r in rows:
    points.setdefault((r["contender"], r["processes"]), []).append(r)
summary = []
print(f"{'build':6} {'procs':>5} {'txn/s':>9} {'min..max':>17} {'srv us/txn':>11} {'min..max':>15}")
for (label, p), rs in sorted(points.items()):
    t = [x["txn_per_s"] for x in rs]
    c = [x["server_cpu_us_per_txn"] for x in rs]
    summary.append({"contender": label, "processes": p, "txn_per_s_median": statistics.median(t),
                    "txn_per_s_min": min(t), "txn_per_s_max": max(t),
                    "server_cpu_us_per_txn_median": statistics.median(c),
                    "server_cpu_us_per_txn_min": min(c), "server_cpu_us_per_txn_max": max(c)})
    print(f"{label:6} {p:>5} {statistics.median(t):>9.0f} {min(t):>8.0f}..{max(t):<8.0f} "
          f"{statistics.median(c):>11.1f} {min(c):>7.1f}..{max(c):<7.1f}")
for label in sorted({s["contender"] for s in summary}):
    mine = sorted((s for s in summary if s["contender"] == label), key=lambda s: s["processes"])
    one = mine[0]["server_cpu_us_per_txn_median"]
    for s in mine[1:]:
        print(f"{label}: server CPU per transaction, {s['processes']} processes / "
              f"{mine[0]['processes']}: {s['server_cpu_us_per_txn_median'] / one:.2f}x")
json.dump({"points": summary, "rows": rows}, open(sys.argv[2], "w"), indent=1)
print("JSON:", sys.argv[2])
PY
