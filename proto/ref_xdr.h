// References on the RPC wire: conversions between ordma::Reference and the protocol's
// odafs_ref (rpc/odafs_prot.x), shared by the server (READ, GETREFS) and the client.
#pragma once

#include <cstring>

#include "ordma/reference.h"
#include "proto/odafs_prot.h"

namespace odafs::ordma {

inline Reference reference_from_wire(const odafs_ref& w) {
  Reference r;
  r.segment = w.segment;
  r.generation = w.generation;
  r.offset = w.offset;
  r.length = w.length;
  r.rights = w.rights;
  r.session = w.session;
  std::memcpy(r.capability.data(), w.capability, r.capability.size());
  std::memcpy(r.token.data(), w.token, r.token.size());
  return r;
}

// `block` is the file block index the segment holds (client-side bookkeeping).
inline odafs_ref reference_to_wire(const Reference& r, uint64_t block) {
  odafs_ref w{};
  w.segment = r.segment;
  w.generation = r.generation;
  w.offset = r.offset;
  w.length = r.length;
  w.rights = r.rights;
  w.session = r.session;
  std::memcpy(w.capability, r.capability.data(), r.capability.size());
  std::memcpy(w.token, r.token.data(), r.token.size());
  w.block = block;
  return w;
}

}  // namespace odafs::ordma
