#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. What CI runs.
#
#   bash scripts/test.sh [--quick]
#
# The full run is one build that serves every check: clang at -O1 with AddressSanitizer +
# UndefinedBehaviorSanitizer, every library instrumented for libFuzzer (build-check/). It
# builds the suites, the benchmark programs (compiled, not run) and the fuzz targets; runs
# every suite under the sanitizers, each fuzz target's checked-in corpus, then each fuzz
# target for a few seconds (ODAFS_SKIP_FUZZ=1 skips that; new inputs stay in build-check/).
# The -O3 build is the benchmarks' (bench/ scripts build it when they run).
#
# --quick, for everyday work: a gcc -O1 build without sanitizers or benchmark programs
# (build-quick/) and its suites, twice as many at once as there are cores, without the
# soak (label soak).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
bash scripts/deps.sh
# The CephFS suites' cluster and client (scripts/ceph-cluster.sh); --quick leaves them out,
# and those suites then skip, saying why, unless the packages are there already.
if [ "$quick" = 0 ]; then
  ODAFS_WITH_CLANG=1 bash scripts/deps.sh ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common \
    libcephfs-dev
fi

echo "== layers"
bash scripts/check-layers.sh

if [ "$quick" = 1 ]; then
  # What the suites need, in a directory of its own (build/ stays the -O3 build benchmarks
  # use) and at -O1: compiling dominates a fresh quick run, and -O3 buys the suites
  # nothing. The benchmark programs are left for when they are asked for.
  echo "== build (gcc -O1)"
  bash scripts/build.sh build-quick -DCMAKE_BUILD_TYPE=Release -DODAFS_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG"
  # Twice as many suites as cores: they mostly wait on sockets and child processes.
  jobs=$(($(nproc) * 2))
  echo "== tests (quick: $jobs at once, no soak)"
  ctest --test-dir build-quick --output-on-failure --timeout 600 -j"$jobs" -LE soak
  exit 0
fi

# Assertions stay on (no NDEBUG); -g1 gives the sanitizers' reports file and line.
echo "== build (clang -O1, ASan + UBSan, libFuzzer-instrumented)"
CC=clang CXX=clang++ bash scripts/build.sh build-check -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DODAFS_FUZZ=ON -DODAFS_BUILD_BENCH=ON
# Half again as many suites as cores: they mostly wait, but each costs more CPU under the
# sanitizers than in a plain build.
jobs=$(($(nproc) * 3 / 2))
echo "== tests under ASan + UBSan ($jobs at once)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-check --output-on-failure --timeout 900 -j"$jobs"

if [ "${ODAFS_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz smoke (each target a few seconds; scripts/fuzz.sh runs longer)"
  bash scripts/fuzz.sh --build build-check "${ODAFS_FUZZ_SECONDS:-5}"
fi
