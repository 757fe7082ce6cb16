# Sourced by the bench/run_*.sh scripts: build, a scratch directory, and odafsd start/stop.
# REQUIRES: the caller runs from the repository root with `set -euo pipefail`.

out=${OUT:-docs/results}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-bench-XXXXXX")
pid=""
addr=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT

# build_targets TARGET...: a Release build of what the benchmark runs.
build_targets() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build "$@" >/dev/null
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
  ODAFS_LOG=warn "${launcher[@]}" "${ODAFSD_BIN:-build/odafsd}" --export "$work/export-$name" \
    --listen 127.0.0.1:0 "$@" >"$work/ready-$name" &
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
