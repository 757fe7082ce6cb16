#!/usr/bin/env bash
# The long soak: 64 client processes (one-sided over the local ring, one-sided over TCP
# with direct writes, RPC only) run a mixed workload against one odafsd for 10 minutes,
# checking every byte they read, while the server's RSS, descriptors, threads and CPU are
# sampled. Prints a table and a JSON record (also written to docs/results/soak-*.json).
#   scripts/soak.sh [SECONDS] [CLIENTS] [RESTART_EVERY] [CUT_EVERY]
# RESTART_EVERY (seconds) restarts the server that often, SIGKILL and SIGTERM in turn:
# clients reconnect and reclaim what they kept under write delegations. CUT_EVERY (seconds)
# sends the clients' RPC connections through a TCP relay that resets them all that often,
# the server staying up. 0 turns either off.
# ctest runs a 60 s version (soak_short). Exits non-zero on any checksum error, unexpected
# error, dead client or server, RSS over its bound, or descriptor left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
clients=${2:-64}
restart_every=${3:-0}
cut_every=${4:-0}
restart=()
suffix=""
if [ "$restart_every" -gt 0 ]; then
  restart=(--restart-every "$restart_every")
  suffix="-restart${restart_every}s"
fi
if [ "$cut_every" -gt 0 ]; then
  restart+=(--cut-every "$cut_every")
  suffix="${suffix}-cut${cut_every}s"
fi
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release >/dev/null
mkdir -p docs/results
ODAFS_LOG=warn build/tests/odafs_soak --clients "$clients" --seconds "$seconds" "${restart[@]}" \
  --json "docs/results/soak-${clients}x${seconds}s${suffix}.json"
