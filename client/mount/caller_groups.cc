#include "client/mount/caller_groups.h"

#include <algorithm>

namespace odafs::mount {

void CallerGroups::fill(fuse_req_t req, rpc::CallerCred* id) {
  id->ngids = 0;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->pid <= 0 || id->uid == 0) return;
  const Clock::time_point now = Clock::now();
  Entry& e = entries_[static_cast<uint32_t>(ctx->pid) % entries_.size()];
  {
    std::lock_guard lock(mu_);
    if (e.pid == ctx->pid && e.uid == id->uid && e.gid == id->gid && now - e.read_at < ttl_) {
      id->ngids = e.ngids;
      std::copy_n(e.gids, e.ngids, id->gids);
      return;
    }
  }
  // Outside the lock: a read of /proc. Two threads may both read for one process; the
  // later one's entry stays.
  gid_t groups[16];
  const int n = fuse_req_getgroups(req, 16, groups);
  if (n <= 0) return;  // -ENOSYS, -ESRCH (the caller is gone), or none
  id->ngids = static_cast<uint32_t>(std::min(n, 16));
  std::copy_n(groups, id->ngids, id->gids);
  std::lock_guard lock(mu_);
  e.pid = ctx->pid;
  e.uid = id->uid;
  e.gid = id->gid;
  e.read_at = now;
  e.ngids = id->ngids;
  std::copy_n(id->gids, id->ngids, e.gids);
}

}  // namespace odafs::mount
