// Test support: small reads and counters through the client library. No doctest.
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <string>

#include "client/client.h"

namespace odafs::test {

// Up to len bytes of f from off (fewer at its end).
inline std::string read_all(File& f, size_t len, uint64_t off = 0) {
  std::string s(len, '\0');
  s.resize(f.pread(s.data(), len, off));
  return s;
}

// Up to len bytes of the file at path, opened read-only for the read.
inline std::string read_all(Client& fs, const std::string& path, size_t len) {
  File f = fs.open(path, O_RDONLY);
  return read_all(f, len);
}

// The server's STATS counter `name`, 0 when it has none.
inline uint64_t server_stat(Client& c, const std::string& name) {
  for (const auto& [k, v] : c.server_stats()) {
    if (k == name) return v;
  }
  return 0;
}

}  // namespace odafs::test
