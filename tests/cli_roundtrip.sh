#!/usr/bin/env bash
# ctest: the odafs command-line tool against a real odafsd. A 10 MiB random file goes up
# with `put` and comes back with `get` byte-identical; ls/stat/mkdir/mv/rm/rmdir/cat/stats
# work and fail as they should.  Usage: cli_roundtrip.sh ODAFSD ODAFS
set -euo pipefail
odafsd=$1
odafs=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/odafs-cli-XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir "$work/export"
ODAFS_LOG=warn "$odafsd" --export "$work/export" --listen 127.0.0.1:0 --state-dir "$work/state" >"$work/ready" &
pid=$!
for _ in $(seq 150); do grep -q ready "$work/ready" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready")
[ -n "$addr" ] || fail "odafsd did not start"
url="odafs://$addr"

head -c $((10 * 1024 * 1024)) /dev/urandom >"$work/in.bin"
"$odafs" put "$work/in.bin" "$url/in.bin"
"$odafs" get "$url/in.bin" "$work/out.bin"
cmp "$work/in.bin" "$work/out.bin" || fail "get differs from put"
cmp "$work/in.bin" "$work/export/in.bin" || fail "backing file differs"

"$odafs" mkdir "$url/d"
echo "hello odafs" >"$work/small"
"$odafs" put "$work/small" "$url/d/small"
[ "$("$odafs" cat "$url/d/small")" = "hello odafs" ] || fail "cat"
"$odafs" mv "$url/d/small" "$url/d/renamed"
[ "$("$odafs" ls "$url/d")" = "renamed" ] || fail "ls after mv"
"$odafs" stat "$url/d/renamed" | grep -q "^size: 12$" || fail "stat size"
"$odafs" ls "$url/" | grep -qx "d/" || fail "ls root"
"$odafs" rmdir "$url/d" 2>"$work/err" && fail "rmdir of a non-empty directory succeeded"
grep -q "not empty" "$work/err" || fail "rmdir error text: $(cat "$work/err")"
"$odafs" rm "$url/d/renamed"
"$odafs" rmdir "$url/d"
"$odafs" cat "$url/missing" 2>/dev/null && fail "cat of a missing file succeeded"
"$odafs" stats "$url/" | grep -q "^calls.WRITE" || fail "stats"
"$odafs" df "$url/" | grep -q "^total_bytes:" || fail "df"
"$odafs" ls "http://$addr/" 2>/dev/null && fail "a non-odafs URL was accepted"
echo "1 passed, 0 failed"
