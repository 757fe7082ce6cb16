// Small helpers the benchmarks share: argument lists, server counters, JSON output.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"

namespace odafs::bench {

// "1,2,4" → {1, 2, 4}. Throws std::invalid_argument on a non-number.
inline std::vector<size_t> parse_list(const std::string& text) {
  std::vector<size_t> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(std::stoul(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

// The server's CPU microseconds by thread group ("rpc", "engine", "total"), from STATS.
inline std::map<std::string, uint64_t> server_cpu_us(odafs::Client& c) {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, value] : c.server_stats()) {
    if (name.rfind("cpu_us.", 0) == 0) out[name.substr(7)] = value;
  }
  return out;
}

// Prints json to stdout when path is empty, else writes it there. Throws odafs::Error.
inline void emit_json(const std::string& json, const std::string& path) {
  if (path.empty()) {
    std::printf("%s", json.c_str());
    return;
  }
  std::ofstream out(path);
  out << json;
  if (!out.flush()) throw odafs::Error(errno ? errno : EIO, "cannot write " + path);
  std::printf("JSON written to %s\n", path.c_str());
}

}  // namespace odafs::bench
