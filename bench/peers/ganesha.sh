# Sourced by bench/peers/run.sh, bound.sh and nfs41.sh: rpcbind and nfs-ganesha (FSAL_VFS)
# on 127.0.0.1, on free ports, in the foreground of a background job each, stopped by PID.
# REQUIRES: root (FSAL_VFS opens by handle), the caller's `set -euo pipefail`,
# bench/peers/common.sh sourced (free_port) and die defined by the caller.

# start_rpcbind: rpcbind for ganesha's NFSv3 registrations (the client itself is given the
# ports), unless one answers already; sets rpcbind_pid ("" when none was started).
start_rpcbind() {
  rpcbind_pid=""
  rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && return 0
  rpcbind -f -w &
  rpcbind_pid=$!
  for _ in $(seq 50); do rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
  rpcinfo -p 127.0.0.1 >/dev/null 2>&1 || die "rpcbind did not start"
}

# start_ganesha EXPORT STATE_DIR [MINOR_VERSIONS] [CEPH_CONF]: nfs-ganesha exporting
# EXPORT as /export over NFSv3 and NFSv4 (minor versions MINOR_VERSIONS, default "0, 1") on
# TCP only; no NLM, RQUOTA, UDP or Kerberos; graceless, so that it serves at once. EXPORT is
# a local directory (FSAL_VFS), or, with CEPH_CONF, a path of that cluster's CephFS
# (FSAL_CEPH, package nfs-ganesha-ceph). Its config and log go to STATE_DIR. Sets
# ganesha_pid, nfs_port and mnt_port.
start_ganesha() {
  local export_dir=$1 g=$2 minors=${3:-0, 1} ceph_conf=${4:-} plugins fsal extra=""
  nfs_port=$(free_port)
  mnt_port=$(free_port)
  mkdir -p "$g/recovery"
  if [ -n "$ceph_conf" ]; then
    plugins=$(dirname "$(dpkg -L nfs-ganesha-ceph | grep '/libfsalceph.so$' | head -1)")
    fsal="Name = CEPH;"
    extra="CEPH { Ceph_Conf = $ceph_conf; }"
  else
    plugins=$(dirname "$(dpkg -L nfs-ganesha-vfs | grep '/libfsalvfs.so$' | head -1)")
    fsal="Name = VFS;"
  fi
  cat >"$g/ganesha.conf" <<CONF
NFS_CORE_PARAM {
  Protocols = 3, 4;
  Bind_addr = 127.0.0.1;
  NFS_Port = $nfs_port;
  MNT_Port = $mnt_port;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Enable_UDP = false;
  Plugins_Dir = $plugins;
  mount_path_pseudo = true;
}
NFSV4 { Graceless = true; Minor_Versions = $minors; RecoveryRoot = $g/recovery; }
NFS_KRB5 { Active_krb5 = false; }
$extra
EXPORT {
  Export_Id = 1;
  Path = $export_dir;
  Pseudo = /export;
  Access_Type = RW;
  Squash = No_Root_Squash;
  Protocols = 3, 4;
  Transports = TCP;
  SecType = sys;
  FSAL { $fsal }
}
CONF
  ganesha.nfsd -F -f "$g/ganesha.conf" -L "$g/ganesha.log" -p "$g/ganesha.pid" -N NIV_EVENT &
  ganesha_pid=$!
  for _ in $(seq 200); do
    grep -q "NFS SERVER INITIALIZED" "$g/ganesha.log" 2>/dev/null && break
    kill -0 "$ganesha_pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q "NFS SERVER INITIALIZED" "$g/ganesha.log" 2>/dev/null ||
    ! kill -0 "$ganesha_pid" 2>/dev/null; then
    tail -20 "$g/ganesha.log" >&2 || true
    die "nfs-ganesha did not start (its log is above)"
  fi
}
