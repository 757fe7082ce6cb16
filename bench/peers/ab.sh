#!/usr/bin/env bash
# Two builds of the client side compared in one run: odafs-peers binaries A and B against
# one odafsd (build/odafsd, or $ODAFSD), their runs interleaved (the order alternating each
# round), ROUNDS rounds; prints each figure's median and spread, and writes the rows to
# docs/results/peers-ab.jsonl (or $OUT). For a change to the client library or the engine's
# client side: keep a copy of build/odafs-peers before it, rebuild, then
#
#   bash bench/peers/ab.sh /tmp/odafs-peers.before build/odafs-peers
#       # MODES="ordma_tcp ordma" RUN=lat,q16,seq ROUNDS=5 SECONDS_PER_POINT=1
#
# With perf installed, each binary's workloads are also counted once per mode (system calls
# and context switches per read, both sides; seq: per MiB), as bench/peers/bound.sh does.
# For a change to the server, give each build its own odafsd: ODAFSD_A and ODAFSD_B (paths
# to the two odafsd binaries; each side then reads from its own server, same files):
#
#   ODAFSD_A=/tmp/base/build/odafsd ODAFSD_B=build/odafsd MODES=rpc_preposted RUN=lat \
#     bash bench/peers/ab.sh /tmp/base/build/odafs-peers build/odafs-peers
#
# Run it under flock /tmp/odafs-build.lock when others share the machine.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: ab.sh PEERS_A PEERS_B" >&2; exit 2; }
a=$(realpath "$1")
b=$(realpath "$2")
cd "$(dirname "$0")/../.."
modes=${MODES:-ordma_tcp ordma}
run=${RUN:-lat,q16,seq}
rounds=${ROUNDS:-5}
secs=${SECONDS_PER_POINT:-1}
odafsd_a=$(realpath "${ODAFSD_A:-${ODAFSD:-build/odafsd}}")
odafsd_b=$(realpath "${ODAFSD_B:-$odafsd_a}")
source bench/lib.sh  # $out, $work, start_odafsd (stopped at exit)
source bench/peers/common.sh

make_peer_files "$a" "$work/export-peers"
ODAFSD_BIN=$odafsd_a start_odafsd peers -- --cache-mb 512 || exit 1
srv_pid_a=$pid addr_a=$addr srv_pid_b=$pid addr_b=$addr
if [ "$odafsd_b" != "$odafsd_a" ]; then
  make_peer_files "$a" "$work/export-peers-b"
  pid=""  # the exit trap stops the last one started; the first is stopped here
  trap 'kill $srv_pid_a $pid 2>/dev/null; rm -rf "$work"' EXIT
  ODAFSD_BIN=$odafsd_b start_odafsd peers-b -- --cache-mb 512 || exit 1
  srv_pid_b=$pid addr_b=$addr
fi
server_of() {  # A|B: sets srv_pid and addr to that side's odafsd
  if [ "$1" = B ]; then srv_pid=$srv_pid_b addr=$addr_b; else srv_pid=$srv_pid_a addr=$addr_a; fi
}

rows=$out/peers-ab.jsonl
: >"$rows"
peers() {  # binary mode [flags...]
  local bin=$1 mode=$2
  shift 2
  "$bin" --target "odafs://$addr/" --mode "$mode" --name "$mode" --server-pid "$srv_pid" "$@"
}
tag() {  # label: prefixes each JSON line with "build": label
  sed "s/^{/{\"build\": \"$1\", /" >>"$rows"
}

for r in $(seq "$rounds"); do
  for mode in $modes; do
    if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
    for which in $order; do
      bin=$a
      [ "$which" = B ] && bin=$b
      server_of "$which"
      echo "== round $r/$rounds: $mode, $which"
      peers "$bin" "$mode" --run "$run" --round "$r" --seconds "$secs" | tag "$which"
    done
  done
done

if command -v perf >/dev/null; then
  events="raw_syscalls:sys_enter,context-switches"
  mkfifo "$work/c.ctl" "$work/c.ack" "$work/s.ctl" "$work/s.ack"
  for mode in $modes; do
    for which in A B; do
      bin=$a
      [ "$which" = B ] && bin=$b
      server_of "$which"
      IFS=, read -ra ws <<<"$run"
      for w in "${ws[@]}"; do
        n=20000
        [ "$w" = seq ] && n=256
        perf stat -x, -e "$events" -D -1 --control "fifo:$work/s.ctl,$work/s.ack" \
          -p "$srv_pid" -o "$work/srv.csv" -- \
          perf stat -x, -e "$events" -D -1 --control "fifo:$work/c.ctl,$work/c.ack" \
          -o "$work/cli.csv" -- \
          "$bin" --target "odafs://$addr/" --mode "$mode" --name "$mode" \
          --server-pid "$srv_pid" --run "$w" --ops "$n" \
          --perf-ctl "$work/s.ctl:$work/s.ack,$work/c.ctl:$work/c.ack" >/dev/null \
          2> >(grep -v "^Events" >&2)
        python3 - "$which" "$mode" "$w" "$n" "$work" <<'PY' | tag "$which"
import json, sys
which, mode, w, n, work = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
row = {"contender": mode, "workload": "count/" + w}
for side in ("cli", "srv"):
    for line in open(f"{work}/{side}.csv"):
        f = line.strip().split(",")
        if len(f) > 2 and f[0] and not line.startswith("#"):
            key = {"raw_syscalls:sys_enter": "syscalls", "context-switches": "ctx"}[f[2]]
            row[f"{side}_{key}_per_op"] = round(float(f[0]) / n, 3)
print(json.dumps(row))
PY
      done
    done
  done
fi

python3 bench/peers/ab_table.py "$rows" build A B
echo "rows: $rows"
