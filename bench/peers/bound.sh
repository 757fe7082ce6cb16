#!/usr/bin/env bash
# What bounds odafs's shortfalls in docs/PERFORMANCE.md, counted rather than timed: system
# calls, context switches and CPU per read on the client and on the server, for the
# ORDMA paths (TCP and local ring), for ganesha + libnfs (NFSv3; GANESHA=0 skips it) and
# for the floors bench/peers compares them with (the TCP and shared-memory ping-pongs of
# bench/tcp_pingpong.cc), and the client's user-space instructions per read (callgrind).
#
#   bash bench/peers/bound.sh          # OPS=20000 SEQ_MIB=256; CALLGRIND=0 skips callgrind
#
# The client (odafs-peers) runs under `perf stat` (software events and syscall
# tracepoints, which work in a VM without hardware counters), the server under a second
# `perf stat -p` wrapped around it; both start disabled and odafs-peers --perf-ctl turns
# them on after its set-up and warm-up and off after the workload, so the counts are the
# workload's OPS reads (seq: SEQ_MIB 1 MiB reads) alone. The ping-pongs are counted by
# difference (ITERS and ITERS/10 round trips, same set-up), both processes together.
# Counts do not depend on load; the CPU figures (task-clock) and the timings in "run" do.
# Needs perf (Debian: linux-perf) and, for CALLGRIND=1, valgrind. Writes
# docs/results/peers-bound.jsonl (or to $OUT); run it under flock /tmp/odafs-build.lock
# when others share the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
ops=${OPS:-20000}
seq_mib=${SEQ_MIB:-256}
callgrind=${CALLGRIND:-1}
with_ganesha=${GANESHA:-1}

command -v perf >/dev/null || { echo "bound.sh: needs perf (linux-perf)" >&2; exit 1; }
source bench/lib.sh
source bench/peers/common.sh
source bench/peers/ganesha.sh
srv_pid="" ganesha_pid="" rpcbind_pid=""
cleanup() {
  local p
  for p in $srv_pid $ganesha_pid $rpcbind_pid; do kill "$p" 2>/dev/null || true; done
  for p in $srv_pid $ganesha_pid $rpcbind_pid; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "bound.sh: $*" >&2; exit 1; }
if [ "$with_ganesha" = 1 ] && ! command -v ganesha.nfsd >/dev/null; then
  die "GANESHA=1 needs nfs-ganesha (bench/peers/run.sh installs it), or run with GANESHA=0"
fi

build_targets odafsd odafs-peers odafs-tcp-pingpong
# Private copies: the measurement uses one build throughout, whatever else rebuilds build/.
bin=$work/bin
mkdir -p "$bin"
cp build/odafsd build/odafs-peers build/odafs-tcp-pingpong "$bin/"

syscalls="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait"
syscalls+=" epoll_ctl poll ppoll futex sched_yield clock_nanosleep"
events="raw_syscalls:sys_enter,context-switches,cpu-migrations,task-clock"
for s in $syscalls; do events+=",syscalls:sys_enter_$s"; done

make_peer_files "$bin/odafs-peers" "$work/export-peers"
ODAFSD_BIN=$bin/odafsd start_odafsd peers -- --cache-mb 512 || die "odafsd did not start"
srv_pid=$pid
if [ "$with_ganesha" = 1 ]; then  # the same files, exported by ganesha too
  start_rpcbind
  start_ganesha "$work/export-peers" "$work/ganesha"
fi

rows=$out/peers-bound.jsonl
: >"$rows"

mkfifo "$work/c.ctl" "$work/c.ack" "$work/s.ctl" "$work/s.ack"

# to_row NAME UNITS: one JSON row of $work/{cli,srv}.csv's counts per unit (task-clock in
# microseconds), with the last JSON line of $work/out.json as "run".
to_row() {
  python3 - "$1" "$2" "$work" >>"$rows" <<'PY'
import json, sys
sys.path.insert(0, "bench/peers")
from perf_csv import read_counts
name, units, work = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def load(path):
    out = {}
    for event, v in read_counts(path).items():
        k = event.replace("syscalls:sys_enter_", "")
        out["cpu_us" if k == "task-clock" else k] = v * 1e3 if k == "task-clock" else v
    return out
row = {"name": name, "units": units}
for side in ("cli", "srv"):
    c = load(f"{work}/{side}.csv")
    if c:
        row[side] = {k: round(v / units, 3) for k, v in c.items() if v / units >= 0.005}
last = open(f"{work}/out.json").read().strip().splitlines()
if last:
    try:
        row["run"] = json.loads(last[-1])
    except ValueError:
        pass
print(json.dumps(row))
PY
}

