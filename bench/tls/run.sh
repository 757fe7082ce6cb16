#!/usr/bin/env bash
# TLS against clear, in one run: one odafsd serving both (certificates from
# scripts/make-test-ca.sh), odafs-peers reading through a clear mount and a TLS mount
# (?tls=1), interleaved (the order alternating each round), ROUNDS rounds. Workloads: lat
# (4 KiB reads one at a time: p50 latency), q16 (16 in flight: reads/s) and pm_std
# (standard PostMark: transactions/s), for RPC reads, one-sided reads over the engine's
# TCP connection (TLS on it too for the TLS mount) and through the same-host ring. Prints each
# figure's median, spread and TLS/clear; rows go to docs/results/tls.jsonl (or $OUT).
#
#   bash bench/tls/run.sh   # ROUNDS=5 SECONDS_PER_POINT=2 MODES="rpc ordma_tcp ordma"
#
# Whether the kernel's TLS would carry the record layer: `grep tls /proc/modules` (or
# `modprobe tls`); odafsd then logs "kernel TLS yes" per connection at ODAFS_LOG=debug.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-5}
secs=${SECONDS_PER_POINT:-2}
modes=${MODES:-rpc ordma_tcp ordma}
run=${RUN:-lat,q16,pm_std}
peers_bin=$(realpath build/odafs-peers)
source bench/lib.sh  # $out, $work, start_odafsd (stopped at exit)
source bench/peers/common.sh

bash scripts/make-test-ca.sh "$work/ca" >/dev/null
make_peer_files "$peers_bin" "$work/export-peers"
start_odafsd peers -- --cache-mb 512 --tls-cert "$work/ca/server.pem" \
  --tls-key "$work/ca/server.key" || exit 1

rows=$out/tls.jsonl
: >"$rows"
for r in $(seq "$rounds"); do
  for mode in $modes; do
    if [ $((r % 2)) = 1 ]; then order="clear tls"; else order="tls clear"; fi
    for which in $order; do
      url="odafs://$addr/"
      [ "$which" = tls ] && url="odafs://$addr/?tls=1&tls_ca=$work/ca/ca.pem"
      echo "== round $r/$rounds: $mode, $which" >&2
      "$peers_bin" --target "$url" --mode "$mode" --name "$mode" --server-pid "$pid" \
        --run "$run" --round "$r" --seconds "$secs" --pm-files 2000 --pm-txns 20000 |
        sed "s/^{/{\"transport\": \"$which\", /" >>"$rows"
    done
  done
done

python3 bench/peers/ab_table.py "$rows" transport clear tls p50_us ops_per_s tps \
  client_cpu_us_per_op server_cpu_us_per_op
echo "rows: $rows" >&2
