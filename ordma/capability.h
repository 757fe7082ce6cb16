// References and the capabilities that protect them.
//
// A reference names one exported segment (a server cache block) for one client session:
// where (segment, generation, bounds), what (rights) and for whom (session), sealed by a
// capability = HMAC-SHA-256 over all of it and the server's epoch, under a key drawn at
// server start, truncated to 128 bits. The engine recomputes and compares it, in constant
// time, on every one-sided access; nothing else about the client is trusted.
#pragma once

#include <array>
#include <cstdint>

#include "ordma/fault.h"
#include "ordma/keyed_mac.h"

namespace odafs::ordma {

enum Rights : uint32_t { kRightRead = 1, kRightWrite = 2 };

inline constexpr size_t kCapabilityBytes = 16;
using Capability = std::array<unsigned char, kCapabilityBytes>;

struct Reference {
  uint32_t segment = 0;
  uint32_t generation = 0;
  uint32_t offset = 0;  // bounds inside the segment: [offset, offset + length)
  uint32_t length = 0;
  uint32_t rights = 0;
  uint64_t session = 0;  // the session the reference was issued to
  Capability capability{};
};

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
