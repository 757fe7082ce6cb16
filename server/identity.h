// Acting as the caller (AUTH_SYS) for the duration of one call, like a kernel NFS server.
//
// Linux file-system credentials (fsuid, fsgid, supplementary groups) are per thread when
// set by raw system calls, so one pool thread can serve uid 1000 while its neighbour
// serves uid 0. Only a server running with CAP_SETUID/CAP_SETGID can switch; otherwise
// active() is false and the server acts as itself.
#pragma once

#include <sys/stat.h>

#include "rpc/server.h"

namespace odafs::server {

class IdentityScope {
 public:
  // REQUIRES: cred outlives the scope. enabled=false makes this a no-op.
  IdentityScope(const rpc::CallerCred* cred, bool enabled);
  ~IdentityScope();
  IdentityScope(const IdentityScope&) = delete;
  IdentityScope& operator=(const IdentityScope&) = delete;

  bool active() const { return active_; }

  // Whether a scope for cred would act as root: the server acts as its callers (enabled,
  // running as root) and this one is uid 0. Such a caller keeps setuid/setgid bits when it
  // writes, as a process with CAP_FSETID does; every other caller is an unprivileged one,
  // and so is everyone without --auth-sys (the server cannot tell who they are).
  static bool privileged(const rpc::CallerCred* cred, bool enabled);

  // POSIX permission check of `want` (R_OK/W_OK/X_OK bits) for the caller on an object
  // with attributes st. Always true when the scope is not active (the kernel checked as
  // the server). Root passes, except X_OK needs some x bit on non-directories.
  bool permits(const struct stat& st, int want) const;

 private:
  const rpc::CallerCred* cred_;
  bool active_ = false;
};

}  // namespace odafs::server
