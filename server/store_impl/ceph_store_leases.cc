// CephStore's leases (CephFS read delegations) and its session's identity across
// restarts; see ceph_store.h. Built with _FILE_OFFSET_BITS=64, as ceph_store.cc.
#include <cephfs/libcephfs.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "base/log.h"
#include "server/store_impl/ceph_object.h"
#include "server/store_impl/ceph_store.h"

namespace odafs::server {

namespace ceph {

Status reclaim_session(ceph_mount_info* cm, const std::string& uuid) {
  if (int rc = ceph_init(cm); rc != 0) return Status(-rc, "ceph_init");
  const int rc = ceph_start_reclaim(cm, uuid.c_str(), CEPH_RECLAIM_RESET);
  if (rc == 0) {
    ODAFS_LOG_INFO("cephfs: the session an earlier instance left (uuid %s) is evicted",
                   uuid.c_str());
  } else if (rc != -ENOENT) {  // ENOENT: none was left
    ODAFS_LOG_WARN(
        "cephfs: cannot evict the session an earlier instance left (%s): what it held goes "
        "at the MDS's session timeout",
        std::strerror(-rc));
  }
  if (rc == 0 || rc == -ENOENT) ceph_finish_reclaim(cm);
  ceph_set_uuid(cm, uuid.c_str());
  return Status();
}

}  // namespace ceph

using ceph::ceph_status;
using ceph::CephObject;
using ceph::obj_of;

Status CephStore::take_lease(const Object& file, const ObjectId& id, LeaseKind kind) {
  if (!leases_) return Status(EOPNOTSUPP, "cephfs: delegations are off");
  CephObject& o = obj_of(file);
  std::lock_guard lock(o.mu);
  if (o.leased != nullptr) return Status();
  Fh* fh = o.fh.load(std::memory_order_acquire);
  if (fh == nullptr) return Status(EBADF, "lease: the object is not open");
  {
    std::lock_guard registry(leased_mu_);  // first: the recall may come at once
    leased_[fh] = id;
  }
  const unsigned how = kind == LeaseKind::kWrite ? CEPH_DELEGATION_WR : CEPH_DELEGATION_RD;
  if (int rc = ceph_ll_delegation(cm_, fh, how, &CephStore::lease_recalled, this); rc != 0) {
    std::lock_guard registry(leased_mu_);
    leased_.erase(fh);
    return ceph_status(rc, "delegation");
  }
  o.leased = fh;
  o.under_lease.store(true, std::memory_order_relaxed);
  return Status();
}

void CephStore::give_back_lease(const Object& file) {
  CephObject& o = obj_of(file);
  std::lock_guard lock(o.mu);
  if (o.leased == nullptr) return;
  o.under_lease.store(false, std::memory_order_relaxed);
  give_back_delegation(o.leased);
  o.leased = nullptr;
}

void CephStore::give_back_delegation(Fh* fh) {
  if (int rc = ceph_ll_delegation(cm_, fh, CEPH_DELEGATION_NONE, &CephStore::lease_recalled, this);
      rc != 0) {
    ODAFS_LOG_WARN("cephfs: giving a delegation back failed: %s", std::strerror(-rc));
  }
  std::lock_guard registry(leased_mu_);
  leased_.erase(fh);
}

void CephStore::lease_recalled(Fh* fh, void* store) {
  auto* self = static_cast<CephStore*>(store);
  ObjectId id;
  {
    std::lock_guard registry(self->leased_mu_);
    auto it = self->leased_.find(fh);
    if (it == self->leased_.end()) return;  // given back meanwhile
    id = it->second;
  }
  if (self->recall_) self->recall_(id);
}

}  // namespace odafs::server
