#!/usr/bin/env bash
# Builds the fuzz targets with clang + libFuzzer (ASan + UBSan) and runs each for a bound:
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# New inputs that reach new coverage are added to tests/fuzz/corpus/TARGET; a crash is
# written to tests/fuzz/regressions/TARGET (minimise it, fix the bug, commit the input:
# the normal test build replays that folder). Exits non-zero if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
ODAFS_WITH_CLANG=1 bash scripts/deps.sh
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DODAFS_FUZZ=ON -DODAFS_BUILD_TESTS=OFF >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=($(sed -n 's/^set(ODAFS_FUZZ_TARGETS \(.*\))/\1/p' tests/fuzz/CMakeLists.txt))
fi
ninja -C build-fuzz $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}")
status=0
for t in "${targets[@]}"; do
  mkdir -p "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"
  echo "== fuzz $t for ${seconds}s"
  if ! ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
      "build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="tests/fuzz/regressions/$t/" "tests/fuzz/corpus/$t" 2>"build-fuzz/fuzz_$t.log"; then
    echo "fuzz $t: CRASH, see build-fuzz/fuzz_$t.log and tests/fuzz/regressions/$t/" >&2
    status=1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov: ' "build-fuzz/fuzz_$t.log" | tail -3
done
exit $status
