// Engine sessions: who may present references on an engine connection.
//
// A client gets a session id and a session secret at MOUNT. The secret is derived from the
// id under a server key (secret = HMAC(key, id)), so the server keeps no per-session state
// and a restarted server knows none of the old sessions. An engine connection starts with
// a challenge: the engine sends a random nonce; the client answers with its session id and
// proof = HMAC(secret, "odafs-engine-v1" || nonce); a wrong proof closes the connection.
#pragma once

#include <array>
#include <cstdint>

#include "base/keyed_mac.h"

namespace odafs::ordma {

inline constexpr size_t kSessionSecretBytes = 32;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kProofBytes = 16;
using SessionSecret = std::array<unsigned char, kSessionSecretBytes>;
using Nonce = std::array<unsigned char, kNonceBytes>;
using Proof = std::array<unsigned char, kProofBytes>;

struct Session {
  uint64_t id = 0;
  SessionSecret secret{};
};

class SessionAuthority {
 public:
  SessionAuthority() = default;  // fresh random key
  // A new session with a random id. Thread-safe.
  Session issue() const;
  // Constant-time check of a client's answer to nonce. Thread-safe.
  bool verify(uint64_t session_id, const Nonce& nonce, const Proof& proof) const;

 private:
  SessionSecret secret_of(uint64_t id) const;
  KeyedMac mac_;
};

// Client side: the answer to the engine's challenge.
Proof prove_session(const SessionSecret& secret, const Nonce& nonce);

}  // namespace odafs::ordma
