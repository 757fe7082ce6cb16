// The client's half of a session: the proof it answers the engine's nonce with (the
// server's half, which issues and checks them, is session_authority.cc).
#include "ordma/session.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

namespace odafs::ordma {
namespace {
constexpr char kLabel[] = "odafs-engine-v1";
}

Proof prove_session(const SessionSecret& secret, const Nonce& nonce) {
  unsigned char msg[sizeof kLabel - 1 + kNonceBytes];
  std::memcpy(msg, kLabel, sizeof kLabel - 1);
  std::memcpy(msg + sizeof kLabel - 1, nonce.data(), nonce.size());
  unsigned char full[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Once per connection: the one-shot HMAC is fine here.
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg, sizeof msg, full, &len);
  Proof p;
  std::memcpy(p.data(), full, p.size());
  return p;
}

}  // namespace odafs::ordma
