// Small helpers the benchmarks share: argument lists, server counters, JSON output.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/client.h"

extern char** environ;

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

// "a,b" → {"a", "b"}.
inline std::vector<std::string> parse_words(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= text.size();) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
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

// The benchmarks' JSON: every row is built with one library (nlohmann/json), keys in the
// order they are set; rounded(x, d) keeps a figure to the d decimals its table shows.
using Json = nlohmann::ordered_json;
inline double rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
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
inline void emit_json(const Json& json, const std::string& path) {
  emit_json(json.dump(2) + "\n", path);
}

// A client process spawned from this very binary (argv[0] = /proc/self/exe, then args),
// talked to over its stdin (a byte: go) and stdout (lines). The benchmarks that need
// several client processes at once use it: one process per client, so that the clients
// do not share a library's locks.
class ChildProcess {
 public:
  // Throws odafs::Error.
  explicit ChildProcess(const std::vector<std::string>& args) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0) throw odafs::Error(errno, "pipe");
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      close(to_child[0]);
      close(to_child[1]);
      throw odafs::Error(errno, "pipe");
    }
    std::vector<std::string> all = {"/proc/self/exe"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
    int rc = posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to_child[0]);
    close(from_child[1]);
    in_ = to_child[1];
    out_ = fdopen(from_child[0], "r");
    if (rc != 0) {
      pid_ = -1;
      throw odafs::Error(rc, "spawn a client process");
    }
  }
  ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_), out_(o.out_), in_(o.in_) {
    o.pid_ = -1;
    o.out_ = nullptr;
    o.in_ = -1;
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (in_ >= 0) close(in_);
    if (out_ != nullptr) std::fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  // The next line the child printed. Throws odafs::Error when it died instead.
  std::string read_line() {
    char line[256];
    if (std::fgets(line, sizeof line, out_) == nullptr) throw odafs::Error(EIO, "a client died");
    return line;
  }
  void go() { (void)!write(in_, "g", 1); }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int in_ = -1;
};

// In a child: waits for the parent's go byte. False when the parent went away.
inline bool wait_for_go() {
  char go;
  return read(0, &go, 1) == 1;
}

}  // namespace odafs::bench