# counted_peers NAME WORKLOAD UNITS: odafs-peers as contender NAME (ordma_tcp, ordma, or
# ganesha for libnfs) doing UNITS reads (seq: MiB) of WORKLOAD, counted on both sides from
# the end of its warm-up to the end of the workload only (perf stat -D -1 with control
# FIFOs, which odafs-peers --perf-ctl drives).
counted_peers() {
  local name=$1 w=$2 n=$3 spid=$srv_pid
  local target=(--target "odafs://$addr/" --mode "$name")
  if [ "$name" = ganesha ]; then
    spid=$ganesha_pid
    target=(--target "nfs://127.0.0.1/export?nfsport=$nfs_port&mountport=$mnt_port")
  fi
  perf stat -x, -e "$events" -D -1 --control "fifo:$work/s.ctl,$work/s.ack" -p "$spid" \
    -o "$work/srv.csv" -- \
    perf stat -x, -e "$events" -D -1 --control "fifo:$work/c.ctl,$work/c.ack" \
    -o "$work/cli.csv" -- \
    "$bin/odafs-peers" "${target[@]}" --name "$name" --server-pid "$spid" --run "$w" \
    --ops "$n" --perf-ctl "$work/s.ctl:$work/s.ack,$work/c.ctl:$work/c.ack" \
    >"$work/out.json" 2> >(grep -v '^Events' >&2)
  to_row "$name/$w" "$n"
}

# counted_floor MODE ITERS: odafs-tcp-pingpong's MODE at 4 KiB, both of its processes
# counted together (perf stat follows the fork), per round trip by difference between
# ITERS/10 and ITERS round trips (its set-up is the same in both).
counted_floor() {
  local m=$1 n2=$2 n1=$(($2 / 10)) n
  for n in "$n1" "$n2"; do
    perf stat -x, -e "$events" -o "$work/cli-$n.csv" -- \
      "$bin/odafs-tcp-pingpong" --mode "$m" --bytes 4096 --iters "$n" >"$work/out.json"
  done
  python3 - "$work/cli-$n1.csv" "$work/cli-$n2.csv" $((n2 - n1)) >"$work/cli.csv" <<'PY'
import sys
sys.path.insert(0, "bench/peers")
from perf_csv import read_counts
a, b = read_counts(sys.argv[1]), read_counts(sys.argv[2])
for k, v in b.items():
    print(f"{max(0.0, v - a.get(k, 0))},,{k}")
PY
  : >"$work/srv.csv"
  to_row "floor/$m/4096" $((n2 - n1))
}

echo "== counting (client and server, per read; seq: per MiB)"
contenders="ordma_tcp ordma"
[ "$with_ganesha" = 1 ] && contenders+=" ganesha"
for name in $contenders; do
  counted_peers "$name" lat "$ops"
  counted_peers "$name" q16 "$ops"
  counted_peers "$name" seq "$seq_mib"
done
echo "== counting the floors (both processes together, per round trip)"
for m in blocking client_poll busy shm shm_doorbell; do
  counted_floor "$m" "$ops"
done

if [ "$callgrind" = 1 ] && command -v valgrind >/dev/null; then
  echo "== client instructions per read (callgrind: user space, run_lat only)"
  for mode in ordma_tcp ordma; do
    n=$((ops / 10))
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*run_lat*' \
      --callgrind-out-file="$work/cg-$mode" "$bin/odafs-peers" --target "odafs://$addr/" \
      --mode "$mode" --name "$mode" --server-pid "$srv_pid" --run lat --ops "$n" \
      >/dev/null 2>"$work/cg-$mode.log"
    callgrind_annotate --inclusive=yes --threshold=99 "$work/cg-$mode" >"$work/cg-$mode.txt"
    python3 - "$mode" "$n" "$work/cg-$mode" "$work/cg-$mode.txt" >>"$rows" <<'PY'
import json, re, sys
mode, n, raw, ann = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
total = int(re.search(r"^summary: (\d+)", open(raw).read(), re.M).group(1))
fns = {}
for line in open(ann):
    m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S+?:(.*?)\s*(\[.*\])?$", line)
    if m:
        fns[m.group(2)] = int(m.group(1).replace(",", "")) // n
print(json.dumps({"name": f"callgrind/{mode}/lat", "units": n,
                  "instructions_per_read": total // n, "inclusive_per_read": fns}))
PY
  done
fi

python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["raw_syscalls:sys_enter", "context-switches", "cpu-migrations", "cpu_us"]
print(f"{'per read (seq: per MiB)':24} {'side':4} {'syscalls':>9} {'ctx sw':>7} {'CPU us':>7}"
      "  syscalls by name")
for r in rows:
    for side in ("cli", "srv"):
        c = r.get(side)
        if not c:
            continue
        names = " ".join(f"{k}={v:g}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])
                         if k not in keys and v >= 0.01)
        print(f"{r['name']:24} {side:4} {c.get('raw_syscalls:sys_enter', 0):9.2f} "
              f"{c.get('context-switches', 0):7.2f} {c.get('cpu_us', 0):7.2f}  {names}")
for r in rows:
    if r["name"].startswith("callgrind/"):
        print(f"{r['name']}: client user-space instructions per read {r['instructions_per_read']}")
        top = sorted(r["inclusive_per_read"].items(), key=lambda kv: -kv[1])[:25]
        for k, v in top:
            print(f"    {v:8d}  {k[:110]}")
PY
echo "rows: $rows"
