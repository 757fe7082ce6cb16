#!/usr/bin/env bash
# The Debian `postmark` program (unmodified) through odafs-mount for two builds in one run:
# the checkout's odafsd and odafs-mount against BASE's (built once in a worktree, as
# bench/compare_builds.sh does), interleaved (A B, then B A, ...), odafsd on core 0 with
# --threads 2 --cache-mb 256 exporting a directory under $TMPDIR (/dev/shm unless set: ext4
# runs slow down run after run), the mount and postmark on core 1. Each run is timed from
# outside (PostMark's own timer has a 1 s resolution). Prints medians and spreads of
# transactions/s and writes $OUT/postmark-mount-compare.json. Needs root (FUSE), postmark.
#   bash bench/mount/compare_postmark.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
export TMPDIR=${TMPDIR:-/dev/shm}
source bench/lib.sh
base=${1:?usage: bench/mount/compare_postmark.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]}
rounds=${2:-3}
files=${3:-1000}
txns=${4:-10000}
command -v postmark >/dev/null || { echo "needs postmark (apt install postmark)" >&2; exit 1; }

run_one() {  # label build_dir round
  local label=$1 dir=$2 round=$3 mnt="$work/mnt-$1-$3"
  ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$round" taskset -c 0 -- --threads 2 \
    --cache-mb 256
  mkdir -p "$mnt"
  taskset -c 1 "$dir/odafs-mount" "odafs://$addr/" "$mnt"
  local t0 t1
  t0=$(date +%s.%N)
  printf 'set location %s\nset number %s\nset transactions %s\nset size 500 10000\nrun\nquit\n' \
    "$mnt" "$files" "$txns" | taskset -c 1 postmark >"$work/pm-$label-$round.log"
  t1=$(date +%s.%N)
  fusermount3 -u "$mnt"
  stop_odafsd
  python3 -c "import json,sys; json.dump({'seconds': $t1 - $t0, 'tps': $txns / ($t1 - $t0)}, \
open('$work/$label-$round.json', 'w'))"
  echo "  $label round $round: $(python3 -c "print(round($t1 - $t0, 2))") s" >&2
}

compare_builds mount postmark-mount-compare.json odafsd odafs-mount
