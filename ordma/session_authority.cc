// The server's half of sessions: issuing them and checking a client's proof (the proof
// itself is session.cc's, which both sides link).
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <stdexcept>

#include "ordma/session.h"

namespace odafs::ordma {

SessionSecret SessionAuthority::secret_of(uint64_t id) const {
  unsigned char msg[8];
  for (int i = 0; i < 8; ++i) msg[i] = static_cast<unsigned char>(id >> (56 - 8 * i));
  SessionSecret s;
  mac_.compute(msg, sizeof msg, s.data(), s.size());
  return s;
}

Session SessionAuthority::issue(bool tls_bound) const {
  Session s;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&s.id), sizeof s.id) != 1) {
    throw std::runtime_error("RAND_bytes failed: no session id");
  }
  s.id = tls_bound ? s.id | kTlsBoundSession : s.id & ~kTlsBoundSession;
  if (s.id == 0) s.id = 1;  // 0 means "no session" to clients
  s.secret = secret_of(s.id);
  return s;
}

bool SessionAuthority::verify(uint64_t session_id, const Nonce& nonce, const Proof& proof) const {
  Proof expect = prove_session(secret_of(session_id), nonce);
  return CRYPTO_memcmp(expect.data(), proof.data(), proof.size()) == 0;
}

}  // namespace odafs::ordma
