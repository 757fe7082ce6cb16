// A reference: what a client holds to read one exported server cache block one-sided.
//
// It names a segment (block i of the memory the server gave its engine) for one client
// session: where (segment, generation, bounds), what (rights) and for whom (session),
// sealed by a capability that only the engine that issued it can check. How the capability
// is made, and what `token` holds, is the backend's business: the soft engine seals with a
// keyed MAC and leaves the token empty; an RDMA backend would put its rkey and remote
// address there. Clients treat both as opaque.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace odafs::ordma {

enum Rights : uint32_t { kRightRead = 1, kRightWrite = 2 };

inline constexpr size_t kCapabilityBytes = 16;
using Capability = std::array<unsigned char, kCapabilityBytes>;
inline constexpr size_t kTokenBytes = 16;
using BackendToken = std::array<unsigned char, kTokenBytes>;

struct Reference {
  uint32_t segment = 0;
  uint32_t generation = 0;
  uint32_t offset = 0;  // bounds inside the segment: [offset, offset + length)
  uint32_t length = 0;
  uint32_t rights = 0;
  uint64_t session = 0;  // the session the reference was issued to
  Capability capability{};
  BackendToken token{};  // the backend's own (an RDMA backend: rkey and remote address)
};

}  // namespace odafs::ordma
