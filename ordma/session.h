// Engine sessions: who may present references on an engine connection.
//
// A client gets a session id and a session secret at MOUNT. The secret is derived from the
// id under a server key (secret = HMAC(key, id)), so the server keeps no per-session state
// and a restarted server knows none of the old sessions. An engine connection starts with
// a challenge: the engine sends a random nonce; the client answers with its session id and
// proof = HMAC(secret, "odafs-engine-v1" || nonce); a wrong proof closes the connection.
//
// TLS-bound sessions (a mount over RPC-with-TLS): the id's top bit says so, and as the
// secret is derived from the id, no client can clear it. Such a session is accepted only on
// an engine connection that runs TLS, and its proof is over the nonce mixed with the TLS
// session's exporter (bind_to_tls), so a proof, or the secret itself, is good on that one
// TLS connection only: never in the clear, never relayed to another.
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

inline constexpr uint64_t kTlsBoundSession = uint64_t{1} << 63;
inline bool tls_bound(uint64_t session_id) { return (session_id & kTlsBoundSession) != 0; }
// The exporter label (RFC 8446 section 7.5) both ends derive the binding from.
inline constexpr char kEngineExporterLabel[] = "EXPORTER-odafs-engine-session";
// The nonce a TLS connection's proof is over: nonce XOR the first bytes of its exporter.
inline Nonce bind_to_tls(const Nonce& nonce, const unsigned char* exporter) {
  Nonce out;
  for (size_t i = 0; i < out.size(); ++i) out[i] = nonce[i] ^ exporter[i];
  return out;
}

class SessionAuthority {
 public:
  SessionAuthority() = default;  // fresh random key
  // A new session with a random id, TLS-bound if asked (kTlsBoundSession). Thread-safe.
  Session issue(bool tls_bound = false) const;
  // Constant-time check of a client's answer to nonce. Thread-safe.
  bool verify(uint64_t session_id, const Nonce& nonce, const Proof& proof) const;

 private:
  SessionSecret secret_of(uint64_t id) const;
  KeyedMac mac_;
};

// Client side: the answer to the engine's challenge.
Proof prove_session(const SessionSecret& secret, const Nonce& nonce);

}  // namespace odafs::ordma
