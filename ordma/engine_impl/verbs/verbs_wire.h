// The verbs backend's bytes on the wire: what rides in rdma_cm's private data, the small
// messages that travel as SEND/RECV on the RC queue pair, and the backend token inside a
// Reference. Everything else is one-sided: RDMA READs by the client (reads of exported
// cache blocks and of generation words), RDMA WRITE/READ by the server (direct transfers).
//
//   client → engine  CONNECT REQUEST private data  ConnectRequest (magic, version)
//   engine → client  ACCEPT private data           ConnectAccept (magic, version, nonce,
//                                                  generation table address and rkey,
//                                                  segment count)
//   client → engine  SEND  PROOF      session id, proof over the nonce (session.h)
//   engine → client  SEND  WELCOME    status 0: the session is authenticated; windows may
//                                     now be bound to this queue pair
//   client → engine  SEND  REGISTER   buffer id, address, length, rkey (a direct buffer)
//   client → engine  SEND  UNREGISTER buffer id
//   engine → client  SEND  PUSH_DONE  tag, length: an RDMA WRITE into a registered buffer
//                                     landed (a direct read; ordered after the WRITE)
//   engine → client  SEND  PULL_DONE  tag, length: the engine RDMA READ the buffer (a
//                                     direct write)
//   engine → client  SEND  CANCEL     tag, fault: the direct call failed at the server
// Integers are big-endian; every message is one fixed-size Message.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/endian.h"
#include "ordma/reference.h"
#include "ordma/session.h"

namespace odafs::ordma::verbs {

inline constexpr uint32_t kMagic = 0x4f444156;  // "ODAV"
inline constexpr uint16_t kVersion = 1;

struct ConnectRequest {
  Be32 magic;
  Be16 version;
  Be16 zero;
};
static_assert(sizeof(ConnectRequest) == 8);

struct ConnectAccept {
  Be32 magic;
  Be16 version;
  Be16 zero;
  unsigned char nonce[kNonceBytes];
  Be64 generations_addr;  // the engine's generation words, one Be64 per segment
  Be32 generations_rkey;
  Be32 segments;
};
static_assert(sizeof(ConnectAccept) == 40);  // IB allows 196 bytes of accept private data

enum class MessageKind : uint32_t {
  kProof = 1,
  kWelcome = 2,
  kRegister = 3,
  kUnregister = 4,
  kPushDone = 5,
  kPullDone = 6,
  kCancel = 7,
};

struct Message {
  Be32 kind;
  Be32 tag;     // a direct call's tag
  Be32 id;      // a registered buffer's id
  Be32 value;   // a length, or a fault
  Be64 addr;    // a registered buffer's address
  Be64 length;  // a registered buffer's length
  Be32 rkey;    // a registered buffer's rkey
  Be32 zero;
  Be64 session;
  unsigned char proof[kProofBytes];
};
static_assert(sizeof(Message) == 64);

inline Message make_message(MessageKind kind) {
  Message m;
  std::memset(&m, 0, sizeof m);
  m.kind.set(static_cast<uint32_t>(kind));
  return m;
}

// The backend token in a Reference: where the window is and its key. The rest is zero.
struct Token {
  Be32 rkey;
  Be64 addr;  // the window's first byte in the engine's address space
  Be32 zero;
};
static_assert(sizeof(Token) == kTokenBytes);

inline void put_token(uint32_t rkey, uint64_t addr, Reference* ref) {
  Token t;
  std::memset(&t, 0, sizeof t);
  t.rkey.set(rkey);
  t.addr.set(addr);
  std::memcpy(ref->token.data(), &t, sizeof t);
}

inline Token get_token(const Reference& ref) {
  Token t;
  std::memcpy(&t, ref.token.data(), sizeof t);
  return t;
}

}  // namespace odafs::ordma::verbs
