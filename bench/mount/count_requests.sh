#!/usr/bin/env bash
# The FUSE requests the kernel sends odafs-mount over one run of the unmodified `postmark`
# program, by opcode, and per transaction: the per-transaction profile of the mount (what
# no cache in the daemon can take away is a request the kernel still sends). odafs-mount
# runs with -d (libfuse's request log; slower, so the times are not the benchmark's) over
# an odafsd exporting a tmpfs directory. BUILD=DIR uses DIR's odafsd and odafs-mount (e.g.
# a base build, for a before/after). Needs root (FUSE) and postmark.
#   TMPDIR=/dev/shm bash bench/mount/count_requests.sh [FILES] [TRANSACTIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-500}
txns=${2:-2000}
command -v postmark >/dev/null || { echo "needs postmark (apt install postmark)" >&2; exit 1; }
build=${BUILD:-build}
if [ "$build" = build ]; then source bench/lib.sh; build_targets odafsd odafs-mount; fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/odafs-count-XXXXXX")
server=""
cleanup() {
  fusermount3 -u -z "$dir/mnt" 2>/dev/null || true
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/export" "$dir/mnt"
ODAFS_LOG=warn "$build/odafsd" --export "$dir/export" --listen 127.0.0.1:0 \
  --state-dir "$dir/state" --threads 2 --cache-mb 256 >"$dir/ready" &
server=$!
for _ in $(seq 100); do grep -q ready "$dir/ready" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -E 's/.*rpc=([^ ]+).*/\1/' "$dir/ready")
"$build/odafs-mount" -d "odafs://$addr/" "$dir/mnt" >"$dir/requests.log" 2>&1 &
for _ in $(seq 100); do grep -q " $dir/mnt " /proc/self/mountinfo && break; sleep 0.1; done
printf 'set location %s\nset number %s\nset transactions %s\nset size 500 10000\nrun\nquit\n' \
  "$dir/mnt" "$files" "$txns" | postmark >/dev/null
fusermount3 -u "$dir/mnt"
sleep 0.5  # the daemon's last lines
echo "FUSE requests over postmark ($files files, $txns transactions; $build):"
grep -o 'opcode: [A-Z_]*' "$dir/requests.log" | awk '{print $2}' | sort | uniq -c | sort -rn |
  awk -v t="$txns" '{printf "  %-14s %7d  %5.2f per transaction\n", $2, $1, $1 / t; s += $1}
                    END {printf "  %-14s %7d  %5.2f per transaction\n", "all", s, s / t}'
