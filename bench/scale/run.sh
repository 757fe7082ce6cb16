#!/usr/bin/env bash
# How one odafsd scales with its threads and its clients: sweeps server threads (--threads:
# 1, the usable cores, 4x the cores) x client processes (1, 2, 4 .. 2x the cores) x six
# workloads (bench/scale/scale.cc: read_rpc, read_ring, read_tcp, getattr, create_remove,
# write_commit), each client one operation at a time. Every (build, threads) server is
# started fresh each round, their order rotating from round to round, workloads rotating
# too; ROUNDS rounds of SECONDS per point. Server CPU per operation comes from STATS.
# Beside them, the machine's limits: memcpy of 4 KiB on every core at once, and loopback
# TCP round trips of 4 KiB with as many streams as clients (odafs-tcp-pingpong, one per
# stream): the ceiling of one-at-a-time RPC clients here.
#
#   [BASE=REV] [THREADS="1 2 8"] [CLIENTS="1 2 4"] [WORKLOADS="read_rpc getattr"] \
#     [THREADS_PER_CLIENT=T] bash bench/scale/run.sh [ROUNDS] [SECONDS]
#
# THREADS_PER_CLIENT runs T threads in each client process on its one connection, so that
# T calls of a client are in flight together (default 1: one operation at a time).
#
# BASE adds the odafsd of another revision (built in a worktree, bench/lib.sh) as a second
# contender in the same run. Writes $OUT/scale.json (rows, medians, spreads, checks) and
# $OUT/scale-WORKLOAD-{ops,cpu}.svg/.png, keeps the raw rows in $OUT/scale-rows.jsonl;
# prints a table. Runs on any core count (about 10 minutes on 2 cores with BASE).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-3}
secs=${2:-1}
cores=$(nproc) # honours the affinity mask, as odafsd's defaults do
threads=${THREADS:-"1 $cores $((4 * cores))"}
if [ -z "${CLIENTS:-}" ]; then
  CLIENTS=""
  for ((n = 1; n < 2 * cores; n *= 2)); do CLIENTS="$CLIENTS $n"; done
  CLIENTS="$CLIENTS $((2 * cores))"
fi
workloads=${WORKLOADS:-"read_rpc read_ring read_tcp getattr create_remove write_commit"}
per_client=${THREADS_PER_CLIENT:-1} # threads per client process, sharing its connection
build_targets odafsd odafs-scale odafs-tcp-pingpong
contenders=("new:build/odafsd")
if [ -n "${BASE:-}" ]; then
  build_base "$BASE" odafsd
  require_same_protocol
  contenders+=("base:$base_dir/build/odafsd")
fi
rows=$out/scale-rows.jsonl # kept as it grows: a run stopped half way keeps its rows
: >"$rows"

# Every (contender, threads) pair, rotated by the round.
pairs=()
for c in "${contenders[@]}"; do for t in $threads; do pairs+=("$c@$t"); done; done
read -r -a wl <<<"$workloads"
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < ${#pairs[@]}; i++)); do
    pair=${pairs[$(((i + r) % ${#pairs[@]}))]}
    label=${pair%%:*}
    rest=${pair#*:}
    bin=${rest%@*}
    t=${rest##*@}
    ODAFSD_BIN=$bin start_odafsd "$label-$t-$r" -- --threads "$t" --block-size 4096
    for ((k = 0; k < ${#wl[@]}; k++)); do
      w=${wl[$(((k + r) % ${#wl[@]}))]}
      for n in $CLIENTS; do
        line=$(build/odafs-scale --url "odafs://$addr/" --workload "$w" --clients "$n" \
          --seconds "$secs" --threads "$per_client")
        echo "${line%\}}, \"contender\": \"$label\", \"threads\": $t, \"round\": $r}" >>"$rows"
      done
    done
    stop_odafsd
    echo "  round $r: $label --threads $t done" >&2
  done
done

# The machine's limits, measured the same way (one process per stream or core).
limits=$work/limits.jsonl
: >"$limits"
for n in $CLIENTS; do
  for ((j = 0; j < n; j++)); do
    build/odafs-tcp-pingpong --mode blocking --bytes 4096 --iters 20000 | tail -1 >"$work/pp-$j" &
  done
  wait
  python3 - "$work" "$n" >>"$limits" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
rts = [json.loads(open(f"{work}/pp-{j}").read()) for j in range(n)]
print(json.dumps({"limit": "tcp_roundtrips", "clients": n,
                  "ops_per_s": sum(1e6 / r["mean_us"] for r in rts)}))
PY
done
for ((j = 0; j < cores; j++)); do
  build/odafs-tcp-pingpong --mode memcpy --bytes 4096 --iters 100000 | tail -1 >"$work/mc-$j" &
done
wait
python3 - "$work" "$cores" >>"$limits" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
rs = [json.loads(open(f"{work}/mc-{j}").read()) for j in range(n)]
print(json.dumps({"limit": "memcpy_4k_all_cores", "cores": n,
                  "gb_per_s": sum(4096 / r["mean_us"] / 1e3 for r in rs)}))
PY

python3 bench/scale/report.py "$rows" "$limits" "$out" "$cores"
