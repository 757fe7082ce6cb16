// Range checks for the protocol's enums as they arrive.
//
// rpcgen's enum decoders accept any 32-bit value, and reading an enum object that holds a
// value outside its enumerators is undefined behaviour (UBSan reports it; a compiler may
// assume it never happens). A procedure checks each enum argument with valid() before it
// reads it; valid() looks at the raw bits only.
#pragma once

#include <cstdint>
#include <cstring>

#include "proto/odafs_prot.h"

namespace odafs {

template <class E>
inline uint32_t raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(uint32_t), "XDR enums are 32-bit");
  uint32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// WRITE's offset meaning "at the end of the file": the server appends under the file's
// lock, so appends from many clients never overwrite each other (O_APPEND), and the
// reply's size after is where the bytes end.
constexpr uint64_t kAppendOffset = UINT64_MAX;

inline bool valid(const odafs_stable_how& v) { return raw_enum(v) <= ODAFS_FILE_SYNC; }
inline bool valid(const odafs_createmode& v) { return raw_enum(v) <= ODAFS_CREATE_EXCLUSIVE; }
inline bool valid(const odafs_time_how& v) { return raw_enum(v) <= ODAFS_TIME_CLIENT; }

}  // namespace odafs
