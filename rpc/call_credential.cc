#include "rpc/call_credential.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace odafs::rpc {
namespace {

thread_local const CallCredential* t_current = nullptr;

}  // namespace

CallCredential::CallCredential(const CallerCred& id, std::string_view machine) : id_(id) {
  id_.auth_sys = true;
  id_.ngids = std::min<uint32_t>(id_.ngids, 16);
  char name[256];
  const size_t name_len = std::min<size_t>(machine.size(), 255);
  std::memcpy(name, machine.data(), name_len);
  name[name_len] = '\0';
  gid_t gids[16];
  for (uint32_t i = 0; i < id_.ngids; ++i) gids[i] = id_.gids[i];
  authunix_parms parms{};
  parms.aup_time = 0;
  parms.aup_machname = name;
  parms.aup_uid = id_.uid;
  parms.aup_gid = id_.gid;
  parms.aup_len = id_.ngids;
  parms.aup_gids = gids;
  XDR x;
  xdrmem_create(&x, body_, sizeof body_, XDR_ENCODE);
  // At most 4 + 4 + 256 + 4 + 4 + 4 + 16 * 4 = 340 bytes: it always fits MAX_AUTH_BYTES.
  length_ = xdr_authunix_parms(&x, &parms) ? xdr_getpos(&x) : 0;
  xdr_destroy(&x);
}

bool caller_permits(const CallerCred& caller, uint32_t mode, uint32_t owner, uint32_t group,
                    bool is_dir, int want) {
  if (caller.uid == 0) {
    if ((want & X_OK) == 0 || is_dir) return true;
    return (mode & (S_IXUSR | S_IXGRP | S_IXOTH)) != 0;
  }
  uint32_t bits;
  if (owner == caller.uid) {
    bits = (mode >> 6) & 7;
  } else {
    bool in_group = group == caller.gid;
    const uint32_t ngids = std::min<uint32_t>(caller.ngids, 16);
    for (uint32_t i = 0; i < ngids && !in_group; ++i) in_group = group == caller.gids[i];
    bits = in_group ? (mode >> 3) & 7 : mode & 7;
  }
  return (bits & static_cast<uint32_t>(want)) == static_cast<uint32_t>(want);
}

CallAs::CallAs(const CallCredential& cred) : previous_(t_current) { t_current = &cred; }

CallAs::~CallAs() { t_current = previous_; }

const CallCredential* CallAs::current() { return t_current; }

}  // namespace odafs::rpc
