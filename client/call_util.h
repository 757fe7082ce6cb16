// Helpers every part of the client uses to build calls and read replies. Internal to
// client/: not installed, not part of the API.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "base/log.h"
#include "base/net.h"
#include "base/status.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/mount_state.h"
#include "client/retry_policy.h"
#include "proto/attr.h"
#include "proto/enums.h"
#include "proto/odafs_prot.h"
#include "proto/procedures.h"
#include "proto/status.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"

namespace odafs {

using rpc::to_xdrproc;

// A reply's status as a Status: ok, or the errno it maps to with `what` as the message.
// Takes the enum by reference and reads its raw bits: a hostile reply may carry any
// 32-bit status, and loading one outside odafs_stat's enumerators is undefined behaviour.
inline Status status_of(const odafs_stat& status, const std::string& what) {
  const auto raw = static_cast<int>(raw_enum(status));
  if (raw == ODAFS_ERR_BAD_STATEID) {
    return Status(EIO, what +
                           " (the server had revoked this client's write delegation: its lease "
                           "ran out before the bytes came back, and they are lost)");
  }
  if (raw != ODAFS_OK) return Status(errno_from_status(raw), what);
  return Status();
}

inline FileType file_type(const odafs_ftype& t) {
  switch (raw_enum(t)) {
    case ODAFS_DIR:
      return FileType::kDirectory;
    case ODAFS_LNK:
      return FileType::kSymlink;
    case ODAFS_BLK:
      return FileType::kBlock;
    case ODAFS_CHR:
      return FileType::kChar;
    case ODAFS_SOCK:
      return FileType::kSocket;
    case ODAFS_FIFO:
      return FileType::kFifo;
    default:
      return FileType::kRegular;
  }
}

inline Attr to_attr(const odafs_fattr& a) {
  return Attr{.type = file_type(a.type),
              .mode = a.mode,
              .nlink = a.nlink,
              .uid = a.uid,
              .gid = a.gid,
              .size = a.size,
              .used = a.used,
              .fileid = a.fileid,
              .file_generation = a.file_generation,
              .atime = timespec_of(a.atime),
              .mtime = timespec_of(a.mtime),
              .ctime = timespec_of(a.ctime),
              .rdev = makedev(a.rdev.major, a.rdev.minor)};
}

inline void put_fh(char* dst, const Handle& h) { std::memcpy(dst, h.data(), h.size()); }

// The arguments naming `name` in `dir`. REQUIRES: name outlives them (they point into it).
inline diropargs dirop_args(const Handle& dir, const std::string& name) {
  diropargs args{};
  put_fh(args.dir, dir);
  args.name = const_cast<char*>(name.c_str());
  return args;
}
inline Handle get_fh(const char* src) {
  Handle h;
  std::memcpy(h.data(), src, h.size());
  return h;
}

// Frees what decoding a result allocated, whatever path leaves the scope.
template <class T>
struct XdrFree {
  xdrproc_t proc;
  T* obj;
  ~XdrFree() { xdr_free(proc, reinterpret_cast<char*>(obj)); }
};

inline Status check_name(const std::string& name) {
  if (name.size() > ODAFS_MAXNAMLEN) return Status(ENAMETOOLONG, name.substr(0, 32) + "...");
  // A C string would end at the NUL: "a\0b" would name "a".
  if (name.find('\0') != std::string::npos) return Status(EINVAL, "a name holding a NUL byte");
  return Status();
}

// s with "context: " before its message (ok stays ok).
inline Status in_context(Status s, const std::string& context) {
  if (s.ok()) return s;
  return Status(s.errno_value(), context + ": " + s.message());
}

// Procedure P (proto/procedures.h) on ch, with P's argument and result types: the one way
// the client names a procedure's wire types. call waits for the reply and decodes it into
// *res (free it with xdr_free); start sends it on `call` for a later wait.
template <uint32_t P>
Status call(rpc::Channel& ch, const typename wire::Procedure<P>::Args& args,
            typename wire::Procedure<P>::Result* res, rpc::CallFailure* failure = nullptr) {
  return ch.call(P, to_xdrproc(wire::Procedure<P>::xargs), &args,
                 to_xdrproc(wire::Procedure<P>::xres), res, failure);
}
template <uint32_t P>
Status call(rpc::Channel& ch, typename wire::Procedure<P>::Result* res) {  // no arguments
  return ch.call(P, to_xdrproc(rpc::xdr_nothing), nullptr, to_xdrproc(wire::Procedure<P>::xres),
                 res);
}
template <uint32_t P>
Status start(rpc::Channel& ch, rpc::Call& call, const typename wire::Procedure<P>::Args& args) {
  return ch.start(call, P, to_xdrproc(wire::Procedure<P>::xargs), &args);
}

// OPEN's and CREATE's access for an open(2) access mode (O_RDONLY, O_WRONLY, O_RDWR).
inline uint32_t open_access(int access) {
  return access == O_RDONLY ? ODAFS_OPEN_READ : ODAFS_OPEN_READ | ODAFS_OPEN_WRITE;
}

// Whether a call's errno says the server could not be reached (refused, reset, timed
// out): the call may not have run, and the server may be back in a moment.
inline bool server_unreachable(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == EPIPE || err == ETIMEDOUT ||
         err == EHOSTUNREACH || err == ENETUNREACH;
}

// A new channel to server, shared by the mount's users.
inline Result<std::shared_ptr<rpc::Channel>> connect_channel(const net::Endpoint& server,
                                                             rpc::Channel::Options options) {
  ODAFS_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Channel> ch,
                         rpc::Channel::connect(server, std::move(options)));
  return std::shared_ptr<rpc::Channel>(std::move(ch));
}

