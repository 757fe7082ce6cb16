#include "server/identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace odafs::server {

IdentityScope::IdentityScope(const rpc::CallerCred* cred, bool enabled) : cred_(cred) {
  if (!enabled || cred == nullptr || !cred->auth_sys || geteuid() != 0) return;
  gid_t groups[16];
  for (uint32_t i = 0; i < cred->ngids; ++i) groups[i] = cred->gids[i];
  // Raw syscalls: glibc's setgroups() would change every thread of the process.
  if (syscall(SYS_setgroups, cred->ngids, groups) != 0) return;
  setfsgid(cred->gid);
  setfsuid(cred->uid);
  active_ = true;
}

IdentityScope::~IdentityScope() {
  if (!active_) return;
  setfsuid(0);
  setfsgid(0);
  syscall(SYS_setgroups, 0, nullptr);
}

bool IdentityScope::permits(const struct stat& st, int want) const {
  if (!active_) return true;
  if (cred_->uid == 0) {
    if ((want & X_OK) == 0 || S_ISDIR(st.st_mode)) return true;
    return (st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)) != 0;
  }
  mode_t bits;
  if (st.st_uid == cred_->uid) {
    bits = (st.st_mode >> 6) & 7;
  } else {
    bool in_group = st.st_gid == cred_->gid;
    for (uint32_t i = 0; i < cred_->ngids && !in_group; ++i) in_group = st.st_gid == cred_->gids[i];
    bits = in_group ? (st.st_mode >> 3) & 7 : st.st_mode & 7;
  }
  return (bits & static_cast<mode_t>(want)) == static_cast<mode_t>(want);
}

}  // namespace odafs::server
