// The soft engine's capabilities: how it seals and checks references (ordma/reference.h).
//
// The capability = HMAC-SHA-256 over the reference's segment, generation, bounds, rights
// and session and the server's epoch, under a key drawn at server start, truncated to
// 128 bits. The engine recomputes and compares it, in constant
// time, on every one-sided access; nothing else about the client is trusted.
#pragma once

#include <cstdint>

#include "base/keyed_mac.h"
#include "ordma/fault.h"
#include "ordma/reference.h"

namespace odafs::ordma {

class CapabilityAuthority {
 public:
  // Draws a fresh key and epoch: a restarted server refuses every old reference.
  CapabilityAuthority();
  uint64_t epoch() const { return epoch_; }

  // Fills r.capability for r's other fields.
  void seal(Reference& r) const;

  // kNone if r was sealed by this authority and is presented by r.session's owner;
  // kWrongSession if presented on another session; kBadCapability otherwise.
  // Constant time in the capability's bytes.
  Fault check(const Reference& r, uint64_t presenting_session) const;

 private:
  void tag(const Reference& r, unsigned char* out) const;
  KeyedMac mac_;
  uint64_t epoch_;
};

}  // namespace odafs::ordma
