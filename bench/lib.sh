# Sourced by the bench/run_*.sh scripts: build, a scratch directory, and odafsd start/stop.
# REQUIRES: the caller runs from the repository root with `set -euo pipefail`.

out=${OUT:-docs/results}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-bench-XXXXXX")
pid=""
addr=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT

# build_targets TARGET...: a Release build of what the benchmark runs. NEW_BUILD=DIR names a
# build made beforehand instead (e.g. build-quick with -DODAFS_BUILD_BENCH=ON, on a machine
# where builds go through one shared lock): nothing is built, DIR's programs run.
new_build=${NEW_BUILD:-build}
build_targets() {
  [ -n "${NEW_BUILD:-}" ] && return 0
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build "$@" >/dev/null
}

# build_base REV TARGET...: a Release build of TARGETs of revision REV, made once in a git
# worktree beside the checkout ($BASE_DIR, else /tmp/odafs-base-SHORTREV) and reused (ninja
# adds targets it lacks); sets $base_dir and $base_build. For side-by-side runs of two builds.
# BASE_BUILD=DIR names a build of REV made beforehand instead (nothing is built; $base_dir is
# DIR's parent, the source tree).
build_base() {
  local rev=$1
  shift
  if [ -n "${BASE_BUILD:-}" ]; then
    base_build=$BASE_BUILD
    base_dir=$(dirname "$BASE_BUILD")
    return 0
  fi
  base_dir=${BASE_DIR:-/tmp/odafs-base-$(git rev-parse --short "$rev")}
  if [ ! -d "$base_dir/.git" ] && [ ! -f "$base_dir/.git" ]; then
    rm -rf "$base_dir"
    git worktree add --detach -f "$base_dir" "$rev" >/dev/null
  fi
  cmake -S "$base_dir" -B "$base_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DODAFS_BUILD_TESTS=OFF >/dev/null
  ninja -C "$base_dir/build" "$@" >/dev/null
  base_build=$base_dir/build
}

# protocol_version DIR: the odafs RPC program version the source tree DIR speaks.
protocol_version() {
  awk '/^program ODAFS_PROGRAM/ {p = 1} p && /^  } = [0-9]+;/ {sub(/;.*/, ""); print $3; exit}' \
    "$1/proto/odafs_prot.x"
}

# require_same_protocol: for scripts that drive BASE's odafsd with this checkout's client
# programs; stops with a clear message when the two builds speak different protocol
# versions (the server would answer PROG_MISMATCH). REQUIRES: build_base ran.
require_same_protocol() {
  local ours theirs
  ours=$(protocol_version .)
  theirs=$(protocol_version "$base_dir")
  if [ "$ours" != "$theirs" ]; then
    echo "$(basename "$0"): the base speaks odafs protocol version $theirs, this checkout $ours:" \
      "this checkout's clients cannot drive its odafsd. Compare with a base of version $ours," \
      "or with bench/compare_builds.sh / bench/postmark/compare_builds.sh (each build's own" \
      "client)." >&2
    exit 2
  fi
}

# interleave ROUNDS: runs the caller's `run_one LABEL BUILD_DIR ROUND` for the base build
# (build_base) and this checkout's ROUNDS times each, alternating which goes first, so that
# the machine's drift over minutes hits both alike.
interleave() {
  local r
  for r in $(seq "$1"); do
    if [ $((r % 2)) -eq 1 ]; then
      run_one base "$base_build" "$r"; run_one new "$new_build" "$r"
    else
      run_one new "$new_build" "$r"; run_one base "$base_build" "$r"
    fi
  done
}

# compare_builds KIND RESULT_FILE TARGET...: the whole of a two-build comparison: builds
# TARGETs here and at $base (build_base), runs the caller's run_one for both, $rounds times
# each (interleave), and reports KIND's rows (bench/compare_report.py) into $out/RESULT_FILE.
# REQUIRES: $base and $rounds set; run_one writes $work/LABEL-ROUND.json.
compare_builds() {
  local kind=$1 result=$2
  shift 2
  build_targets "$@"
  build_base "$base" "$@"
  interleave "$rounds"
  python3 bench/compare_report.py "$kind" "$work" "$rounds" "$out/$result" "$base"
}

# start_odafsd NAME [LAUNCHER...] -- [ODAFSD FLAGS...]: starts odafsd ($ODAFSD_BIN, else
# build/odafsd) on the export $work/export-NAME (made if need be; files put there first are
# served), LAUNCHER e.g. `taskset -c 1`; waits for its ready line, sets $pid, $addr.
start_odafsd() {
  local name=$1
  shift
  local launcher=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    launcher+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  mkdir -p "$work/export-$name"
  local bin=${ODAFSD_BIN:-build/odafsd} state=()
  # The recovery record stays in $work (builds from before it have no --state-dir).
  if "$bin" --help 2>&1 | grep -q -- --state-dir; then state=(--state-dir "$work/state-$name"); fi
  ODAFS_LOG=warn "${launcher[@]}" "$bin" --export "$work/export-$name" \
    --listen 127.0.0.1:0 "${state[@]}" "$@" >"$work/ready-$name" &
  pid=$!
  for _ in $(seq 100); do grep -q ready "$work/ready-$name" 2>/dev/null && break; sleep 0.1; done
  addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready-$name")
  [ -n "$addr" ] || { echo "odafsd did not start" >&2; return 1; }
}

stop_odafsd() {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}
