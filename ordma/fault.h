// Remote-access faults: why a one-sided access was refused. A fault returns no data; the
// client drops the reference and falls back to an RPC, whose reply brings a fresh one.
#pragma once

#include <cstdint>

namespace odafs::ordma {

enum class Fault : uint8_t {
  kNone = 0,
  kBadCapability = 1,    // the MAC does not match: forged, altered or truncated
  kStaleGeneration = 2,  // the segment was revoked and re-exported since the reference
  kRevoked = 3,          // the segment is not exported right now
  kLocked = 4,           // an RPC write is changing the segment
  kOutOfBounds = 5,      // offset/length outside the reference or the segment
  kUnknownSegment = 6,   // no such segment
  kWrongSession = 7,     // the reference was issued to another session
  kTransport = 8,        // the engine connection failed (client-side only)
  kBadRequest = 9,       // a malformed engine frame
};
inline constexpr int kFaultKinds = 10;

const char* fault_name(Fault f);

}  // namespace odafs::ordma
