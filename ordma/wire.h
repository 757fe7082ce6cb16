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

#include "ordma/capability.h"
#include "ordma/session.h"

namespace odafs::ordma::wire {

inline constexpr uint32_t kMagic = 0x4f444145;  // "ODAE"
inline constexpr uint16_t kVersion = 2;
inline constexpr size_t kGreetingBytes = 24;
inline constexpr size_t kHelloBytes = 32;
inline constexpr size_t kWelcomeBytes = 24;
inline constexpr uint8_t kWelcomeOffersRings = 1;  // WELCOME flags
inline constexpr size_t kReadRequestBytes = 64;
inline constexpr size_t kResponseBytes = 12;
inline constexpr uint8_t kTypeRead = 1;
inline constexpr uint8_t kKindResponse = 0;
inline constexpr uint8_t kKindPut = 1;
inline constexpr uint8_t kKindGet = 2;
inline constexpr uint8_t kTypeData = 3;
inline constexpr size_t kDataHeaderBytes = 16;
inline constexpr size_t kPutExtraBytes = 8;  // buffer u32, offset u32

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

inline void put16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v >> 8);
  p[1] = static_cast<unsigned char>(v);
}
inline void put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}
inline void put64(unsigned char* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}
inline uint16_t get16(const unsigned char* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline uint32_t get32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
inline uint64_t get64(const unsigned char* p) { return (uint64_t{get32(p)} << 32) | get32(p + 4); }

// GREETING carries the engine's nonce at bytes 8..23.
inline Nonce greeting_nonce(const unsigned char* greeting) {
  Nonce n;
  std::memcpy(n.data(), greeting + 8, n.size());
  return n;
}

// HELLO: magic, version, 0, session u64, proof[16].
inline void encode_hello(uint64_t session, const Proof& proof, unsigned char* out) {
  std::memset(out, 0, kHelloBytes);
  put32(out, kMagic);
  put16(out + 4, kVersion);
  put64(out + 8, session);
  std::memcpy(out + 16, proof.data(), proof.size());
}

// WELCOME: magic, status 0, flags, 0[2], token[16] (zeros without rings).
inline void encode_welcome(uint8_t flags, const unsigned char* token16, unsigned char* out) {
  std::memset(out, 0, kWelcomeBytes);
  put32(out, kMagic);
  out[5] = flags;
  if (token16 != nullptr) std::memcpy(out + 8, token16, 16);
}

// True when a WELCOME offers local rings; their token is then copied to token16.
inline bool welcome_offers_rings(const unsigned char* in, unsigned char* token16) {
  if ((in[5] & kWelcomeOffersRings) == 0) return false;
  std::memcpy(token16, in + 8, 16);
  return true;
}

// Layout of READ: type u8, 0 u8, 0 u16, tag u32, segment u32, generation u32, ref offset
// u32, ref length u32, rights u32, session u64, capability[16], offset u32, length u32.
inline void encode(const ReadRequest& r, unsigned char* p) {
  p[0] = kTypeRead;
  p[1] = 0;
  put16(p + 2, 0);
  put32(p + 4, r.tag);
  put32(p + 8, r.ref.segment);
  put32(p + 12, r.ref.generation);
  put32(p + 16, r.ref.offset);
  put32(p + 20, r.ref.length);
  put32(p + 24, r.ref.rights);
  put64(p + 28, r.ref.session);
  std::memcpy(p + 36, r.ref.capability.data(), kCapabilityBytes);
  put32(p + 52, r.offset);
  put32(p + 56, r.length);
  put32(p + 60, 0);
}

// Returns false for an unknown type or non-zero reserved bytes.
inline bool decode(const unsigned char* p, ReadRequest* r) {
  if (p[0] != kTypeRead || p[1] != 0 || get16(p + 2) != 0 || get32(p + 60) != 0) return false;
  r->tag = get32(p + 4);
  r->ref.segment = get32(p + 8);
  r->ref.generation = get32(p + 12);
  r->ref.offset = get32(p + 16);
  r->ref.length = get32(p + 20);
  r->ref.rights = get32(p + 24);
  r->ref.session = get64(p + 28);
  std::memcpy(r->ref.capability.data(), p + 36, kCapabilityBytes);
  r->offset = get32(p + 52);
  r->length = get32(p + 56);
  return true;
}

inline void encode(const Response& r, unsigned char* p) {
  put32(p, r.tag);
  p[4] = static_cast<unsigned char>(r.fault);
  p[5] = p[6] = p[7] = 0;
  put32(p + 8, r.length);
}

inline uint8_t kind_of(const unsigned char* response) { return response[5]; }

inline void decode(const unsigned char* p, Response* r) {
  r->tag = get32(p);
  r->fault = static_cast<Fault>(p[4]);
  r->length = get32(p + 8);
}

}  // namespace odafs::ordma::wire
