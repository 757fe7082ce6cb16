// Small helpers the benchmarks share: argument lists, server counters, JSON output.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// CPU microseconds (user + system, all threads) that process pid has used so far, from
// /proc/PID/stat (clock ticks: 10 ms on most kernels, so measure over many operations).
// Works for any server (odafsd, ganesha.nfsd), unlike STATS. Throws odafs::Error.
inline uint64_t process_cpu_us(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string stat;
  if (!std::getline(in, stat)) throw odafs::Error(ESRCH, "cannot read " + path);
  // Fields after the command (which may hold spaces) start after its closing ')':
  // state is field 3, utime 14 and stime 15.
  size_t pos = stat.rfind(')');
  if (pos == std::string::npos) throw odafs::Error(EIO, "cannot parse " + path);
  const char* p = stat.c_str() + pos + 2;
  uint64_t field[16] = {};
  for (int i = 3; i <= 15 && *p; ++i) {
    char* end = nullptr;
    field[i] = std::strtoull(p, &end, 10);
    if (i == 3) end = const_cast<char*>(p) + 1;  // state is a letter
    p = *end ? end + 1 : end;
  }
  const uint64_t ticks = field[14] + field[15];
  return ticks * 1000000 / static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
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
