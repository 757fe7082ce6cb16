#!/usr/bin/env bash
# The long soak: 64 client processes (one-sided over the local ring, one-sided over TCP
# with direct writes, RPC only) run a mixed workload against one odafsd for 10 minutes,
# checking every byte they read, while the server's RSS, descriptors, threads and CPU are
# sampled. Prints a table and a JSON record (also written to docs/results/soak-*.json).
#   scripts/soak.sh [SECONDS] [CLIENTS]
# ctest runs a 60 s version (soak_short). Exits non-zero on any checksum error, unexpected
# error, dead client or server, RSS over its bound, or descriptor left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
clients=${2:-64}
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release >/dev/null
mkdir -p docs/results
ODAFS_LOG=warn build/tests/odafs_soak --clients "$clients" --seconds "$seconds" \
  --json "docs/results/soak-${clients}x${seconds}s.json"
