#!/usr/bin/env bash
# Runs each fuzz target (clang + libFuzzer, ASan + UBSan) for a bound:
#   scripts/fuzz.sh [--build DIR] [--grow] [SECONDS_PER_TARGET] [TARGET...]
#
# --build DIR  use the fuzz targets of an existing ODAFS_FUZZ build (the full test run's
#              build-check/); without it, build-fuzz/ is configured and built here.
# --grow       add the new inputs that reach new coverage to the checked-in corpus
#              (tests/fuzz/corpus/TARGET): a deliberate step, committed on its own. Without
#              it they stay in DIR/fuzz-corpus/TARGET and the tree is left as it was.
# A crash is written to DIR/fuzz-crashes/TARGET/: minimise it, fix the bug, and commit the
# input to tests/fuzz/regressions/TARGET (every build replays that folder as a test).
# Exits non-zero if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=""
grow=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --grow) grow=1; shift ;;
    *) break ;;
  esac
done
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=($(sed -n 's/^set(ODAFS_FUZZ_TARGETS \(.*\))/\1/p' tests/fuzz/CMakeLists.txt))
fi
if [ -z "$build" ]; then
  build=build-fuzz
  ODAFS_WITH_CLANG=1 bash scripts/deps.sh
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DODAFS_FUZZ=ON -DODAFS_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$build" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}")
# One target per core at once (each is one process): the full test run's smoke takes
# half the time on two cores.
run_target() {
  local t=$1 corpora
  # libFuzzer writes new inputs to the first folder it is given and only reads the others.
  if [ "$grow" = 1 ]; then
    corpora=("tests/fuzz/corpus/$t")
  else
    corpora=("$build/fuzz-corpus/$t" "tests/fuzz/corpus/$t")
  fi
  mkdir -p "${corpora[0]}" "$build/fuzz-crashes/$t"
  if ! ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
      "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$build/fuzz-crashes/$t/" "${corpora[@]}" 2>"$build/fuzz_$t.log"; then
    echo "fuzz $t: CRASH, see $build/fuzz_$t.log and $build/fuzz-crashes/$t/" >&2
    return 1
  fi
}
status=0
jobs=$(nproc)
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    echo "== fuzz $t for ${seconds}s"
    run_target "$t" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  for t in "${batch[@]}"; do
    echo "-- $t"
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov: ' "$build/fuzz_$t.log" | tail -3
  done
done
exit $status
