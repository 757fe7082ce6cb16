#include "ordma/engine_impl/soft/capability.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace odafs::ordma {
namespace {

unsigned char* put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) *p++ = static_cast<unsigned char>(v >> (24 - 8 * i));
  return p;
}
unsigned char* put64(unsigned char* p, uint64_t v) {
  return put32(put32(p, static_cast<uint32_t>(v >> 32)), static_cast<uint32_t>(v));
}

}  // namespace

CapabilityAuthority::CapabilityAuthority() {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&epoch_), sizeof epoch_) != 1) {
    throw std::runtime_error("RAND_bytes failed: no server epoch");
  }
}

void CapabilityAuthority::tag(const Reference& r, unsigned char* out) const {
  unsigned char msg[4 * 5 + 8 + 8];
  unsigned char* p = put32(msg, r.segment);
  p = put32(p, r.generation);
  p = put32(p, r.offset);
  p = put32(p, r.length);
  p = put32(p, r.rights);
  p = put64(p, epoch_);
  put64(p, r.session);
  mac_.compute(msg, sizeof msg, out, kCapabilityBytes);
}

void CapabilityAuthority::seal(Reference& r) const { tag(r, r.capability.data()); }

Fault CapabilityAuthority::check(const Reference& r, uint64_t presenting_session) const {
  if (r.session != presenting_session) return Fault::kWrongSession;
  Capability expect;
  tag(r, expect.data());
  if (CRYPTO_memcmp(expect.data(), r.capability.data(), kCapabilityBytes) != 0) {
    return Fault::kBadCapability;
  }
  return Fault::kNone;
}

}  // namespace odafs::ordma
