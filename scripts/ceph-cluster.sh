#!/usr/bin/env bash
# A throw-away one-node Ceph cluster with CephFS, for the CephFS suites and bench/ceph:
# one monitor, one manager, one BlueStore OSD on a sparse file, one MDS, pools of size 1,
# everything under DIR and on 127.0.0.1.
#
#   scripts/ceph-cluster.sh start DIR [OWNER_PID]  # prints the cluster's conf file last
#   scripts/ceph-cluster.sh stop DIR               # kills the daemons by PID (SIGKILL)
#
# With OWNER_PID, a detached watcher stops the cluster once that process is gone, however
# it went (a suite killed at its timeout runs no destructor).
#
# start exits 3, saying why on stderr, when this machine cannot run one (no Ceph daemons:
# `bash scripts/deps.sh ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common libcephfs-dev`),
# so a suite can skip with that reason. A start that fails half-way stops what it started.
# Ceph pitfalls met (and why the script does what it does): each `ceph` CLI call costs
# about a second of Python start, so setup makes few; `ceph-authtool` has no -q; leave
# bluestore_block_path unset (set inside the OSD dir it loops a symlink); two libcephfs
# clients on one conf need $pid.$cctid in the admin socket path; the MDS takes seconds to
# stop on SIGTERM, so stop uses SIGKILL (the cluster is thrown away anyway).
set -euo pipefail
cmd=${1:-}
dir=${2:-}
owner=${3:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start DIR [OWNER_PID] | stop DIR" >&2; exit 2; }

stop() {
  for f in "$dir"/run/*.pid; do
    [ -e "$f" ] || continue
    kill -9 "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
if [ "$cmd" = watch ]; then  # the watcher that start leaves behind (see above)
  while kill -0 "$owner" 2>/dev/null; do sleep 2; done
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start DIR [OWNER_PID] | stop DIR" >&2; exit 2; }

for bin in ceph-mon ceph-mgr ceph-osd ceph-mds ceph ceph-authtool monmaptool; do
  if ! command -v "$bin" >/dev/null; then
    echo "ceph-cluster: no $bin (bash scripts/deps.sh ceph-mon ceph-mgr ceph-osd ceph-mds" \
         "ceph-common)" >&2
    exit 3
  fi
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "${dir:?}"/{run,log,mon.a,mgr.x,osd.0,mds.a}
mkdir -p "$dir"/{run,log,mon.a,mgr.x,osd.0,mds.a}
trap 'status=$?; [ $status = 0 ] || { echo "ceph-cluster: start failed; logs in $dir/log" >&2; stop; }' EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
conf=$dir/ceph.conf
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/keyring
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.\$pid.\$cctid.asok
log file = $dir/log/\$name.log
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 8589934592
osd memory target = 402653184
mon data = $dir/\$name
mgr data = $dir/\$name
osd data = $dir/\$name
mds data = $dir/\$name
EOF

ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
  --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
for who in mgr.x osd.0 mds.a; do
  ceph-authtool "$dir/keyring" --gen-key -n "$who" >/dev/null
done
ceph-authtool "$dir/keyring" -n mgr.x --cap mon 'allow profile mgr' --cap osd 'allow *' \
  --cap mds 'allow *' >/dev/null
ceph-authtool "$dir/keyring" -n osd.0 --cap mon 'allow profile osd' --cap mgr 'allow profile osd' \
  --cap osd 'allow *' >/dev/null
ceph-authtool "$dir/keyring" -n mds.a --cap mon 'allow profile mds' --cap osd 'allow *' \
  --cap mds 'allow' --cap mgr 'allow profile mds' >/dev/null
monmaptool --create --add a "v2:127.0.0.1:$port" --fsid "$fsid" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
ceph-mon -c "$conf" -i a >&2
osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" --keyring "$dir/keyring" 2>"$dir/log/mkfs.log"
# One CLI call (a Python start) sets up the cluster's state: the OSD, its keys, the pools
# and the file system.
ceph -c "$conf" -i "$dir/keyring" auth import >/dev/null
ceph -c "$conf" osd new "$osd_uuid" 0 >/dev/null
ceph-mgr -c "$conf" -i x >&2
ceph-osd -c "$conf" -i 0 >&2
ceph -c "$conf" osd pool create cephfs_metadata 8 >/dev/null 2>&1
ceph -c "$conf" osd pool create cephfs_data 8 >/dev/null 2>&1
ceph -c "$conf" fs new cephfs cephfs_metadata cephfs_data >/dev/null
# A client that dies (a gateway killed in a failover test) keeps its capabilities, and
# others wait for them, until the MDS times its session out: 30 s (its least) instead of 60.
ceph -c "$conf" fs set cephfs session_timeout 30 >/dev/null
ceph-mds -c "$conf" -i a >&2
for _ in $(seq 120); do
  if ceph -c "$conf" mds stat 2>/dev/null | grep -q "up:active"; then
    trap - EXIT
    if [ -n "$owner" ]; then
      setsid bash "$(readlink -f "$0")" watch "$dir" "$owner" </dev/null >/dev/null 2>&1 &
    fi
    echo "$conf"
    exit 0
  fi
  sleep 0.5
done
echo "ceph-cluster: the MDS did not become active in 60 s" >&2
exit 1
