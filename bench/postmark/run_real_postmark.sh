#!/usr/bin/env bash
# The Debian `postmark` program (unmodified) over odafs-mount, beside the same run on a
# local tmpfs and on a FUSE passthrough over tmpfs (libfuse3's example passthrough_ll,
# built from the libfuse3-dev package's examples), so the table shows what FUSE itself
# costs and what odafs adds. odafsd exports a tmpfs directory; odafs-mount runs with
# one-sided reads (ordma) and with RPC only (preposted). PostMark's own timer has a 1 s
# resolution, so each run is timed from outside; contenders are interleaved over ROUNDS
# rounds and the median reported with min..max. Needs root (FUSE), postmark and fuse3.
# Writes docs/results/postmark-real.json (or to $OUT).
#   bash bench/postmark/run_real_postmark.sh [ROUNDS] [FILES] [TRANSACTIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-3}
files=${2:-2000}
txns=${3:-20000}
command -v postmark >/dev/null || { echo "needs postmark (apt install postmark)" >&2; exit 1; }
build_targets odafsd odafs-mount

examples=/usr/share/doc/libfuse3-dev/examples
cc -O2 -Wall -o "$work/passthrough_ll" "$examples/passthrough_ll.c" \
  $(pkg-config fuse3 --cflags --libs)

shm=$(mktemp -d /dev/shm/odafs-pm-XXXXXX)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do fusermount3 -u -z "$m" 2>/dev/null || true; done
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$shm" "$work"
}
trap cleanup EXIT

# The contenders: name -> directory postmark runs in.
mkdir -p "$shm/tmpfs" "$shm/pt-src" "$shm/export" "$work/pt" "$work/ordma" "$work/rpc"
"$work/passthrough_ll" -o source="$shm/pt-src" "$work/pt"
mounts+=("$work/pt")
ODAFS_LOG=warn build/odafsd --export "$shm/export" --listen 127.0.0.1:0 --state-dir "$work/state" --threads 2 \
  --cache-mb 256 >"$work/ready" &
pid=$!
for _ in $(seq 100); do grep -q ready "$work/ready" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -E 's/.*rpc=([^ ]+).*/\1/' "$work/ready")
mkdir -p "$shm/export/ordma" "$shm/export/rpc"
build/odafs-mount -o read_mode=ordma "odafs://$addr/ordma" "$work/ordma"
mounts+=("$work/ordma")
build/odafs-mount -o read_mode=preposted "odafs://$addr/rpc" "$work/rpc"
mounts+=("$work/rpc")
declare -A dir=([tmpfs]="$shm/tmpfs" [fuse_passthrough]="$work/pt" [odafs_ordma]="$work/ordma"
                [odafs_rpc]="$work/rpc")
names=(tmpfs fuse_passthrough odafs_ordma odafs_rpc)

declare -A times
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < ${#names[@]}; k++)); do
    name=${names[$(((k + r) % ${#names[@]}))]}
    t0=$(date +%s.%N)
    printf 'set location %s\nset number %s\nset transactions %s\nset size 500 10000\nrun\nquit\n' \
      "${dir[$name]}" "$files" "$txns" | postmark >"$work/pm-$name-$r.log"
    t1=$(date +%s.%N)
    secs=$(echo "$t1 - $t0" | bc -l)
    times[$name]="${times[$name]:-} $secs"
    printf 'round %d %-17s %7.2f s\n' $((r + 1)) "$name" "$secs" >&2
  done
done

python3 - "$out/postmark-real.json" "$files" "$txns" "${names[@]}" <<PY
import json, statistics, sys
path, files, txns, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
times = {$(for n in "${names[@]}"; do printf '"%s": [%s], ' "$n" "$(echo ${times[$n]} | tr ' ' ',')"; done)}
base = statistics.median(times["fuse_passthrough"])
rows = []
print(f"{'contender':18} {'median s':>9} {'min..max':>15} {'txn/s':>8} {'/ passthrough':>14}")
for n in names:
    t = times[n]
    m = statistics.median(t)
    rows.append({"contender": n, "files": files, "transactions": txns, "seconds": t,
                 "median_s": m, "txn_per_s": txns / m, "vs_passthrough": m / base})
    print(f"{n:18} {m:9.2f} {min(t):7.2f}..{max(t):<7.2f} {txns / m:8.0f} {m / base:14.2f}")
json.dump(rows, open(path, "w"), indent=1)
print("JSON written to", path)
PY
