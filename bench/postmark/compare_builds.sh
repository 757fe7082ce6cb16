#!/usr/bin/env bash
# Standard PostMark on the library for two builds in one run: the checkout's odafsd and
# odafs-postmark against BASE's (any git revision, built once in a worktree beside the
# checkout, as bench/compare_builds.sh does), interleaved (A B, then B A, ...), odafsd on
# core 0 with --threads 2 --block-size 4096 --cache-mb 256, the client on core 1, both read
# modes (ordma, rpc_preposted). Prints medians and spreads (min..max) of transactions/s and
# server CPU per transaction, and writes $OUT/postmark-compare.json.
#   bash bench/postmark/compare_builds.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]
# FIG6=1 runs the paper's Fig. 6 configuration instead (read-only transactions on 4,000
# files of 1-7 KiB, as bench/postmark/run_postmark.sh; FILES and TRANSACTIONS still apply)
# at client cache shares of 25 and 75 %, and writes $OUT/postmark-fig6-compare.json.
# The exports live under $TMPDIR, /dev/shm unless set: on ext4 the runs slowed down run after
# run (its inode allocator), hiding what the builds differ in.
set -euo pipefail
cd "$(dirname "$0")/../.."
export TMPDIR=${TMPDIR:-/dev/shm}
source bench/lib.sh
base=${1:?usage: bench/postmark/compare_builds.sh BASE [ROUNDS] [FILES] [TRANSACTIONS]}
rounds=${2:-3}
fig6=${FIG6:-0}
files=${3:-$([ "$fig6" = 1 ] && echo 4000 || echo 1000)}
txns=${4:-$([ "$fig6" = 1 ] && echo 5000 || echo 2500)}
workload=()
result=postmark-compare.json
if [ "$fig6" = 1 ]; then
  workload=(--warmup "$txns" --size-low 1024 --size-high 7168 --read-block 4096
    --write-block 4096 --bias-read 10 --bias-create -1 --cache-fractions 0.25,0.75)
  result=postmark-fig6-compare.json
fi
run_one() {  # label build_dir round
  local label=$1 dir=$2 round=$3
  ODAFSD_BIN="$dir/odafsd" start_odafsd "$label-$round" taskset -c 0 -- --threads 2 \
    --block-size 4096 --cache-mb 256
  taskset -c 1 "$dir/odafs-postmark" --url "odafs://$addr/" --files "$files" \
    --transactions "$txns" --read-modes ordma,rpc_preposted --repeat 1 "${workload[@]}" \
    --json "$work/$label-$round.json" >/dev/null
  stop_odafsd
  echo "  $label round $round done" >&2
}

compare_builds postmark "$result" odafsd odafs-postmark
