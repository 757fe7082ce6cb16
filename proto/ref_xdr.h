// References on the RPC wire: conversions between ordma::Reference and the protocol's
// odafs_ref (rpc/odafs_prot.x), shared by the server (READ, GETREFS) and the client.
#pragma once

#include <cstring>

#include "ordma/reference.h"
#include "proto/odafs_prot.h"

namespace odafs::ordma {

// The fields a Reference and an odafs_ref share (same names both sides), copied one way
// or the other: the one list of them.
template <class To, class From>
void copy_reference_fields(To& to, const From& from) {
  to.segment = from.segment;
  to.generation = from.generation;
  to.offset = from.offset;
  to.length = from.length;
  to.rights = from.rights;
  to.session = from.session;
  static_assert(sizeof to.capability == sizeof from.capability &&
                sizeof to.token == sizeof from.token);
  std::memcpy(&to.capability, &from.capability, sizeof to.capability);
  std::memcpy(&to.token, &from.token, sizeof to.token);
}

inline Reference reference_from_wire(const odafs_ref& w) {
  Reference r;
  copy_reference_fields(r, w);
  return r;
}

// `block` is the file block index the segment holds (client-side bookkeeping).
inline odafs_ref reference_to_wire(const Reference& r, uint64_t block) {
  odafs_ref w{};
  copy_reference_fields(w, r);
  w.block = block;
  return w;
}

}  // namespace odafs::ordma
