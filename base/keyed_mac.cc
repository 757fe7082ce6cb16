#include "base/keyed_mac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

namespace odafs {
namespace {

std::atomic<uint64_t> g_next_id{1};

// One HMAC context per thread, armed with the key of the KeyedMac that used it last.
struct ThreadContext {
  EVP_MAC_CTX* ctx = nullptr;
  uint64_t armed_for = 0;
  ~ThreadContext() { EVP_MAC_CTX_free(ctx); }
};

EVP_MAC_CTX* context_for(uint64_t id, const unsigned char* key, size_t key_len) {
  thread_local ThreadContext tc;
  if (tc.ctx == nullptr) {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (mac == nullptr) throw std::runtime_error("OpenSSL has no HMAC");
    tc.ctx = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);  // the context keeps its own reference
    if (tc.ctx == nullptr) throw std::runtime_error("EVP_MAC_CTX_new failed");
  }
  if (tc.armed_for != id) {
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    if (EVP_MAC_init(tc.ctx, key, key_len, params) != 1) {
      throw std::runtime_error("EVP_MAC_init failed");
    }
    tc.armed_for = id;
  } else if (EVP_MAC_init(tc.ctx, nullptr, 0, nullptr) != 1) {  // same key, fresh state
    throw std::runtime_error("EVP_MAC_init failed");
  }
  return tc.ctx;
}

}  // namespace

KeyedMac::KeyedMac() : id_(g_next_id.fetch_add(1)) {
  if (RAND_bytes(key_.data(), static_cast<int>(key_.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed: no entropy for a MAC key");
  }
}

KeyedMac::KeyedMac(const std::array<unsigned char, kKeyBytes>& key)
    : key_(key), id_(g_next_id.fetch_add(1)) {}

KeyedMac::~KeyedMac() { OPENSSL_cleanse(key_.data(), key_.size()); }

void KeyedMac::compute(const void* data, size_t len, unsigned char* tag, size_t tag_len) const {
  EVP_MAC_CTX* ctx = context_for(id_, key_.data(), key_.size());
  unsigned char full[kMaxTagBytes];
  size_t full_len = 0;
  if (EVP_MAC_update(ctx, static_cast<const unsigned char*>(data), len) != 1 ||
      EVP_MAC_final(ctx, full, &full_len, sizeof full) != 1) {
    throw std::runtime_error("HMAC computation failed");
  }
  std::memcpy(tag, full, std::min(tag_len, full_len));
}

bool KeyedMac::verify(const void* data, size_t len, const unsigned char* tag,
                      size_t tag_len) const {
  unsigned char expect[kMaxTagBytes];
  if (tag_len > sizeof expect) return false;
  compute(data, len, expect, tag_len);
  return CRYPTO_memcmp(expect, tag, tag_len) == 0;
}

}  // namespace odafs
