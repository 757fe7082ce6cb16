#include "tests/support/xdr_util.h"

#include <arpa/inet.h>

#include "proto/odafs_prot.h"

namespace odafs::test {

void Wire::u32(uint32_t v) {
  uint32_t be = htonl(v);
  bytes(&be, 4);
}

void Wire::u64(uint64_t v) {
  u32(static_cast<uint32_t>(v >> 32));
  u32(static_cast<uint32_t>(v));
}

void Wire::bytes(const void* p, size_t len) {
  buf_.insert(buf_.end(), static_cast<const char*>(p), static_cast<const char*>(p) + len);
}

void Wire::string(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  bytes(s.data(), s.size());
  buf_.resize(buf_.size() + ((4 - s.size() % 4) % 4), '\0');
}

uint32_t be32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

void fill_fh(char* fh, char seed) {
  for (int i = 0; i < ODAFS_FHSIZE; ++i) fh[i] = static_cast<char>(seed + i * 7);
}

}  // namespace odafs::test
