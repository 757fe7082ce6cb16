#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: once in the release build and
# once under AddressSanitizer + UndefinedBehaviorSanitizer (ODAFS_SKIP_SANITIZE=1 skips it),
# then each fuzz target for a few seconds (ODAFS_SKIP_FUZZ=1 skips that). What CI runs.
#
#   bash scripts/test.sh [--quick]
#
# --quick, for everyday work: the release build (without the benchmark programs) and its
# tests, twice as many at once as there are cores, without the soak (soak_*) and without
# the sanitizer and fuzz runs.
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
  bash scripts/deps.sh ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common libcephfs-dev
fi

echo "== layers"
bash scripts/check-layers.sh

echo "== build (Release)"
if [ "$quick" = 1 ]; then
  # What the suites need, in a directory of its own (build/ stays the -O3 build benchmarks
  # use) and at -O1: compiling dominates a fresh quick run, and -O3 buys the suites
  # nothing. The benchmark programs are left for when they are asked for.
  builddir=build-quick
  bash scripts/build.sh "$builddir" -DCMAKE_BUILD_TYPE=Release -DODAFS_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG"
else
  bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DODAFS_BUILD_BENCH=ON
fi
if [ "$quick" = 1 ]; then
  # Twice as many suites as cores: they mostly wait on sockets and child processes (on 2
  # cores: 57 s at 4 at once, 97 s at 2).
  jobs=$(($(nproc) * 2))
  echo "== tests (quick: $jobs at once, no soak)"
  ctest --test-dir "$builddir" --output-on-failure --timeout 600 -j"$jobs" -E '^soak_'
  exit 0
fi
# Suites at once: twice the cores in the release build (they mostly wait on sockets and
# child processes), as many as cores under the sanitizers (each uses more CPU there).
jobs=$(($(nproc) * 2))
echo "== tests ($jobs at once)"
ctest --test-dir build --output-on-failure --timeout 600 -j"$jobs"

if [ "${ODAFS_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build (ASan + UBSan)"
  bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DODAFS_SANITIZE=ON
  echo "== tests under ASan + UBSan ($(nproc) at once)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure --timeout 900 -j"$(nproc)"
fi

if [ "${ODAFS_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz smoke (each target a few seconds; scripts/fuzz.sh runs longer)"
  bash scripts/fuzz.sh "${ODAFS_FUZZ_SECONDS:-5}"
fi
