#include "server/identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rpc/call_credential.h"

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

bool IdentityScope::privileged(const rpc::CallerCred* cred, bool enabled) {
  return enabled && cred != nullptr && cred->auth_sys && cred->uid == 0 && geteuid() == 0;
}

IdentityScope::~IdentityScope() {
  if (!active_) return;
  setfsuid(0);
  setfsgid(0);
  syscall(SYS_setgroups, 0, nullptr);
}

bool IdentityScope::permits(const struct stat& st, int want) const {
  return !active_ || rpc::caller_permits(*cred_, st.st_mode & 07777, st.st_uid, st.st_gid,
                                         S_ISDIR(st.st_mode), want);
}

}  // namespace odafs::server