// ---- Retrying (client/retry_policy.h). fn returns a Status or a Result<T>; the helpers
// decide by its errno_value(), and return what the last run of fn returned.

// Runs fn(), and again while it fails DELAY, as RetryPolicy says.
template <class Fn>
auto retry_delayed(int timeout_ms, Fn&& fn) -> decltype(fn()) {
  RetryPolicy policy(timeout_ms);
  for (;;) {
    auto r = fn();
    if (r.errno_value() != kDelayErrno || !policy.again_after_delay()) return r;
  }
}

// A lost connection is told by the failed call's channel: broken() now. The rpc layer
// breaks a channel only when the connection failed under it (a send or receive failed,
// the server closed it, a malformed record), so a failure on a broken channel is that, or
// one that raced with it (which rpc::CallFailure would tell apart; the difference does not
// matter): either way an idempotent call may go once more on the new mount, and no other.
template <class Fn>
auto ClientImpl::with_mount(bool idempotent, Fn&& fn)
    -> decltype(fn(std::declval<const MountState&>())) {
  RetryPolicy policy(options_.timeout_ms);
  for (;;) {
    auto m = mount_state();
    if (!m.ok()) return std::move(m).status();
    auto r = fn(**m);
    if (r.ok()) return r;
    if (r.errno_value() == kDelayErrno && policy.again_after_delay()) continue;
    if ((*m)->channel->broken() && policy.again_after_lost_connection(idempotent)) {
      ODAFS_LOG_WARN("odafs: connection lost (%s); reconnecting", to_status(r).to_string().c_str());
      continue;
    }
    return r;
  }
}

template <class Fn>
auto ClientImpl::again_after_restart(Fn&& fn) -> decltype(fn()) {
  const uint64_t before = mounts_.load(std::memory_order_acquire);
  RetryPolicy policy(options_.timeout_ms);
  for (;;) {
    auto r = fn();
    if (r.errno_value() != ESTALE) return r;
    const bool remounted = mounts_.load(std::memory_order_acquire) != before;
    if (!remounted || !policy.again_after_stale()) return r;
  }
}

template <class Fn>
auto ClientImpl::with_channel(bool idempotent, Fn&& fn)
    -> decltype(fn(std::declval<rpc::Channel&>())) {
  return with_mount(idempotent, [&](const MountState& m) { return fn(*m.channel); });
}

}  // namespace odafs
