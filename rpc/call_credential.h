// Who a call says it comes from: an AUTH_SYS credential, encoded once, a per-thread
// override that makes the calls a thread starts carry another caller's credential, and
// the permission rule a server acting as a caller applies.
//
// A Channel sends its own credential (Channel::Options::auth) with every call. A program
// that serves several users over one connection (odafs-mount, for each FUSE request's
// caller) wraps each user's calls in a CallAs scope instead: every call the thread starts
// while the scope lives, on any Channel, carries that credential, and a server run with
// --auth-sys acts as that caller. Calls other threads start for the program (delegation
// returns, the receiver's work) keep the channel's own credential.
#pragma once

#include <rpc/rpc.h>

#include <cstddef>
#include <string_view>

#include "rpc/message_header.h"

namespace odafs::rpc {

// An AUTH_SYS credential and its encoded body (RFC 5531 appendix A), held in place: making
// one allocates nothing, so it may be built for every request. Immutable once made.
class CallCredential {
 public:
  // id.auth_sys is taken as true; at most 16 groups of id.gids travel (id.ngids is cut
  // there), and at most 255 bytes of machine. The stamp is 0: odafsd does not read it.
  CallCredential(const CallerCred& id, std::string_view machine);
  // A copy carries the same caller (IoQueue keeps its submitter's for the calls it starts
  // later, at reap). Immutable: no assignment.
  CallCredential(const CallCredential&) = default;
  CallCredential& operator=(const CallCredential&) = delete;

  const CallerCred& id() const { return id_; }
  // The encoded body, for a call header's credential.
  std::string_view body() const { return {body_, length_}; }

 private:
  CallerCred id_;
  char body_[MAX_AUTH_BYTES];
  size_t length_ = 0;
};

// POSIX permission check of `want` (R_OK/W_OK/X_OK bits) for `caller` on an object with
// permission bits `mode`, owned by owner:group: what a server acting as the caller (and
// its kernel) decides. Root passes, except that X_OK needs some x bit on a non-directory.
bool caller_permits(const CallerCred& caller, uint32_t mode, uint32_t owner, uint32_t group,
                    bool is_dir, int want);

// While one lives, the calls its thread starts carry `cred` (the innermost scope's, when
// they nest).
//
// Thread-safety: the override is per thread: a scope affects only the thread that made
// it, and other threads' calls on the same Channel keep their own credentials at the same
// time. REQUIRES: cred outlives the scope; the scope is destroyed on the thread that made
// it, in reverse order of making (as a local variable is).
class CallAs {
 public:
  explicit CallAs(const CallCredential& cred);
  ~CallAs();
  CallAs(const CallAs&) = delete;
  CallAs& operator=(const CallAs&) = delete;

  // The innermost scope's credential on this thread; null outside every scope.
  static const CallCredential* current();

 private:
  const CallCredential* previous_;
};

}  // namespace odafs::rpc
