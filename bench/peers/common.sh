# Sourced by the bench/peers scripts: what they share besides rpcbind and nfs-ganesha
# (ganesha.sh). REQUIRES: the caller's `set -euo pipefail`.

# free_port: a TCP port free on 127.0.0.1 just now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# make_peer_files PEERS_BIN DIR [MB...]: the data files every contender reads, made by
# odafs-peers in DIR: peers-<MB>m.dat for each MB (default 64 and 256).
make_peer_files() {
  local bin=$1 dir=$2
  shift 2
  local sizes=("$@")
  [ ${#sizes[@]} -gt 0 ] || sizes=(64 256)
  mkdir -p "$dir"
  for mb in "${sizes[@]}"; do "$bin" --make-file "$dir/peers-${mb}m.dat" --mb "$mb"; done
}

# peers NAME TARGET MODE SERVER_PID WORKLOADS ROUND [FLAGS...]: one odafs-peers process
# (build/odafs-peers) over TARGET, its rows on stdout; MODE "-" for libnfs (one read path).
# Reads the caller's secs, pm_files and pm_txns.
peers() {
  local name=$1 target=$2 mode=$3 spid=$4 run=$5 round=$6
  shift 6
  [ "$mode" = - ] || set -- --mode "$mode" "$@"
  build/odafs-peers --target "$target" --name "$name" --server-pid "$spid" --run "$run" \
    --round "$round" --seconds "$secs" --pm-files "$pm_files" --pm-txns "$pm_txns" "$@"
}
