#include "server/identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "base/log.h"
#include "rpc/call_credential.h"

namespace odafs::server {
namespace {

// The file-system identity this thread has now, as this file last set and read it back.
// Switching costs the kernel a new credential per call (prepare_creds / commit_creds), so
// a scope sets only what differs: a root caller of a root server (or one acting as the same
// user twice in a row) switches nothing. groups_known false: not yet set on this thread.
struct ThreadIdentity {
  uint32_t fsuid = 0;
  uint32_t fsgid = 0;
  bool groups_known = false;
  uint32_t ngroups = 0;
  gid_t groups[16] = {};
};
thread_local ThreadIdentity t_now;

bool same_groups(const gid_t* groups, uint32_t n) {
  return t_now.groups_known && t_now.ngroups == n && std::equal(groups, groups + n, t_now.groups);
}

// Sets the thread's fsuid, fsgid and groups to these, each only if it differs, reading
// each back. False if the kernel refused any (the thread may then be anywhere between).
bool switch_to(uint32_t uid, uint32_t gid, const gid_t* groups, uint32_t n) {
  if (!same_groups(groups, n)) {
    // Raw syscall: glibc's setgroups() would change every thread of the process.
    if (syscall(SYS_setgroups, n, groups) != 0) {
      t_now.groups_known = false;
      return false;
    }
    t_now.groups_known = true;
    t_now.ngroups = n;
    std::copy(groups, groups + n, t_now.groups);
  }
  if (t_now.fsgid != gid) {
    setfsgid(gid);
    // setfsuid/setfsgid say nothing of failure: asking with -1 (never valid) reads back.
    t_now.fsgid = static_cast<uint32_t>(setfsgid(static_cast<gid_t>(-1)));
    if (t_now.fsgid != gid) return false;
  }
  if (t_now.fsuid != uid) {
    setfsuid(uid);
    t_now.fsuid = static_cast<uint32_t>(setfsuid(static_cast<uid_t>(-1)));
    if (t_now.fsuid != uid) return false;
  }
  return true;
}

// Back to the server's own file-system identity (root, no groups). A thread that cannot
// get back would serve its next calls as someone else: there is no safe way on, so the
// process stops.
void become_server() {
  if (!switch_to(0, 0, nullptr, 0)) {
    ODAFS_LOG_ERROR("cannot return to the server's identity after a call; stopping");
    std::abort();
  }
}

}  // namespace

auth_stat act_as_caller(const rpc::CallerCred* cred) {
  if (cred == nullptr || !cred->auth_sys) return AUTH_TOOWEAK;
  // A group equal to the fsgid adds nothing (the kernel checks the fsgid first), so it is
  // left out: root's usual [0] is then no groups, as the server's own.
  gid_t groups[16];
  uint32_t n = 0;
  for (uint32_t i = 0; i < cred->ngids && i < 16; ++i) {
    if (cred->gids[i] != cred->gid) groups[n++] = cred->gids[i];
  }
  if (!switch_to(cred->uid, cred->gid, groups, n)) {
    become_server();
    return AUTH_BADCRED;
  }
  return AUTH_OK;
}

void act_as_server() { become_server(); }

IdentityScope::IdentityScope(Store& store, const rpc::CallerCred* cred, bool acting)
    : cred_(cred), acting_(acting) {
  if (acting_) scope_.emplace(store, cred, true);
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

ServerIdentityScope::ServerIdentityScope() {
  const bool server = t_now.fsuid == 0 && t_now.fsgid == 0 && t_now.ngroups == 0;
  if (server) return;
  switched_ = true;
  uid_ = t_now.fsuid;
  gid_ = t_now.fsgid;
  ngroups_ = t_now.ngroups;
  std::copy(t_now.groups, t_now.groups + t_now.ngroups, groups_);
  become_server();
}

ServerIdentityScope::~ServerIdentityScope() {
  if (switched_ && !switch_to(uid_, gid_, groups_, ngroups_)) {
    ODAFS_LOG_ERROR(
        "cannot return to the caller's identity after the server's own work; "
        "stopping");
    std::abort();
  }
}

}  // namespace odafs::server
