// Test support: encoding and decoding XDR into memory buffers, and hand-built XDR for
// inputs the encoders refuse to produce.
#pragma once

#include <doctest/doctest.h>
#include <rpc/rpc.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "rpc/xdr_util.h"

namespace odafs::test {

// Encodes obj with fn into a fresh buffer; returns the encoded bytes (fails the test if the
// encoder refuses).
template <class T>
std::vector<char> encode(bool_t (*fn)(XDR*, T*), T* obj, size_t capacity = 1 << 16) {
  std::vector<char> buf(capacity);
  XDR x;
  xdrmem_create(&x, buf.data(), static_cast<u_int>(buf.size()), XDR_ENCODE);
  bool ok = fn(&x, obj);
  size_t len = xdr_getpos(&x);
  xdr_destroy(&x);
  REQUIRE(ok);
  buf.resize(len);
  return buf;
}

// Decodes buf[0, len) into *obj (zeroed first); returns whether the decoder accepted it.
// *consumed, if given, is how many bytes it read.
template <class T>
bool decode(bool_t (*fn)(XDR*, T*), const char* data, size_t len, T* obj,
            size_t* consumed = nullptr) {
  std::memset(obj, 0, sizeof *obj);
  XDR x;
  xdrmem_create(&x, const_cast<char*>(data), static_cast<u_int>(len), XDR_DECODE);
  bool ok = fn(&x, obj);
  if (consumed != nullptr) *consumed = xdr_getpos(&x);
  xdr_destroy(&x);
  return ok;
}

// Whether fn encodes obj (into a 64 KiB buffer).
template <class T>
bool encodes(bool_t (*fn)(XDR*, T*), T* obj) {
  std::vector<char> buf(1 << 16);
  XDR x;
  xdrmem_create(&x, buf.data(), static_cast<u_int>(buf.size()), XDR_ENCODE);
  bool ok = fn(&x, obj);
  xdr_destroy(&x);
  return ok;
}

// Frees what decoding obj with fn allocated.
template <class T>
void free_xdr(bool_t (*fn)(XDR*, T*), T* obj) {
  xdr_free(rpc::to_xdrproc(fn), reinterpret_cast<char*>(obj));
}

// Hand-built XDR for inputs the encoders refuse to produce.
class Wire {
 public:
  void u32(uint32_t v);
  void u64(uint64_t v);
  void bytes(const void* p, size_t len);
  // Length word, bytes, zero padding to 4.
  void string(const std::string& s);
  char* data() { return buf_.data(); }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<char> buf_;
};

// The big-endian 32-bit word at p.
uint32_t be32(const char* p);

// Fills a file handle (ODAFS_FHSIZE bytes) with a pattern that depends on seed.
void fill_fh(char* fh, char seed);

}  // namespace odafs::test
