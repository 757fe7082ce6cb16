#!/usr/bin/env bash
# Reproduces docs/benchmarks.md, "Berkeley DB performing asynchronous I/O (the paper's
# Fig. 5)". odafsd (core 0, 64 KiB blocks, a cache holding the database) exports a tmpfs
# directory; the loader puts RECORDS records of 60 KiB there through BDB's I/O hooks; then
# odafs-bdb (core 1) runs the joins covering every record for each copy size and read
# mechanism, interleaved, REPS times: inline, preposted, direct, ordma_ring, ordma_tcp
# through the hooks, and BDB's own I/O on an odafs-mount (core 1 too; ORDMA, no data
# cache: BDB caches pages itself) when FUSE is there.
# Writes docs/results/bdb-fig5.{json,svg,png} and bdb-fig5-cpu.{svg,png} (or to $OUT).
#   bash bench/bdb/run.sh [REPS] [RECORDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/deps.sh gnuplot-nox  # gnuplot draws the PNGs
source bench/lib.sh
reps=${1:-3}
records=${2:-2048}
targets=(odafsd odafs-bdb)
with_mount=0
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
  with_mount=1
  targets+=(odafs-mount)
else
  echo "no /dev/fuse or fusermount3: the mount line is left out" >&2
fi
build_targets "${targets[@]}"

shm=$(mktemp -d /dev/shm/odafs-bdb-XXXXXX)
mnt="$work/mnt"
mount_pid=""
cleanup() {
  [ -n "$mount_pid" ] && { fusermount3 -u -z "$mnt" 2>/dev/null || true; kill "$mount_pid" 2>/dev/null || true; }
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$shm" "$work"
}
trap cleanup EXIT

ODAFS_LOG=warn taskset -c 0 build/odafsd --export "$shm" --listen 127.0.0.1:0 --state-dir "$work/state" --threads 2 \
  --block-size 65536 --cache-mb 512 >"$work/ready" &
pid=$!
for _ in $(seq 100); do grep -q ready "$work/ready" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -E 's/.*rpc=([^ ]+).*/\1/' "$work/ready")
[ -n "$addr" ] || { echo "odafsd did not start" >&2; exit 1; }

mechanisms=inline,preposted,direct,ordma_ring,ordma_tcp
mount_args=()
if [ "$with_mount" = 1 ]; then
  mkdir -p "$mnt"
  taskset -c 1 build/odafs-mount -f -o read_mode=ordma,cache_blocks=0 "odafs://$addr/" "$mnt" 2>"$work/mount.log" &
  mount_pid=$!
  for _ in $(seq 100); do grep -q " $mnt " /proc/mounts && break; sleep 0.1; done
  grep -q " $mnt " /proc/mounts || { echo "odafs-mount did not mount" >&2; cat "$work/mount.log" >&2; exit 1; }
  mechanisms+=,mount
  mount_args=(--mount-dir "$mnt" --mount-pid "$mount_pid")
fi

taskset -c 1 build/odafs-bdb --url "odafs://$addr/" --load "$records" --reps "$reps" \
  --mechanisms "$mechanisms" "${mount_args[@]}" --json "$out/bdb-fig5.json"
python3 bench/plot.py "$out/bdb-fig5.json" "$out/bdb-fig5.svg" --png "$out/bdb-fig5.png" \
  --x copy_bytes --y mb_per_s_median --series mechanism --logx \
  --title "Berkeley DB join: application throughput (MB/s) against bytes copied per 60 KiB record"
python3 bench/plot.py "$out/bdb-fig5.json" "$out/bdb-fig5-cpu.svg" --png "$out/bdb-fig5-cpu.png" \
  --x copy_bytes --y client_us_per_record --series mechanism --logx \
  --title "Berkeley DB join: client CPU (us) per record against bytes copied"
echo "plots: $out/bdb-fig5.svg $out/bdb-fig5-cpu.svg"
