#include "ordma/session.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

namespace odafs::ordma {
namespace {
constexpr char kLabel[] = "odafs-engine-v1";
}

SessionSecret SessionAuthority::secret_of(uint64_t id) const {
  unsigned char msg[8];
  for (int i = 0; i < 8; ++i) msg[i] = static_cast<unsigned char>(id >> (56 - 8 * i));
  SessionSecret s;
  mac_.compute(msg, sizeof msg, s.data(), s.size());
  return s;
}

Session SessionAuthority::issue() const {
  Session s;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&s.id), sizeof s.id) != 1) {
    throw std::runtime_error("RAND_bytes failed: no session id");
  }
  s.secret = secret_of(s.id);
  return s;
}

bool SessionAuthority::verify(uint64_t session_id, const Nonce& nonce, const Proof& proof) const {
  Proof expect = prove_session(secret_of(session_id), nonce);
  return CRYPTO_memcmp(expect.data(), proof.data(), proof.size()) == 0;
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
