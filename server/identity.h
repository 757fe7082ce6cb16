// Acting as the caller for the duration of one call, like a kernel NFS server.
//
// The store decides how (server/store.h, CallerScope): on a local export, Linux
// file-system credentials (fsuid, fsgid, supplementary groups), which are per thread when
// set by raw system calls, so one pool thread can serve uid 1000 while its neighbour
// serves uid 0 (act_as_caller below; needs root); on CephFS, a UserPerm per call. odafsd
// acts as its callers when it runs as root or serves CephFS (--identity caller); the
// credential a call runs as is what CallAuthority left of the one it sent (squashed,
// confined, anonymous for AUTH_NONE). Acting is all or nothing: a credential that cannot
// be taken on refuses the call; it never runs as the server.
#pragma once

#include <sys/stat.h>

#include <optional>

#include "rpc/server.h"
#include "server/store.h"

namespace odafs::server {

class IdentityScope {
 public:
  // Acts as *cred toward store until destroyed when `acting`; otherwise does nothing.
  // refused() says when the identity cannot be taken on: AUTH_BADCRED (the kernel refuses
  // the uid, gid or groups: each is read back) or AUTH_TOOWEAK (cred runs as no one); the
  // thread is the server's then, and the handler must answer with the refusal at once
  // (refused_call). REQUIRES: cred outlives the scope; destroyed on its thread.
  IdentityScope(Store& store, const rpc::CallerCred* cred, bool acting);
  IdentityScope(const IdentityScope&) = delete;
  IdentityScope& operator=(const IdentityScope&) = delete;

  // True, with r refused, when this scope could not act as the caller: a handler's
  // `if (as.refused_call(r)) return;` right after the scope.
  bool refused_call(rpc::Reply& r) const {
    if (!scope_ || scope_->refused() == AUTH_OK) return false;
    r.refuse(scope_->refused());
    return true;
  }

  // Whether this scope acts as the caller (the server acts as its callers).
  bool active() const { return acting_; }
  bool permits(const struct stat& st, int want) const { return permits(cred_, acting_, st, want); }

  // POSIX permission check of `want` (R_OK/W_OK/X_OK bits) for the caller cred on an
  // object with attributes st, without switching (no system call). Always true when the
  // server does not act as its callers (the kernel checks as the server). Root passes,
  // except X_OK needs some x bit on non-directories.
  static bool permits(const rpc::CallerCred* cred, bool acting, const struct stat& st, int want);
  // permits() for a file's bytes (READ, WRITE, a truncation): its owner always may, as
  // knfsd's owner override. POSIX checks permission at open(2), so open(O_CREAT|O_RDWR, 0)
  // gives a descriptor that reads, writes and truncates a file whose mode forbids it, and a
  // stateless server sees only the calls after; an owner could grant itself the bits anyway.
  static bool permits_data(const rpc::CallerCred* cred, bool acting, const struct stat& st,
                           int want) {
    return permits(cred, acting, st, want) ||
           (cred != nullptr && cred->auth_sys && cred->uid == st.st_uid);
  }

  // Whether a scope for cred acts as root. Such a caller keeps setuid/setgid bits when it
  // writes, as a process with CAP_FSETID does; every other caller is an unprivileged one,
  // and so is everyone when the server acts as itself (it cannot tell who they are).
  static bool privileged(const rpc::CallerCred* cred, bool acting);

 private:
  const rpc::CallerCred* cred_;
  bool acting_;
  std::optional<CallerScope> scope_;
};

// IdentityScope's two halves, for an owner that cannot hold a scope object (PosixStore's
// CallerScope): act_as_caller switches this thread as the constructor does (answering
// AUTH_OK, or why not as refused() does); act_as_server switches back, as the destructor
// does.
auth_stat act_as_caller(const rpc::CallerCred* cred);
void act_as_server();

// The server's own identity inside a call made as a caller, for the server's own files
// (the recovery record in --state-dir, which callers may not write): back to the
// server's fsuid, fsgid and groups for the scope's life, then the caller's again. Does
// nothing on a thread that is the server already. Aborts if the thread cannot switch
// back (as IdentityScope's end does: it would serve on as someone else).
// REQUIRES: destroyed on its thread, inside the IdentityScope it interrupts.
class ServerIdentityScope {
 public:
  ServerIdentityScope();
  ~ServerIdentityScope();
  ServerIdentityScope(const ServerIdentityScope&) = delete;
  ServerIdentityScope& operator=(const ServerIdentityScope&) = delete;

 private:
  bool switched_ = false;
  uint32_t uid_ = 0;
  uint32_t gid_ = 0;
  uint32_t ngroups_ = 0;
  gid_t groups_[16] = {};
};

}  // namespace odafs::server
