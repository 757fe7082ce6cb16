// HMAC-SHA-256 under one secret key, cheap enough for every request.
//
// OpenSSL's one-shot HMAC() sets up and tears down a keyed context per call (~2.7 us here);
// this class keeps one keyed context per thread and re-arms it with the stored key
// (~0.4 us, no allocation after a thread's first call). File handles use it now;
// capabilities for one-sided reads will too.
//
// Thread-safety: compute() and verify() may be called from any number of threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace odafs {

class KeyedMac {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kMaxTagBytes = 32;

  // Draws a fresh random key. Throws std::runtime_error without entropy.
  KeyedMac();
  explicit KeyedMac(const std::array<unsigned char, kKeyBytes>& key);
  ~KeyedMac();
  KeyedMac(const KeyedMac&) = delete;
  KeyedMac& operator=(const KeyedMac&) = delete;

  // Writes the first tag_len (<= 32) bytes of HMAC-SHA-256(key, data) to tag.
  void compute(const void* data, size_t len, unsigned char* tag, size_t tag_len) const;
  // Constant-time comparison of tag against the MAC of data.
  bool verify(const void* data, size_t len, const unsigned char* tag, size_t tag_len) const;

 private:
  std::array<unsigned char, kKeyBytes> key_;
  uint64_t id_;  // tells per-thread contexts which key they were armed with
};

}  // namespace odafs
