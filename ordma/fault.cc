#include "ordma/fault.h"

namespace odafs::ordma {

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "none";
    case Fault::kBadCapability:
      return "bad_capability";
    case Fault::kStaleGeneration:
      return "stale_generation";
    case Fault::kRevoked:
      return "revoked";
    case Fault::kLocked:
      return "locked";
    case Fault::kOutOfBounds:
      return "out_of_bounds";
    case Fault::kUnknownSegment:
      return "unknown_segment";
    case Fault::kWrongSession:
      return "wrong_session";
    case Fault::kTransport:
      return "transport";
    case Fault::kBadRequest:
      return "bad_request";
  }
  return "unknown";
}

}  // namespace odafs::ordma
