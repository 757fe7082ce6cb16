// CPU time of the server's own threads, by group ("rpc", later "engine"), read from the
// kernel's per-thread CPU clocks. The benchmarks divide it by operations served to get
// server CPU per operation.
//
// Thread-safety: all members are thread-safe.
#pragma once

#include <pthread.h>
#include <time.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace odafs::server {

class CpuAccounting {
 public:
  // Registers the calling thread under `group` until it calls leave().
  void join(const std::string& group);
  void leave();

  // Microseconds of CPU used by each group's threads, live and exited.
  std::map<std::string, uint64_t> usage_us() const;

 private:
  struct Member {
    pthread_t thread;
    clockid_t clock;
    std::string group;
  };
  static uint64_t read_us(clockid_t clock);

  mutable std::mutex mu_;
  std::vector<Member> live_;
  std::map<std::string, uint64_t> retired_us_;
};

}  // namespace odafs::server
