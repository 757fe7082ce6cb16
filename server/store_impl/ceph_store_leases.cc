// CephStore's leases (CephFS delegations), its session's identity across restarts, and
// the eviction of a dead peer gateway's sessions; see ceph_store.h. Built with
// _FILE_OFFSET_BITS=64, as ceph_store.cc.
#include <cephfs/libcephfs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "base/futex.h"
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

namespace {

constexpr const char* kGatewayKey = "odafs_gateway";
constexpr const char* kOpenedKey = "odafs_opened";

// One MDS command (JSON), its output in *out. Fails with the MDS's own words.
Status mds_command(ceph_mount_info* cm, const std::string& command, std::string* out) {
  const char* cmd[] = {command.c_str()};
  char *outbuf = nullptr, *outs = nullptr;
  size_t outbuf_len = 0, outs_len = 0;
  const int rc =
      ceph_mds_command(cm, "*", cmd, 1, nullptr, 0, &outbuf, &outbuf_len, &outs, &outs_len);
  if (out != nullptr && outbuf != nullptr) out->assign(outbuf, outbuf_len);
  std::string said = outs != nullptr ? std::string(outs, outs_len) : std::string();
  ceph_buffer_free(outbuf);
  ceph_buffer_free(outs);
  if (rc != 0) return Status(-rc, "mds command " + command + (said.empty() ? "" : ": " + said));
  return Status();
}

}  // namespace

Status name_gateway(ceph_mount_info* cm, const std::string& name) {
  const int64_t opened = wall_ms();
  const std::string metadata =
      std::string(kGatewayKey) + "=" + name + "," + kOpenedKey + "=" + std::to_string(opened);
  if (int rc = ceph_conf_set(cm, "client_metadata", metadata.c_str()); rc != 0) {
    return Status(-rc, "client_metadata");
  }
  return Status();
}

}  // namespace ceph

Result<int> CephStore::evict_peer_sessions(const std::string& peer, int64_t opened_before_ms) {
  std::string listing;
  ODAFS_RETURN_IF_ERROR(ceph::mds_command(cm_, R"({"prefix": "session ls"})", &listing));
  const nlohmann::json sessions =
      nlohmann::json::parse(listing, nullptr, /*allow_exceptions=*/false);
  if (!sessions.is_array()) return Status(EPROTO, "session ls: not a JSON list");
  int evicted = 0;
  for (const nlohmann::json& session : sessions) {
    const nlohmann::json* meta =
        session.contains("client_metadata") ? &session["client_metadata"] : nullptr;
    if (meta == nullptr || !meta->is_object() || !session.contains("id") ||
        !session["id"].is_number_unsigned() || meta->value(ceph::kGatewayKey, "") != peer) {
      continue;
    }
    const std::string opened = meta->value(ceph::kOpenedKey, "");
    char* end = nullptr;
    const long long opened_ms = std::strtoll(opened.c_str(), &end, 10);
    if (opened.empty() || *end != '\0' || opened_ms >= opened_before_ms) continue;  // a newer one
    const std::string id = std::to_string(session["id"].get<uint64_t>());
    ODAFS_RETURN_IF_ERROR(ceph::mds_command(
        cm_, R"({"prefix": "client evict", "filters": ["id=)" + id + R"("]})", nullptr));
    ++evicted;
  }
  return evicted;
}

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
