// The soft engine's frames: fixed-size, big-endian, tagged so that many reads are in
// flight on one connection (the stand-in for an RDMA read request/response).
//
//   engine → client, on connect   GREETING  24 bytes  magic "ODAE", version, 0, nonce[16]
//   client → engine               HELLO     32 bytes  magic, version, 0, session u64, proof[16]
//   engine → client               WELCOME   24 bytes  magic, status u8 (0), flags u8, 0[2],
//                                                      ring token[16]: with flag 1 the engine
//                                                      offers local rings (local_ring.h) at
//                                                      the abstract socket the token names
//   client → engine               READ      64 bytes  see ReadRequest
//   engine → client               RESPONSE  12 bytes  tag u32, fault u8, kind u8 (0), 0[2],
//                                                      length u32, then `length` data bytes
//                                                      (0 on fault)
//   engine → client               PUT       20 bytes  tag u32, 0 u8, kind u8 (1), 0[2], length
//                                                      u32, buffer u32, offset u32, then the
//                                                      data: a server-initiated write into a
//                                                      buffer the client registered (direct
//                                                      read); tag names the client's call.
//                                                      A PUT with a fault and no data
//                                                      cancels the call (the RPC failed).
//   engine → client               GET       20 bytes  like PUT with kind u8 (2) and no data:
//                                                      the server asks for `length` bytes at
//                                                      `offset` of registered `buffer`
//                                                      (direct write)
//   client → engine               DATA      16 bytes  type u8 (3), fault u8, 0 u16, tag u32,
//                                                      length u32, 0 u32, then the bytes: the
//                                                      answer to a GET
// A wrong proof, a bad magic or a frame of unknown type closes the connection.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/endian.h"
#include "ordma/engine_impl/soft/capability.h"
#include "ordma/session.h"

