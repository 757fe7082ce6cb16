#!/usr/bin/env bash
# Streaming one large file, in one run on one tmpfs: a local `cp` of the file (the
# yardstick), `odafs put`, `odafs get`, `cp` into odafs-mount and `cat` out of it. odafsd
# serves an export on the same tmpfs as the local copy ($TMPDIR, default /dev/shm).
# Rounds are interleaved (the order of the five cases rotates each round) so that the
# machine's drift hits every case alike; each case runs on a fresh file name, and each
# mount case on a fresh odafs-mount (so that neither the kernel's page cache nor the
# client's block cache holds the file: the cat reads from odafsd). Prints the median and
# spread (min–max) of MiB/s and each case's median ratio to the local cp, and the CPU time
# each case costs, in ms: the client's (the command's user + system time, plus
# odafs-mount's for the mount cases) and odafsd's (on a loaded machine wall time follows
# the CPU spent more than anything), and writes
# $OUT/stream.json (default docs/results/stream.json) and stream.svg beside it.
#   TMPDIR=/dev/shm bash bench/stream/run.sh [SIZE_MIB] [ROUNDS]      (defaults 256, 5)
# BUILD=build-quick uses the helpers' build (default build/, built here in Release).
# BASE_BUILD=DIR adds the four odafs cases again with DIR's odafs and odafs-mount (named
# base_put, ...), interleaved with the rest: a before/after in one run (same odafsd).
# Needs FUSE (root, fusermount3) for the mount cases; without it they are skipped, said so.
set -euo pipefail
cd "$(dirname "$0")/../.."
export TMPDIR=${TMPDIR:-/dev/shm}
size_mib=${1:-256}
rounds=${2:-5}
source bench/lib.sh  # $out, $work (removed at exit), start_odafsd / stop_odafsd
build=${BUILD:-build}
if [ "$build" = build ]; then build_targets odafsd odafs odafs-mount; fi
new_odafs=$(realpath "$build/odafs")
new_mount=$(realpath "$build/odafs-mount")
mnt=""
trap '[ -n "$mnt" ] && fusermount3 -u "$mnt" 2>/dev/null; [ -n "$pid" ] && kill $pid 2>/dev/null;
  rm -rf "$work"' EXIT

cases="local_cp put get cp_in cat_out"
if ! command -v fusermount3 >/dev/null || [ ! -e /dev/fuse ]; then
  echo "no FUSE here (fusermount3, /dev/fuse): cp_in and cat_out skipped" >&2
  cases="local_cp put get"
fi
if [ -n "${BASE_BUILD:-}" ]; then
  for c in $cases; do [ "$c" = local_cp ] || cases="$cases base_$c"; done
fi

ODAFSD_BIN=$build/odafsd start_odafsd stream -- --cache-mb 64
export_dir=$work/export-stream
local_dir=$work/local
mkdir -p "$local_dir"
src=$local_dir/source
head -c "$((size_mib << 20))" /dev/urandom >"$src"
# The file the mount's cat reads, and get's source: put there through the export
# directly (odafsd serves what is in its export).
cp "$src" "$export_dir/served"
rows=$work/rows.jsonl
: >"$rows"

now() { date +%s.%N; }
# cpu_ms PID: the process's user + system CPU time so far, in ms.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / hz}' "/proc/$1/stat"; }
# timed CMD...: runs CMD, its user + system time (ms) to $work/time.
timed() { /usr/bin/time -o "$work/time" -f "%U %S" "$@"; }
client_ms() { awk '{print ($1 + $2) * 1000}' "$work/time"; }

mount_fresh() {
  mnt=$work/mnt
  mkdir -p "$mnt"
  "$mount_bin" "odafs://$addr/" "$mnt"
  mount_pid=$(pgrep -nf "^$mount_bin odafs://$addr/ $mnt\$")
}
unmount() {
  fusermount3 -u "$mnt"
  mnt=""
}

# run_case CASE ROUND: runs one transfer of the file, timed around the transfer alone,
# each cleaned up after; appends a row.
run_case() {
  local label=$1 c=${1#base_} r=$2 t0 t1 s0 s1 m0=0 m1=0
  odafs_bin=$new_odafs mount_bin=$new_mount
  if [ "$label" != "$c" ]; then
    odafs_bin=$(realpath "$BASE_BUILD/odafs") mount_bin=$(realpath "$BASE_BUILD/odafs-mount")
  fi
  s0=$(cpu_ms "$pid")
  case $c in
    local_cp)
      t0=$(now); timed cp "$src" "$local_dir/copy"; t1=$(now)
      rm -f "$local_dir/copy" ;;
    put)
      t0=$(now); timed "$odafs_bin" put "$src" "odafs://$addr/put-$r"; t1=$(now)
      cmp -s "$src" "$export_dir/put-$r" || { echo "put: the copy differs" >&2; exit 1; }
      rm -f "$export_dir/put-$r" ;;
    get)
      t0=$(now); timed "$odafs_bin" get "odafs://$addr/served" "$local_dir/got"; t1=$(now)
      cmp -s "$src" "$local_dir/got" || { echo "get: the copy differs" >&2; exit 1; }
      rm -f "$local_dir/got" ;;
    cp_in)
      mount_fresh
      # cp's close waits for the bytes to be at the server (close-to-open).
      m0=$(cpu_ms "$mount_pid")
      t0=$(now); timed cp "$src" "$mnt/cp-$r"; t1=$(now)
      m1=$(cpu_ms "$mount_pid")
      unmount
      cmp -s "$src" "$export_dir/cp-$r" || { echo "cp_in: the copy differs" >&2; exit 1; }
      rm -f "$export_dir/cp-$r" ;;
    cat_out)
      mount_fresh
      m0=$(cpu_ms "$mount_pid")
      t0=$(now); timed cat "$mnt/served" >"$local_dir/cat"; t1=$(now)
      m1=$(cpu_ms "$mount_pid")
      unmount
      cmp -s "$src" "$local_dir/cat" || { echo "cat_out: the copy differs" >&2; exit 1; }
      rm -f "$local_dir/cat" ;;
  esac
  s1=$(cpu_ms "$pid")
  python3 -c "import json; s = $t1 - $t0; print(json.dumps({'case': '$label', 'round': $r, \
'seconds': s, 'mib_per_s': $size_mib / s, 'client_cpu_ms': $(client_ms) + $m1 - $m0, \
'server_cpu_ms': 0 if '$c' == 'local_cp' else $s1 - $s0}))" >>"$rows"
  echo "  round $r $label: $(tail -1 "$rows" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["mib_per_s"]))') MiB/s" >&2
}

read -r -a order <<<"$cases"
for r in $(seq "$rounds"); do
  n=${#order[@]}
  for i in $(seq 0 $((n - 1))); do run_case "${order[$(((i + r - 1) % n))]}" "$r"; done
done

python3 bench/stream/report.py "$rows" "$out/stream.json" "$size_mib" "$rounds" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs/results' || echo +dirty)" "${BASE_BUILD:-}"
python3 bench/plot.py "$out/stream.json" "$out/stream.svg" --key rows --x round \
  --y mib_per_s --series case --title "Streaming ${size_mib} MiB on tmpfs, per round" \
  --ylabel "MiB/s" >/dev/null || echo "(no plot)" >&2
