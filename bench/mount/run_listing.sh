#!/usr/bin/env bash
# Listing a large directory through odafs-mount: `ls -l` (a stat of every entry as it is
# read), `ls` (names only) and `find -printf %s` (a stat of every entry), with the listing
# carrying attributes (READDIR with plus, the kernel's adaptive readdirplus; the default)
# and without (-o noreaddirplus: one LOOKUP per entry stat'ed). Both mounts are of one
# odafsd; contenders interleaved over ROUNDS rounds, each run after the kernel's cached
# entries and attributes expired; median and min..max. Needs root (FUSE).
# Writes docs/results/mount-listing.json (or to $OUT).
#   bash bench/mount/run_listing.sh [ROUNDS] [ENTRIES]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-5}
entries=${2:-10000}
build_targets odafsd odafs-mount

mounts=()
cleanup() {
  for m in "${mounts[@]}"; do fusermount3 -u -z "$m" 2>/dev/null || true; done
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/export-listing/d"
(cd "$work/export-listing/d" && seq 1 "$entries" | xargs touch)
start_odafsd listing -- --threads 2
declare -A opts=([plus]="" [noplus]="-o noreaddirplus")
for name in plus noplus; do
  mkdir -p "$work/$name"
  # shellcheck disable=SC2086
  build/odafs-mount ${opts[$name]} "odafs://$addr/" "$work/$name"
  mounts+=("$work/$name")
done
declare -A cmds=([ls_l]="ls -l" [ls]="ls" [find_stat]="find . -printf %s\n")
declare -A times
for ((r = 0; r < rounds; r++)); do
  for cmd in ls_l ls find_stat; do
    for name in plus noplus; do
      [ $((r % 2)) -eq 1 ] && name=$([ "$name" = plus ] && echo noplus || echo plus)
      sleep 1.1  # attr_timeout / entry_timeout: the kernel asks again
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086
      (cd "$work/$name/d" && ${cmds[$cmd]} >/dev/null)
      t1=$(date +%s.%N)
      secs=$(echo "$t1 - $t0" | bc -l)
      times[$cmd.$name]="${times[$cmd.$name]:-} $secs"
      printf 'round %d %-10s %-7s %7.3f s\n' $((r + 1)) "$cmd" "$name" "$secs" >&2
    done
  done
done

python3 - "$out/mount-listing.json" "$entries" <<PY
import json, statistics, sys
path, entries = sys.argv[1], int(sys.argv[2])
times = {$(for k in "${!times[@]}"; do printf '"%s": [%s], ' "$k" "$(echo ${times[$k]} | tr ' ' ',')"; done)}
rows = []
print(f"{'command':10} {'listing':8} {'median s':>9} {'min..max':>15} {'us/entry':>9}")
for cmd in ("ls_l", "ls", "find_stat"):
    for name in ("plus", "noplus"):
        t = times[f"{cmd}.{name}"]
        m = statistics.median(t)
        rows.append({"command": cmd, "listing": name, "entries": entries, "seconds": t,
                     "median_s": m, "us_per_entry": m / entries * 1e6})
        print(f"{cmd:10} {name:8} {m:9.3f} {min(t):7.3f}..{max(t):<7.3f} {m / entries * 1e6:9.1f}")
json.dump(rows, open(path, "w"), indent=1)
print("JSON written to", path)
PY