namespace odafs::ordma::wire {

inline constexpr uint32_t kMagic = 0x4f444145;  // "ODAE"
inline constexpr uint16_t kVersion = 2;
inline constexpr uint8_t kWelcomeOffersRings = 1;  // WELCOME flags
// TLS on the engine's TCP connection: the GREETING (clear) says the engine offers it; a
// client that wants it answers with a HELLO flagged kHelloStartTls, and both sides start
// TLS 1.3 at once (the client's ClientHello next). Inside TLS the client sends its real
// HELLO, whose proof is over the GREETING's nonce bound to the TLS session
// (ordma::bind_to_tls); WELCOME and everything after travel inside TLS.
inline constexpr uint16_t kGreetingOffersTls = 1;
inline constexpr uint16_t kHelloStartTls = 1;
inline constexpr uint8_t kTypeRead = 1;
inline constexpr uint8_t kKindResponse = 0;
inline constexpr uint8_t kKindPut = 1;
inline constexpr uint8_t kKindGet = 2;
inline constexpr uint8_t kTypeData = 3;

// ---- The frames' layouts. Only this header reads or writes their bytes.

struct GreetingFrame {
  Be32 magic;
  Be16 version;
  Be16 flags;  // kGreetingOffersTls
  unsigned char nonce[16];
};
struct HelloFrame {
  Be32 magic;
  Be16 version;
  Be16 flags;  // kHelloStartTls: not a proof, but "TLS now" (session and proof zero)
  Be64 session;
  unsigned char proof[16];
};
struct WelcomeFrame {
  Be32 magic;
  uint8_t status;
  uint8_t flags;
  Be16 zero;
  unsigned char ring_token[16];
};
struct ReadFrame {
  uint8_t type;  // kTypeRead
  uint8_t zero;
  Be16 zero16;
  Be32 tag;
  Be32 segment;
  Be32 generation;
  Be32 ref_offset;
  Be32 ref_length;
  Be32 rights;
  Be64 session;
  unsigned char capability[kCapabilityBytes];
  Be32 offset;  // what to read, within the segment
  Be32 length;
  Be32 zero32;
};
struct ResponseFrame {  // RESPONSE, and the head of PUT and GET
  Be32 tag;
  uint8_t fault;
  uint8_t kind;  // kKindResponse, kKindPut, kKindGet
  Be16 zero;
  Be32 length;
};
struct TransferExtra {  // follows the head of PUT and GET
  Be32 buffer;
  Be32 offset;
};
struct DataFrame {
  uint8_t type;  // kTypeData
  uint8_t fault;
  Be16 zero;
  Be32 tag;
  Be32 length;
  Be32 zero32;
};

inline constexpr size_t kGreetingBytes = sizeof(GreetingFrame);
inline constexpr size_t kHelloBytes = sizeof(HelloFrame);
inline constexpr size_t kWelcomeBytes = sizeof(WelcomeFrame);
inline constexpr size_t kReadRequestBytes = sizeof(ReadFrame);
inline constexpr size_t kResponseBytes = sizeof(ResponseFrame);
inline constexpr size_t kPutExtraBytes = sizeof(TransferExtra);
inline constexpr size_t kDataHeaderBytes = sizeof(DataFrame);
static_assert(kGreetingBytes == 24 && kHelloBytes == 32 && kWelcomeBytes == 24);
static_assert(kReadRequestBytes == 64 && kResponseBytes == 12 && kPutExtraBytes == 8);
static_assert(kDataHeaderBytes == 16);

// ---- What the frames carry, and their one encoder and decoder each.

struct ReadRequest {
  uint32_t tag = 0;
  Reference ref;        // segment, generation, bounds, rights, session, capability
  uint32_t offset = 0;  // within the segment
  uint32_t length = 0;
};

struct Response {
  uint32_t tag = 0;
  Fault fault = Fault::kNone;
  uint32_t length = 0;
};

// PUT (server-initiated write, or with a fault and no data a cancel) and GET (a request
// for the client's bytes): a Response head with kind, then where in which buffer.
struct Transfer {
  uint32_t tag = 0;
  Fault fault = Fault::kNone;
  uint8_t kind = kKindPut;
  uint32_t length = 0;
  uint32_t buffer = 0;
  uint32_t offset = 0;
};

// DATA: the client's answer to a GET, `length` bytes follow.
struct Data {
  uint32_t tag = 0;
  Fault fault = Fault::kNone;
  uint32_t length = 0;
};

template <class Frame>
inline void store(const Frame& f, unsigned char* out) {
  std::memcpy(out, &f, sizeof f);
}
template <class Frame>
inline Frame load(const unsigned char* in) {
  Frame f;
  std::memcpy(&f, in, sizeof f);
  return f;
}

inline void encode_greeting(const Nonce& nonce, uint16_t flags, unsigned char* out) {
  GreetingFrame f{};
  f.magic.set(kMagic);
  f.version.set(kVersion);
  f.flags.set(flags);
  std::memcpy(f.nonce, nonce.data(), nonce.size());
  store(f, out);
}
// False if the bytes are not a GREETING of this version; else *nonce is its nonce and
// *flags its flags.
inline bool decode_greeting(const unsigned char* in, Nonce* nonce, uint16_t* flags) {
  auto f = load<GreetingFrame>(in);
  if (f.magic.get() != kMagic || f.version.get() != kVersion) return false;
  std::memcpy(nonce->data(), f.nonce, nonce->size());
  *flags = f.flags.get();
  return true;
}

// A HELLO: the session and its proof, or (flags kHelloStartTls) the ask for TLS.
inline void encode_hello(uint64_t session, const Proof& proof, uint16_t flags, unsigned char* out) {
  HelloFrame f{};
  f.magic.set(kMagic);
  f.version.set(kVersion);
  f.flags.set(flags);
  f.session.set(session);
  std::memcpy(f.proof, proof.data(), proof.size());
  store(f, out);
}
// False for a bad magic or version; else the session and proof it claims, and its flags.
inline bool decode_hello(const unsigned char* in, uint64_t* session, Proof* proof,
                         uint16_t* flags) {
  auto f = load<HelloFrame>(in);
  if (f.magic.get() != kMagic || f.version.get() != kVersion) return false;
  *session = f.session.get();
  std::memcpy(proof->data(), f.proof, proof->size());
  *flags = f.flags.get();
  return true;
}

// WELCOME: status 0, flags, the ring token (zeros without rings).
inline void encode_welcome(uint8_t flags, const unsigned char* token16, unsigned char* out) {
  WelcomeFrame f{};
  f.magic.set(kMagic);
  f.flags = flags;
  if (token16 != nullptr) std::memcpy(f.ring_token, token16, sizeof f.ring_token);
  store(f, out);
}
inline bool welcome_valid(const unsigned char* in) {
  return load<WelcomeFrame>(in).magic.get() == kMagic;
}
// True when a WELCOME offers local rings; their token is then copied to token16.
inline bool welcome_offers_rings(const unsigned char* in, unsigned char* token16) {
  auto f = load<WelcomeFrame>(in);
  if ((f.flags & kWelcomeOffersRings) == 0) return false;
  std::memcpy(token16, f.ring_token, sizeof f.ring_token);
  return true;
}

inline void encode(const ReadRequest& r, unsigned char* out) {
  ReadFrame f{};
  f.type = kTypeRead;
  f.tag.set(r.tag);
  f.segment.set(r.ref.segment);
  f.generation.set(r.ref.generation);
  f.ref_offset.set(r.ref.offset);
  f.ref_length.set(r.ref.length);
  f.rights.set(r.ref.rights);
  f.session.set(r.ref.session);
  std::memcpy(f.capability, r.ref.capability.data(), kCapabilityBytes);
  f.offset.set(r.offset);
  f.length.set(r.length);
  store(f, out);
}

// Returns false for an unknown type or non-zero reserved bytes.
inline bool decode(const unsigned char* in, ReadRequest* r) {
  auto f = load<ReadFrame>(in);
  if (f.type != kTypeRead || f.zero != 0 || f.zero16.get() != 0 || f.zero32.get() != 0) {
    return false;
  }
  r->tag = f.tag.get();
  r->ref = Reference{};
  r->ref.segment = f.segment.get();
  r->ref.generation = f.generation.get();
  r->ref.offset = f.ref_offset.get();
  r->ref.length = f.ref_length.get();
  r->ref.rights = f.rights.get();
  r->ref.session = f.session.get();
  std::memcpy(r->ref.capability.data(), f.capability, kCapabilityBytes);
  r->offset = f.offset.get();
  r->length = f.length.get();
  return true;
}

inline void encode(const Response& r, unsigned char* out) {
  ResponseFrame f{};
  f.tag.set(r.tag);
  f.fault = static_cast<uint8_t>(r.fault);
  f.kind = kKindResponse;
  f.length.set(r.length);
  store(f, out);
}

// The kind of a frame the engine sent: kKindResponse, kKindPut or kKindGet.
inline uint8_t kind_of(const unsigned char* head) { return load<ResponseFrame>(head).kind; }

inline void decode(const unsigned char* in, Response* r) {
  auto f = load<ResponseFrame>(in);
  r->tag = f.tag.get();
  r->fault = static_cast<Fault>(f.fault);
  r->length = f.length.get();
}

// kResponseBytes + kPutExtraBytes bytes.
inline void encode(const Transfer& t, unsigned char* out) {
  ResponseFrame head{};
  head.tag.set(t.tag);
  head.fault = static_cast<uint8_t>(t.fault);
  head.kind = t.kind;
  head.length.set(t.length);
  TransferExtra extra{};
  extra.buffer.set(t.buffer);
  extra.offset.set(t.offset);
  store(head, out);
  store(extra, out + kResponseBytes);
}
// The extra of a PUT or GET whose head was decoded into `head`.
inline Transfer decode_transfer(const Response& head, uint8_t kind, const unsigned char* extra) {
  auto e = load<TransferExtra>(extra);
  return Transfer{head.tag, head.fault, kind, head.length, e.buffer.get(), e.offset.get()};
}

inline void encode(const Data& d, unsigned char* out) {
  DataFrame f{};
  f.type = kTypeData;
  f.fault = static_cast<uint8_t>(d.fault);
  f.tag.set(d.tag);
  f.length.set(d.length);
  store(f, out);
}
inline Data decode_data(const unsigned char* in) {
  auto f = load<DataFrame>(in);
  return Data{f.tag.get(), static_cast<Fault>(f.fault), f.length.get()};
}

}  // namespace odafs::ordma::wire
