#!/usr/bin/env bash
# ctest: the odafs command-line tool against a real odafsd. A 10 MiB random file goes up
# with `put` and comes back with `get` byte-identical; ls/stat/mkdir/mv/rm/rmdir/cat/stats
# work and fail as they should; then the same round trip over TLS (--tls-ca), and a clear
# client refused by a tls rule.  Usage: cli_roundtrip.sh ODAFSD ODAFS
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
# Captured first: grep -q stops reading at its match, and odafs's next write would then
# die of SIGPIPE (pipefail).
stats=$("$odafs" stats "$url/") || fail "stats"
grep -q "^calls.WRITE " <<<"$stats" || fail "stats: $stats"
grep -Eq "^io.bytes_written +[0-9.]+ (KiB|MiB) \([0-9]+\)$" <<<"$stats" || fail "stats units"
"$odafs" df "$url/" | grep -q "^total_bytes:" || fail "df"
"$odafs" ls "http://$addr/" 2>/dev/null && fail "a non-odafs URL was accepted"
"$odafs" --tls ls "$url/" 2>"$work/err" && fail "TLS to a server without it worked"
grep -q "offers no TLS" "$work/err" || fail "no-TLS message: $(cat "$work/err")"

# Over TLS: a second odafsd whose rule admits TLS clients only.
kill "$pid" && wait "$pid" 2>/dev/null || true
bash "$(dirname "$0")/../scripts/make-test-ca.sh" "$work/ca" >/dev/null
ODAFS_LOG=warn "$odafsd" --export "$work/export" --listen 127.0.0.1:0 --state-dir "$work/state" \
  --tls-cert "$work/ca/server.pem" --tls-key "$work/ca/server.key" \
  --clients '127.0.0.1(tls,no_root_squash)' >"$work/ready-tls" &
pid=$!
for _ in $(seq 150); do grep -q ready "$work/ready-tls" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*rpc=\([^ ]*\).*/\1/p' "$work/ready-tls")
[ -n "$addr" ] || fail "odafsd with TLS did not start"
url="odafs://$addr"
"$odafs" --tls-ca "$work/ca/ca.pem" put "$work/in.bin" "$url/tls.bin"
"$odafs" --tls-ca "$work/ca/ca.pem" get "$url/tls.bin" "$work/tls-out.bin"
cmp "$work/in.bin" "$work/tls-out.bin" || fail "get over TLS differs from put"
"$odafs" get "$url/tls.bin?tls=1&tls_ca=$work/ca/ca.pem" "$work/tls-url.bin"
cmp "$work/in.bin" "$work/tls-url.bin" || fail "get with ?tls=1 differs"
"$odafs" ls "$url/" 2>"$work/err" && fail "a clear client passed a tls rule"
grep -q "AUTH_TOOWEAK" "$work/err" || fail "tls rule message: $(cat "$work/err")"
echo "1 passed, 0 failed"
