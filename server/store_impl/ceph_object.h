// CephStore's own objects, shared by its source files (ceph_store.cc: the file system
// calls; ceph_store_leases.cc: leases and the session's identity). Private to
// server/store_impl/.
#pragma once

#include <cephfs/libcephfs.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/store.h"

namespace odafs::server::ceph {

// What an Object of this store holds. An open file (fh) pins its inode itself; `in` is then
// borrowed from it and owned_in false.
// reopen_in_place swaps fh while other threads may read through the one before: that one
// is kept (retired) until the object is released.
struct CephObject {
  CephObject(Inode* in_in, Fh* fh_in, bool owned) : in(in_in), fh(fh_in), owned_in(owned) {}
  Inode* const in;
  std::atomic<Fh*> fh;
  const bool owned_in;
  std::mutex mu;             // reopen_in_place's and the lease's
  std::vector<Fh*> retired;  // guarded by mu
  Fh* leased = nullptr;      // the open file holding the lease (fh, or one retired); mu
  // leased != nullptr, readable without mu (a view a moment old costs one hand-over more
  // or less, nothing else).
  std::atomic<bool> under_lease{false};
};

inline CephObject& obj_of(const Object& o) { return *reinterpret_cast<CephObject*>(o.native()); }

inline Status ceph_status(int rc, const char* what) { return Status(-rc, what); }

// Evicts the session an earlier instance left under `uuid`, then names this one by it
// (CephStore::Options::session_uuid). REQUIRES: cm configured, not mounted.
Status reclaim_session(ceph_mount_info* cm, const std::string& uuid);
// Puts the gateway's name and the session's start into the session's metadata
// (CephStore::Options::gateway_name). REQUIRES: cm configured, not initialised.
Status name_gateway(ceph_mount_info* cm, const std::string& name);

}  // namespace odafs::server::ceph
