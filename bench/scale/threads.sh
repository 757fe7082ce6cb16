#!/usr/bin/env bash
# The RPC server's throughput against its thread count, for this checkout and BASE in one
# run: 2 client processes (odafs-server-throughput, rpc: a pre-posted 4 KiB READ per block,
# 256 KiB of them in flight per client, 32 MiB warm file each), odafsd --threads 2 and
# --threads 16 (or THREADS="..."), builds and thread counts interleaved, ROUNDS times; with
# perf installed, context switches and CPU migrations of odafsd over each run too.
#   [THREADS="2 16"] bash bench/scale/threads.sh BASE [ROUNDS]
# Prints medians and spreads and writes $OUT/scale-threads.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
base=${1:?usage: bench/scale/threads.sh BASE [ROUNDS]}
rounds=${2:-3}
threads=${THREADS:-"2 16"}
build_targets odafsd odafs-server-throughput
build_base "$base" odafsd
require_same_protocol
rows=$out/scale-threads-rows.jsonl
: >"$rows"
pairs=()
for t in $threads; do pairs+=("new:build@$t" "base:$base_dir/build@$t"); done
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < ${#pairs[@]}; i++)); do
    pair=${pairs[$(((i + r) % ${#pairs[@]}))]}
    label=${pair%%:*}
    rest=${pair#*:}
    dir=${rest%@*}
    t=${rest##*@}
    ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$t-$r" -- --threads "$t" --block-size 4096
    perf_out=$work/perf-$label-$t-$r
    if command -v perf >/dev/null; then
      perf stat -x, -e context-switches,cpu-migrations -p "$pid" -o "$perf_out" &
      perf_pid=$!
    fi
    build/odafs-server-throughput --url "odafs://$addr/" --clients 2 --file-mb 32 --rounds 1 \
      --mechanisms rpc --json "$work/st.json" >/dev/null
    cs=0 mig=0
    if [ -n "${perf_pid:-}" ]; then
      kill -INT "$perf_pid"
      wait "$perf_pid" 2>/dev/null || true
      cs=$(awk -F, '/context-switches/ {print $1}' "$perf_out")
      mig=$(awk -F, '/cpu-migrations/ {print $1}' "$perf_out")
      perf_pid=""
    fi
    stop_odafsd
    python3 - "$work/st.json" "$label" "$t" "$r" "${cs:-0}" "${mig:-0}" >>"$rows" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))[0]
print(json.dumps({"contender": sys.argv[2], "threads": int(sys.argv[3]), "round": int(sys.argv[4]),
                  "mib_per_s": d["mib_per_s_median"], "server_cpu_us_per_mib": d["server_cpu_us_per_mib"],
                  "context_switches": int(sys.argv[5] or 0), "cpu_migrations": int(sys.argv[6] or 0)}))
PY
    echo "  round $r: $label --threads $t done" >&2
  done
done
python3 - "$rows" "$out/scale-threads.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
pts = {}
for r in rows:
    pts.setdefault((r["contender"], r["threads"]), []).append(r)
summary = []
print(f"{'build':6} {'threads':>7} {'MiB/s':>8} {'min..max':>15} {'srv us/MiB':>10} "
      f"{'min..max':>13} {'ctx sw':>8} {'migr':>6}")
for (c, t), rs in sorted(pts.items()):
    m = [x["mib_per_s"] for x in rs]
    u = [x["server_cpu_us_per_mib"] for x in rs]
    s = {"contender": c, "threads": t, "mib_per_s_median": statistics.median(m),
         "mib_per_s_min": min(m), "mib_per_s_max": max(m),
         "server_cpu_us_per_mib_median": statistics.median(u),
         "server_cpu_us_per_mib_min": min(u), "server_cpu_us_per_mib_max": max(u),
         "context_switches_median": statistics.median(x["context_switches"] for x in rs),
         "cpu_migrations_median": statistics.median(x["cpu_migrations"] for x in rs)}
    summary.append(s)
    print(f"{c:6} {t:>7} {s['mib_per_s_median']:>8.1f} {min(m):>7.1f}..{max(m):<6.1f} "
          f"{s['server_cpu_us_per_mib_median']:>10.0f} {min(u):>6.0f}..{max(u):<6.0f} "
          f"{s['context_switches_median']:>8.0f} {s['cpu_migrations_median']:>6.0f}")
for c in sorted({s["contender"] for s in summary}):
    mine = sorted((s for s in summary if s["contender"] == c), key=lambda s: s["threads"])
    lo, hi = mine[0], mine[-1]
    print(f"{c}: --threads {hi['threads']} / --threads {lo['threads']}: "
          f"{hi['mib_per_s_median'] / lo['mib_per_s_median']:.2f}x the throughput at "
          f"{hi['server_cpu_us_per_mib_median'] / lo['server_cpu_us_per_mib_median']:.2f}x "
          f"the server CPU per MiB")
json.dump({"points": summary, "rows": rows}, open(sys.argv[2], "w"), indent=1)
PY
