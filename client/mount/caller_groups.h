// CallerGroups: the supplementary groups of a FUSE request's caller.
//
// The kernel sends a request's uid, gid and pid, not its groups; libfuse finds them by
// reading /proc/PID/task/PID/status (fuse_req_getgroups), a file read too costly for every
// request. They are kept per process for a short while instead (a process changes its
// groups rarely, and only before it works on files: login, su, newgrp): a change becomes
// visible within `ttl`, as would a pid reused that soon by another user's process, whose
// uid and gid must still match the kept entry.
//
// Thread-safety: fill() may be called from any number of threads at once.
#pragma once

#ifndef FUSE_USE_VERSION  // CMake picks 312 for libfuse >= 3.12, else 35
#define FUSE_USE_VERSION 35
#endif
#include <fuse3/fuse_lowlevel.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "rpc/message_header.h"

namespace odafs::mount {

class CallerGroups {
 public:
  explicit CallerGroups(std::chrono::milliseconds ttl = std::chrono::seconds(1)) : ttl_(ttl) {}
  CallerGroups(const CallerGroups&) = delete;
  CallerGroups& operator=(const CallerGroups&) = delete;

  // Sets id->gids / id->ngids to the groups of req's caller (at most 16: what AUTH_SYS
  // carries). Leaves them empty for root (who needs none) and for requests no process
  // made (pid 0), or when /proc cannot tell. Allocates nothing.
  // REQUIRES: id->uid and id->gid are req's caller's.
  void fill(fuse_req_t req, rpc::CallerCred* id);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    pid_t pid = 0;  // 0: empty
    uint32_t uid = 0;
    uint32_t gid = 0;
    Clock::time_point read_at{};
    uint32_t ngids = 0;
    uint32_t gids[16] = {};
  };

  const std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::array<Entry, 256> entries_{};  // by pid, direct-mapped; guarded by mu_
};

}  // namespace odafs::mount
