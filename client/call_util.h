// Helpers every part of the client uses to build calls and read replies. Internal to
// client/: not installed, not part of the API.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "base/log.h"
#include "client/client.h"
#include "client/mount_state.h"
#include "client/retry_policy.h"
#include "proto/attr.h"
#include "proto/enums.h"
#include "proto/odafs_prot.h"
#include "proto/status.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"

namespace odafs {

using rpc::to_xdrproc;

// Error's what() already ends in ": " and the errno's text.
[[noreturn]] inline void fail(int err, const std::string& what) { throw Error(err, what); }

// Takes the enum by reference and reads its raw bits: a hostile reply may carry any
// 32-bit status, and loading one outside odafs_stat's enumerators is undefined behaviour.
inline void check(const odafs_stat& status, const std::string& what) {
  const auto raw = static_cast<int>(raw_enum(status));
  if (raw == ODAFS_ERR_BAD_STATEID) {
    fail(EIO, what +
                  " (the server had revoked this client's write delegation: its lease ran "
                  "out before the bytes came back, and they are lost)");
  }
  if (raw != ODAFS_OK) fail(errno_from_status(raw), what);
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
  Attr out;
  out.type = file_type(a.type);
  out.mode = a.mode;
  out.nlink = a.nlink;
  out.uid = a.uid;
  out.gid = a.gid;
  out.size = a.size;
  out.used = a.used;
  out.fileid = a.fileid;
  out.atime = timespec_of(a.atime);
  out.mtime = timespec_of(a.mtime);
  out.ctime = timespec_of(a.ctime);
  out.rdev = makedev(a.rdev.major, a.rdev.minor);
  return out;
}

inline void put_fh(char* dst, const Handle& h) { std::memcpy(dst, h.data(), h.size()); }
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

inline void check_name(const std::string& name) {
  if (name.size() > ODAFS_MAXNAMLEN) fail(ENAMETOOLONG, name.substr(0, 32) + "...");
  // A C string would end at the NUL: "a\0b" would name "a".
  if (name.find('\0') != std::string::npos) fail(EINVAL, "a name holding a NUL byte");
}

// The Error an rpc::RpcError becomes at the API: the same errno, and its what() as the
// message, after "context: " when a context is given. The one place that conversion is
// written: every catch of an RpcError in the client ends in throw error_from(e).
// Error's what() appends the errno's text itself, so the RpcError's bare message goes in.
inline Error error_from(const rpc::RpcError& e) { return Error(e.code().value(), e.message()); }
inline Error error_from(const rpc::RpcError& e, const std::string& context) {
  return Error(e.code().value(), context + ": " + e.message());
}

// Runs fn(), and again while it throws DELAY, as RetryPolicy says (client/retry_policy.h).
template <class Fn>
auto retry_delayed(int timeout_ms, Fn&& fn) -> decltype(fn()) {
  RetryPolicy policy(timeout_ms);
  for (;;) {
    try {
      return fn();
    } catch (const Error& e) {
      if (e.errno_value() != kDelayErrno || !policy.again_after_delay()) throw;
    }
  }
}

template <class Fn>
auto Client::with_mount(bool idempotent, Fn&& fn)
    -> decltype(fn(std::declval<const MountState&>())) {
  RetryPolicy policy(options_.timeout_ms);
  for (;;) {
    std::shared_ptr<const MountState> m = mount_state();
    try {
      return fn(*m);
    } catch (const Error& e) {
      if (e.errno_value() == kDelayErrno && policy.again_after_delay()) continue;
      throw;
    } catch (const rpc::RpcError& e) {
      bool lost = e.kind() == rpc::RpcError::Kind::kTransport && m->channel->broken();
      if (lost && policy.again_after_lost_connection(idempotent)) {
        ODAFS_LOG_WARN("odafs: connection lost (%s); reconnecting", e.what());
        continue;
      }
      throw error_from(e);
    }
  }
}

template <class Fn>
auto Client::again_after_restart(Fn&& fn) -> decltype(fn()) {
  const uint64_t before = mounts_.load(std::memory_order_acquire);
  RetryPolicy policy(options_.timeout_ms);
  for (;;) {
    try {
      return fn();
    } catch (const Error& e) {
      const bool remounted = mounts_.load(std::memory_order_acquire) != before;
      if (e.errno_value() != ESTALE || !remounted || !policy.again_after_stale()) throw;
    }
  }
}

template <class Fn>
auto Client::with_channel(bool idempotent, Fn&& fn) -> decltype(fn(std::declval<rpc::Channel&>())) {
  return with_mount(idempotent, [&](const MountState& m) { return fn(*m.channel); });
}

}  // namespace odafs
