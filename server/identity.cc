#include "server/identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

#include "base/log.h"
#include "rpc/call_credential.h"

namespace odafs::server {
namespace {

// Back to the server's own file-system identity. A thread that cannot get back would serve
// its next calls as someone else: there is no safe way on, so the process stops.
void become_server() {
  setfsuid(0);
  setfsgid(0);
  const bool groups_ok = syscall(SYS_setgroups, 0, nullptr) == 0;
  if (!groups_ok || setfsuid(static_cast<uid_t>(-1)) != 0 ||
      setfsgid(static_cast<gid_t>(-1)) != 0) {
    ODAFS_LOG_ERROR("cannot return to the server's identity after a call; stopping");
    std::abort();
  }
}

}  // namespace

IdentityScope::IdentityScope(const rpc::CallerCred* cred, bool acting)
    : cred_(cred), acting_(acting) {
  if (!acting_) return;
  if (cred == nullptr || !cred->auth_sys) throw rpc::CallRefused(AUTH_TOOWEAK);
  gid_t groups[16];
  const uint32_t n = cred->ngids <= 16 ? cred->ngids : 16;
  for (uint32_t i = 0; i < n; ++i) groups[i] = cred->gids[i];
  // Raw syscalls: glibc's setgroups() would change every thread of the process.
  bool ok = syscall(SYS_setgroups, n, groups) == 0;
  if (ok) {
    setfsgid(cred->gid);
    // setfsuid/setfsgid say nothing of failure: asking with -1 (never valid) reads back.
    ok = static_cast<uint32_t>(setfsgid(static_cast<gid_t>(-1))) == cred->gid;
  }
  if (ok) {
    setfsuid(cred->uid);
    ok = static_cast<uint32_t>(setfsuid(static_cast<uid_t>(-1))) == cred->uid;
  }
  if (!ok) {
    become_server();
    throw rpc::CallRefused(AUTH_BADCRED);
  }
}

IdentityScope::~IdentityScope() {
  if (acting_) become_server();
}

bool IdentityScope::permits(const rpc::CallerCred* cred, bool acting, const struct stat& st,
                            int want) {
  if (!acting) return true;
  if (cred == nullptr || !cred->auth_sys) return false;
  return rpc::caller_permits(*cred, st.st_mode & 07777, st.st_uid, st.st_gid, S_ISDIR(st.st_mode),
                             want);
}

bool IdentityScope::privileged(const rpc::CallerCred* cred, bool acting) {
  return acting && cred != nullptr && cred->auth_sys && cred->uid == 0;
}

}  // namespace odafs::server
